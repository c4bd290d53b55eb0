// Workers die with the service: a program started through the launcher is
// killed by the kernel when the process that spawned it is killed with SIGKILL; without the
// launcher it outlives it. What a worker starts itself (a wrapper's server) runs in the worker's
// process group, which the watchdog kills when the service dies and the service kills when the
// worker has exited. The launcher keeps the worker's pid and command line, is proven once (a
// setpriv without --pdeathsig is not used) and steps aside for a missing program.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { diesWithService, parentDeathLauncher, startWorker } from '../../src/adapters/parentDeath.js';
import { findCommand } from '../../src/adapters/runtimes.js';
import { tempDir } from '../helpers/build.js';
import { alive, ended, until } from '../helpers/until.js';

const MODULE = fileURLToPath(new URL('../../src/adapters/parentDeath.ts', import.meta.url));
/** A wrapper that starts a server in the background and waits, as speech server commands do; it prints the server's pid. */
const WRAPPER = ['-c', 'sleep 600 & echo $!; wait'];

const killLater = (t: Test, ...pids: number[]) =>
  t.teardown(() => {
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
  });

/**
 * A stand-in for the service: a Node process that starts `program args` through this module, as
 * the service starts a worker (from its main thread), and prints one JSON line: the worker's pid,
 * the first line the worker printed (a grandchild's pid) and the watchdog's pid.
 */
async function serviceWithWorker(t: Test, program: string, args: string[], env: NodeJS.ProcessEnv) {
  const script = `
    const { diesWithService, startWorker, watchdogPid } = await import(${JSON.stringify(MODULE)});
    const child = startWorker(await diesWithService(${JSON.stringify(program)}, ${JSON.stringify(args)}, process.env), { stdin: 'ignore', stdout: 'pipe', stderr: 'inherit', buffer: false, reject: false });
    child.stdout.once('data', (line) => console.log(JSON.stringify({ worker: child.pid, printed: Number(String(line).trim()), watchdog: watchdogPid() ?? null })));
    setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => parent.kill('SIGKILL'));
  const pids = await new Promise<{ worker: number; printed: number; watchdog: number | null }>((resolve, reject) => {
    parent.stdout.once('data', (chunk: Buffer) => resolve(JSON.parse(chunk.toString()) as { worker: number; printed: number; watchdog: number | null }));
    parent.once('exit', () => reject(new Error('the parent ended before its worker started')));
  });
  killLater(t, pids.worker, pids.printed);
  return { parent, ...pids };
}

t.test('a worker started through setpriv dies with the process that spawned it; one started plainly does not', async (t) => {
  const sleep = (await findCommand('sleep', process.env))!;
  const command = await diesWithService(sleep, ['600', '7'], process.env);
  t.equal(path.basename(command.file), 'setpriv', 'setpriv is found on PATH');
  t.same(command, { file: command.file, args: ['--pdeathsig', 'KILL', '--', sleep, '600', '7'], grouped: true });

  // The parent starts setpriv itself here (not through startWorker): the parent-death signal alone.
  const script = `const c = require('node:child_process').spawn(${JSON.stringify(command.file)}, ${JSON.stringify(command.args)}, { stdio: 'ignore' }); c.on('spawn', () => console.log(c.pid)); setInterval(() => {}, 1000);`;
  const parentOf = async () => {
    const parent = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.teardown(() => parent.kill('SIGKILL'));
    const worker = await new Promise<number>((resolve) => parent.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))));
    killLater(t, worker);
    return { parent, worker };
  };
  const bound = await parentOf();
  // setpriv execs the program: the pid and the command line are the worker's own (the sweeps read them).
  const cmdline = await until('the worker to exec', async () => {
    const text = await readFile(`/proc/${bound.worker}/cmdline`, 'utf8');
    return text.startsWith(`${sleep}\0`) ? text : undefined;
  }, 5_000);
  t.same(cmdline.split('\0').filter(Boolean), [sleep, '600', '7'], 'the command line is the program’s, without setpriv');
  bound.parent.kill('SIGKILL');
  await until('the worker to die with its parent', async () => (ended(bound.worker) ? true : undefined), 2_000);
  t.ok(ended(bound.worker), 'the worker is gone within 2 s of its parent’s SIGKILL');

  const plain = await diesWithService(sleep, ['600'], { ...process.env, SERVICE_DECK_SETPRIV: 'off' });
  t.same(plain, { file: sleep, args: ['600'], grouped: false }, 'off: the program as it is, in the service’s own group');
  const unbound = spawn(process.execPath, ['-e', `const c = require('node:child_process').spawn(${JSON.stringify(sleep)}, ['600'], { stdio: 'ignore' }); c.on('spawn', () => console.log(c.pid)); setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => unbound.kill('SIGKILL'));
  const loose = await new Promise<number>((resolve) => unbound.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim()))));
  killLater(t, loose);
  unbound.kill('SIGKILL');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.notOk(ended(loose), 'without the launcher the worker outlives its killed parent');
});

