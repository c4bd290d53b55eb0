// What a local user can see of the image prompt on sd-cli's command line: the /proc mount's
// hidepid option, read from mountinfo as the kernel writes it (numbers on older kernels, names
// since 5.8), and on this machine.
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
  const here = await readFile('/proc/self/mountinfo', 'utf8');
  t.equal(await localCommandLinesHidden(), commandLinesHidden(here), `this machine: hidepid ${procHidepid(here)}`);
});
