// Workers die with the service (issue 15 item 9): a program started through the launcher is
// killed by the kernel when the process that spawned it is killed with SIGKILL; without the
// launcher it outlives it. The launcher keeps the worker's pid and command line, is proven once
// (a setpriv without --pdeathsig is not used) and steps aside for a missing program.
import { spawn } from 'node:child_process';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { diesWithService, parentDeathLauncher } from '../../src/adapters/parentDeath.js';
import { findCommand } from '../../src/adapters/runtimes.js';
import { tempDir } from '../helpers/build.js';
import { alive, ended, until } from '../helpers/until.js';

/**
 * A stand-in for the service: a Node process that spawns `file argv` as Node spawns workers (from
 * its main thread) and prints the worker's pid; returns both pids.
 */
async function parentWithWorker(t: Test, file: string, argv: string[]) {
  const script = `const c = require('node:child_process').spawn(${JSON.stringify(file)}, ${JSON.stringify(argv)}, { stdio: 'ignore' }); c.on('spawn', () => console.log(c.pid)); setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => parent.kill('SIGKILL'));
  const worker = await new Promise<number>((resolve, reject) => {
    parent.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim())));
    parent.once('exit', () => reject(new Error('the parent ended before its worker started')));
  });
  t.teardown(() => {
    if (alive(worker)) process.kill(worker, 'SIGKILL');
  });
  return { parent, worker };
}

t.test('a worker started through setpriv dies with the process that spawned it; one started plainly does not', async (t) => {
  const sleep = (await findCommand('sleep', process.env))!;
  const [file, argv] = await diesWithService(sleep, ['600', '7'], process.env);
  t.equal(path.basename(file), 'setpriv', 'setpriv is found on PATH');
  t.same(argv, ['--pdeathsig', 'KILL', '--', sleep, '600', '7']);

  const bound = await parentWithWorker(t, file, argv);
  // setpriv execs the program: the pid and the command line are the worker's own (the sweeps read them).
  const cmdline = await until('the worker to exec', async () => {
    const text = await readFile(`/proc/${bound.worker}/cmdline`, 'utf8');
    return text.startsWith(`${sleep}\0`) ? text : undefined;
  }, 5_000);
  t.same(cmdline.split('\0').filter(Boolean), [sleep, '600', '7'], 'the command line is the program’s, without setpriv');
  bound.parent.kill('SIGKILL');
  await until('the worker to die with its parent', async () => (ended(bound.worker) ? true : undefined), 2_000);
  t.ok(ended(bound.worker), 'the worker is gone within 2 s of its parent’s SIGKILL');

  const [plainFile, plainArgv] = await diesWithService(sleep, ['600'], { ...process.env, SERVICE_DECK_SETPRIV: 'off' });
  t.same([plainFile, plainArgv], [sleep, ['600']], 'off: the program as it is');
  const plain = await parentWithWorker(t, plainFile, plainArgv);
  plain.parent.kill('SIGKILL');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.notOk(ended(plain.worker), 'without the launcher the worker outlives its killed parent');
});

t.test('the launcher is proven once, and steps aside for a missing program', async (t) => {
  const dir = await tempDir(t);
  const old = path.join(dir, 'setpriv');
  // A setpriv from before util-linux 2.33 does not know --pdeathsig.
  await writeFile(old, `#!/bin/sh\necho run >> "${old}.runs"\necho "setpriv: unrecognized option '--pdeathsig'" >&2\nexit 1\n`);
  await chmod(old, 0o755);
  const env = { ...process.env, SERVICE_DECK_SETPRIV: old };
  t.equal(await parentDeathLauncher(env), undefined, 'a setpriv without --pdeathsig is not used');
  t.same(await diesWithService('/bin/true', ['x'], env), ['/bin/true', ['x']]);
  t.equal((await readFile(`${old}.runs`, 'utf8')).split('\n').filter(Boolean).length, 1, 'it was run once, and the answer kept');
  t.equal(await parentDeathLauncher({ ...process.env, SERVICE_DECK_SETPRIV: path.join(dir, 'absent') }), undefined, 'a setting that names no program: none');

  const missing = path.join(dir, 'not-installed');
  t.same(await diesWithService(missing, ['a'], process.env), [missing, ['a']], 'a missing program keeps its own spawn error');
});
