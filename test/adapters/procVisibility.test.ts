// What a local user can see of the image prompt on sd-cli's command line: the /proc mount's
// hidepid option, read from mountinfo as the kernel writes it (numbers on older kernels, names
// since 5.8), and on this machine against what another user can really read.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { commandLinesHidden, localCommandLinesHidden, procHidepid } from '../../src/adapters/procVisibility.js';

const line = (mountpoint: string, type: string, superOptions: string) => `22 27 0:21 / ${mountpoint} rw,nosuid,nodev,noexec,relatime shared:12 - ${type} ${type} ${superOptions}`;

t.test('the hidepid option of the /proc mount', async (t) => {
  const rows: Array<[string, string, boolean]> = [
    [line('/proc', 'proc', 'rw'), '0', false],
    [line('/proc', 'proc', 'rw,hidepid=invisible'), 'invisible', true],
    [line('/proc', 'proc', 'rw,hidepid=2,gid=27'), '2', true],
    [line('/proc', 'proc', 'rw,hidepid=noaccess'), 'noaccess', true],
    [line('/proc', 'proc', 'rw,hidepid=off'), 'off', false],
    [`${line('/', 'ext4', 'rw,hidepid=2')}\n${line('/proc', 'proc', 'rw')}`, '0', false],
    [`${line('/tmp/proc', 'proc', 'rw,hidepid=2')}\n${line('/proc', 'proc', 'rw')}`, '0', false],
    ['', '0', false],
  ];
  for (const [mountinfo, hidepid, hidden] of rows) {
    t.equal(procHidepid(mountinfo), hidepid, `${JSON.stringify(mountinfo.split('\n').at(-1))}: hidepid ${hidepid}`);
    t.equal(commandLinesHidden(mountinfo), hidden);
  }
});

/**
 * Whether another user can read this process's command line, found by trying: a process of the
 * user nobody (setpriv drops root's rights; as another user the test reads a root process's line).
 * Undefined when neither is possible here.
 */
function otherUserReads(): Promise<boolean | undefined> {
  const target = process.getuid?.() === 0 ? process.pid : 1;
  const command =
    process.getuid?.() === 0
      ? ['setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'cat', `/proc/${target}/cmdline`]]
      : ['cat', [`/proc/${target}/cmdline`]];
  return new Promise((resolve) => {
    execFile(command[0] as string, command[1] as string[], (error, stdout) => {
      if (error && (error as NodeJS.ErrnoException).code === 'ENOENT') resolve(undefined);
      else resolve(!error && stdout.length > 0);
    });
  });
}

t.test("this machine: the answer matches what another user can really read of the service's command line", async (t) => {
  const here = await readFile('/proc/self/mountinfo', 'utf8');
  const reads = await otherUserReads();
  if (reads === undefined) {
    t.pass('another user cannot be tried here', { skip: 'needs setpriv (as root) or another user\'s process' });
    return;
  }
  t.equal(await localCommandLinesHidden(), !reads, `this machine: hidepid ${procHidepid(here)}, another user ${reads ? 'reads' : 'cannot read'} the command line`);
});
