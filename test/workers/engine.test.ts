// The one process protocol of every engine (src/workers/engine.ts), row by row, with real
// processes (sh): what the machine hears (engine.spawned, engine.ready, engine.exited and its
// cause), what the process gets (SIGTERM, SIGKILL, its group), the record the next start's sweep
// reads, and the cleanup of what a start made, exactly once.
import { existsSync, readdirSync } from 'node:fs';
import t, { type Test } from 'tap';
import type { EngineCommand } from '../../machines/worker/lifecycle.js';
import type { Logger } from '../../src/system/observe/log.js';
import { runEngine, type EngineEvent, type StartHooks, type Prepared } from '../../src/workers/engine.js';
import { tempDir } from '../helpers/build.js';
import { alive, ended, until } from '../helpers/until.js';

/** One start run by the factory, with everything it reports and logs recorded. */
function start(t: Test, hooks: StartHooks, runtimeDir?: string) {
  const events: EngineEvent[] = [];
  const logged: Array<{ level: string; message: string }> = [];
  let cleanups = 0;
  let listener: ((command: EngineCommand) => void) | undefined;
  const log = Object.fromEntries(['info', 'warn', 'error'].map((level) => [level, (_fields: object, message: string) => logged.push({ level, message })])) as unknown as Logger;
  const stop = runEngine(
    {
      worker: 'stt',
      name: 'speech-to-text worker',
      log,
      runtimeDir,
      ...hooks,
      cleanup: () => {
        cleanups += 1;
        hooks.cleanup?.();
      },
    },
    { generation: 7, profileId: 'p', revision: 1 },
    (event) => events.push(event),
    (receive) => (listener = receive),
  );
  t.teardown(stop);
  const types = () => events.map((e) => e.type);
  const exited = () => until('engine.exited', async () => events.find((e): e is Extract<EngineEvent, { type: 'engine.exited' }> => e.type === 'engine.exited'), 20_000);
  const pid = async () => (await until('engine.spawned', async () => events.find((e): e is Extract<EngineEvent, { type: 'engine.spawned' }> => e.type === 'engine.spawned'), 20_000)).pid;
  return { events, types, logged, exited, pid, stop, command: (type: EngineCommand['type']) => listener!({ type }), cleanups: () => cleanups };
}

/** A process of sh running `script`, not bound to the service's life (the test ends it). */
const shell = (script: string, extra: Partial<Extract<Prepared, { command: unknown }>> = {}): Prepared => ({
  command: { file: 'sh', args: ['-c', script], grouped: false },
  options: { env: { PATH: process.env.PATH ?? '' } },
  ...extra,
});

t.test('a runtime missing: reported at once, nothing spawned', async (t) => {
  const s = start(t, { prepare: async () => ({ unable: { cause: 'runtime_missing', message: 'not installed' } }) });
  const exit = await s.exited();
  t.match(exit.report, { cause: 'runtime_missing', message: 'not installed', exitCode: null });
  t.same(s.types(), ['engine.exited'], 'no spawn, no ready');
  t.equal(s.cleanups(), 1, 'cleaned up once');
});

t.test('an engine without a process: ready at once; a stop reports stopped', async (t) => {
  const s = start(t, { prepare: async () => ({ ready: true }) });
  await until('ready', async () => (s.types().includes('engine.ready') ? true : undefined));
  t.equal(s.cleanups(), 0, 'nothing cleaned while it is loaded');
  s.command('engine.stop');
  t.match((await s.exited()).report, { cause: 'stopped', message: 'The speech-to-text worker was stopped as requested.' });
  t.same(s.types(), ['engine.ready', 'engine.exited']);
  t.equal(s.cleanups(), 1, 'cleaned up once');
});

t.test('a process: spawned, recorded, ready when it answers, SIGTERM on stop, stopped, record gone', async (t) => {
  const runtime = await tempDir(t);
  let polls = 0;
  const s = start(
    t,
    {
      prepare: async () => shell('trap "exit 0" TERM; echo "$DECK_WORKER_TAG" > tag; while :; do sleep 0.05; done', { port: 1, options: { cwd: runtime, env: { PATH: process.env.PATH ?? '' } } }),
      answers: async () => {
        polls += 1;
        return polls >= 3;
      },
    },
    runtime,
  );
  const pid = await s.pid();
  t.ok(alive(pid), 'the process runs');
  await until('ready', async () => (s.types().includes('engine.ready') ? true : undefined));
  t.ok(polls >= 3, `ready only once it answered (${polls} polls)`);
  const records = readdirSync(runtime).filter((n) => n.endsWith('.pid'));
  t.match(records, [/^stt-7-\d+\.pid$/], 'recorded for the next start');
  t.match(s.events[0], { type: 'engine.spawned', pid, port: 1 });
  s.command('engine.stop');
  t.match((await s.exited()).report, { cause: 'stopped' }, 'a stop we asked for');
  t.ok(ended(pid), 'the process is gone');
  t.same(s.types(), ['engine.spawned', 'engine.ready', 'engine.exited']);
  await until('the record removed', async () => (readdirSync(runtime).some((n) => n.endsWith('.pid')) ? undefined : true));
  t.equal(s.cleanups(), 1, 'cleaned up once');
  t.match(s.logged, [{ level: 'info', message: 'speech-to-text worker started' }], 'its start logged, its stop not warned');
});