t.test('what a worker starts itself dies with the service too: the watchdog kills the worker’s process group', async (t) => {
  const sh = (await findCommand('sh', process.env))!;
  const bound = await serviceWithWorker(t, sh, WRAPPER, process.env);
  t.not(bound.printed, bound.worker, 'the wrapper started a server of its own');
  t.ok(alive(bound.worker) && alive(bound.printed), `the wrapper ${bound.worker} and its server ${bound.printed} run`);
  const watchdog = bound.watchdog;
  t.ok(watchdog !== null && alive(watchdog), 'the watchdog runs');
  /** The process group of a process; the session is read as well: a new session makes a new group. */
  const group = (pid: number) => {
    const fields = (alive(pid) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '').replace(/^.*\) /s, '').split(' ');
    return { group: Number(fields[2]), session: Number(fields[3]) };
  };
  t.same(group(bound.worker), { group: bound.worker, session: bound.worker }, 'the worker leads a process group (and session) of its own');
  t.equal(group(bound.printed).group, bound.worker, 'its server is in that group');
  if (watchdog !== null) t.same(group(watchdog), { group: watchdog, session: watchdog }, 'the watchdog is in a group and session of its own, away from the service’s signals');

  bound.parent.kill('SIGKILL');
  await until('the worker and its server to die with the service', async () => (ended(bound.worker) && ended(bound.printed) ? true : undefined), 2_000).catch(() => undefined);
  t.ok(ended(bound.worker), 'the wrapper is gone within 2 s of the service’s SIGKILL');
  t.ok(ended(bound.printed), 'the server it started is gone too');
  if (watchdog !== null) {
    await until('the watchdog to end', async () => (ended(watchdog) ? true : undefined), 2_000).catch(() => undefined);
    t.ok(ended(watchdog), 'the watchdog ends with them');
  }

  const loose = await serviceWithWorker(t, sh, WRAPPER, { ...process.env, SERVICE_DECK_SETPRIV: 'off' });
  t.equal(loose.watchdog, null, 'off: no watchdog');
  loose.parent.kill('SIGKILL');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.notOk(ended(loose.printed), 'off: the server outlives the killed service (the next start’s sweep is the net)');
});

t.test('a worker that exits leaves nothing behind: its group is killed, also when a grandchild holds its output', async (t) => {
  const sh = (await findCommand('sh', process.env))!;
  for (const env of [process.env, { ...process.env, SERVICE_DECK_SETPRIV: 'off' }]) {
    const off = env.SERVICE_DECK_SETPRIV === 'off';
    // The wrapper exits at once; its server keeps the wrapper's stdout open.
    const child = startWorker(await diesWithService(sh, ['-c', 'sleep 600 & echo $!'], env), { stdin: 'ignore', stdout: 'pipe', stderr: 'ignore', buffer: false, reject: false });
    const server = await new Promise<number>((resolve) => child.stdout.once('data', (line: Buffer) => resolve(Number(String(line).trim()))));
    killLater(t, server);
    await until('the wrapper to exit', async () => (child.exitCode !== null ? true : undefined), 5_000);
    await until('its server to end', async () => (ended(server) ? true : undefined), 2_000).catch(() => undefined);
    if (off) t.notOk(ended(server), 'off: the server stays (as before)');
    else if (t.ok(ended(server), 'the server the wrapper left behind is killed within 2 s of the wrapper’s exit')) {
      const result = await child;
      t.equal(result.exitCode, 0, 'and the worker’s end is reported (its output closed)');
    }
  }
});

t.test('the launcher is proven once, and steps aside for a missing program', async (t) => {
  const dir = await tempDir(t);
  const old = path.join(dir, 'setpriv');
  // A setpriv from before util-linux 2.33 does not know --pdeathsig.
  await writeFile(old, `#!/bin/sh\necho run >> "${old}.runs"\necho "setpriv: unrecognized option '--pdeathsig'" >&2\nexit 1\n`);
  await chmod(old, 0o755);
  const env = { ...process.env, SERVICE_DECK_SETPRIV: old };
  t.equal(await parentDeathLauncher(env), undefined, 'a setpriv without --pdeathsig is not used');
  t.same(await diesWithService('/bin/true', ['x'], env), { file: '/bin/true', args: ['x'], grouped: true }, 'the process group and watchdog still bind it');
  t.equal((await readFile(`${old}.runs`, 'utf8')).split('\n').filter(Boolean).length, 1, 'it was run once, and the answer kept');
  t.equal(await parentDeathLauncher({ ...process.env, SERVICE_DECK_SETPRIV: path.join(dir, 'absent') }), undefined, 'a setting that names no program: none');

  const missing = path.join(dir, 'not-installed');
  t.same(await diesWithService(missing, ['a'], process.env), { file: missing, args: ['a'], grouped: true }, 'a missing program keeps its own spawn error');
});