t.test('a process that ignores SIGTERM ends on engine.kill', async (t) => {
  const s = start(t, { prepare: async () => shell('trap "" TERM; echo up; while :; do sleep 0.05; done'), spawned: (child, engine) => child.stdout?.once('data', () => engine.ready()) });
  const pid = await s.pid();
  await until('ready', async () => (s.types().includes('engine.ready') ? true : undefined));
  s.command('engine.stop');
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.ok(alive(pid) && !ended(pid), 'SIGTERM was ignored');
  t.notOk(s.types().includes('engine.exited'), 'nothing reported while it runs');
  s.command('engine.kill');
  t.match((await s.exited()).report, { cause: 'stopped', signal: 'SIGKILL' });
});

/**
 * A start stopped while its preparation is held: nothing is cleaned until `release` lets the
 * preparation answer (with a process that would leave a marker), then it is cleaned and the
 * process never runs.
 */
async function dropPrepared(t: Test, s: ReturnType<typeof start>, release: (prepared: Prepared) => void): Promise<void> {
  t.equal(s.cleanups(), 0, 'nothing cleaned while the preparation runs');
  const marker = `${await tempDir(t)}/spawned`;
  release(shell(`touch ${marker}; sleep 5`));
  await until('the preparation dropped', async () => (s.cleanups() > 0 ? true : undefined));
  // Anything that would still run after the preparation has had its turn by now.
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.notOk(existsSync(marker), 'the prepared process never ran');
}

t.test('a stop while the start is prepared: stopped at once, the preparation dropped once it answered, nothing spawned', async (t) => {
  let release: (prepared: Prepared) => void = () => undefined;
  let prepared = false;
  const s = start(t, {
    prepare: () =>
      new Promise<Prepared>((resolve) => (release = resolve)).then((made) => {
        prepared = true;
        return made;
      }),
    cleanup: () => t.ok(prepared, 'the cleanup comes after the preparation, so it finds what that made'),
  });
  s.command('engine.stop');
  t.match((await s.exited()).report, { cause: 'stopped', exitCode: null });
  await dropPrepared(t, s, release);
  t.same(s.types(), ['engine.exited'], 'reported once');
  t.equal(s.cleanups(), 1, 'cleaned up once');
});

t.test('a stop while a preparation that finds the runtime missing runs: reported stopped once, cleaned up once', async (t) => {
  let release: (prepared: Prepared) => void = () => undefined;
  const s = start(t, { prepare: () => new Promise<Prepared>((resolve) => (release = resolve)) });
  s.command('engine.stop');
  t.match((await s.exited()).report, { cause: 'stopped' });
  t.equal(s.cleanups(), 0, 'nothing cleaned while the preparation runs');
  release({ unable: { cause: 'runtime_missing', message: 'not installed' } });
  await until('the preparation dropped', async () => (s.cleanups() > 0 ? true : undefined));
  t.same(s.types(), ['engine.exited'], 'the stop was its one report');
  t.equal(s.cleanups(), 1, 'cleaned up once');
});

t.test('the actor stops while the start is prepared: nothing reported, nothing spawned, cleaned up once after the preparation', async (t) => {
  let release: (prepared: Prepared) => void = () => undefined;
  const s = start(t, { prepare: () => new Promise<Prepared>((resolve) => (release = resolve)) });
  s.stop();
  await dropPrepared(t, s, release);
  t.same(s.types(), [], 'nothing reported after the stop');
  t.equal(s.cleanups(), 1, 'cleaned up once');
});

t.test('a process that dies on its own: diagnosed, warned, reported with its exit', async (t) => {
  const s = start(t, { prepare: async () => shell('echo "llama_model_load: error loading model: unknown model architecture" >&2; exit 3') });
  const exit = await s.exited();
  t.match(exit.report, { exitCode: 3, cause: 'model_error' }, 'the diagnosis reads its output');
  t.match(s.logged, [{ level: 'info' }, { level: 'warn', message: 'speech-to-text worker ended' }]);
});

t.test('fail(): the process group is killed and the hooks\' failure is the report', async (t) => {
  const s = start(t, {
    prepare: async () => ({ ...shell('sleep 30 & echo "$!" ; wait', { port: 1, group: true }), command: { file: 'sh', args: ['-c', 'sleep 30 & echo "$!"; wait'], grouped: true } }),
    answers: async (_port, engine) => {
      engine.fail('it listens beyond loopback');
      return false;
    },
  });
  const exit = await s.exited();
  t.match(exit.report, { cause: 'unclear', message: 'it listens beyond loopback', signal: 'SIGKILL' });
  t.notOk(s.types().includes('engine.ready'), 'never ready');
});

t.test("exitedAs: a process whose work is done is ready; a stop afterwards reports stopped; the tail is filtered", async (t) => {
  const done = start(t, { prepare: async () => shell('exit 0'), exitedAs: async (result) => (result.exitCode === 0 ? 'ready' : undefined) });
  await until('ready', async () => (done.types().includes('engine.ready') ? true : undefined));
  done.command('engine.stop');
  t.match((await done.exited()).report, { cause: 'stopped', exitCode: 0 });
  let seen = '';
  const failed = start(t, {
    prepare: async () => shell('echo "secret prompt: a cat"; exit 1'),
    tailText: (text) => {
      seen = text;
      return text.replace('secret prompt: a cat', '');
    },
  });
  t.match((await failed.exited()).report, { exitCode: 1 });
  t.match(seen, /secret prompt/, 'the diagnosis asked for the tail through the filter');
});

t.test('the actor stops: its process is killed and nothing more is reported', async (t) => {
  const s = start(t, { prepare: async () => shell('trap "" TERM; while :; do sleep 0.05; done') });
  const pid = await s.pid();
  s.stop();
  await until('the process gone', async () => (ended(pid) ? true : undefined), 5_000);
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.same(s.types(), ['engine.spawned'], 'no report after the stop');
  t.equal(s.cleanups(), 1, 'cleaned up once');
});
