// The worker process life the chat, image, STT and TTS machines are made from (machines/worker/lifecycle.ts), on a
// machine made here with its own limits, on a simulated clock and a simulated engine: loading until
// ready, loaded, the supervisor's unload (SIGTERM, then SIGKILL after the grace), an unload of
// another generation ignored, a start that does not load in time, an engine that fails to load or
// dies while loaded, and every state reachable. The spec rows of each machine are tested in
// sttWorker.test.ts and ttsWorker.test.ts.
import t from 'tap';
import { fromCallback } from 'xstate';
import { getShortestPaths, getStateNodes } from 'xstate/graph';
import { lifecycleMachine, type LaunchBase } from '../../machines/worker/lifecycle.js';
import { expectUnload, lifecycleHarness } from '../helpers/lifecycle.js';
import { baseLaunch, baseStart } from '../helpers/workerStart.js';

const LIMITS = { loadTimeLimitMs: 5_000, terminationGraceMs: 1_000 };
const machine = lifecycleMachine<LaunchBase, 'stt'>({
  id: 'testWorker',
  kind: 'stt',
  name: 'test worker',
  limits: LIMITS,
  launch: baseLaunch,
  rows: { start: 'start row', cancel: 'cancel row', unload: 'unload row', error: 'error row' },
});
const launch = (generation = 1): LaunchBase => ({ generation, profileId: 'p', revision: 1 });
const harness = (input = {}) => lifecycleHarness(machine, input);
const load = (h: ReturnType<typeof harness>, generation = 1) => {
  h.actor.send({ type: 'worker.start', start: baseStart(launch(generation)) });
  h.engine({ type: 'engine.spawned', pid: 4000 + generation });
  h.engine({ type: 'engine.ready' });
};

t.test('the spec rows quoted by the machine are its transitions', async (t) => {
  const json = JSON.stringify(machine.root.definition);
  for (const row of ['start row', 'cancel row', 'unload row', 'error row']) t.ok(json.includes(row), `"${row}" describes a transition`);
});

t.test('a start loads and stays loaded; the unload, while loaded and while loading', async (t) => {
  const h = harness();
  load(h);
  t.equal(h.state(), '{"running":"loaded"}');
  t.same(h.emitted, [
    { type: 'worker.started', kind: 'stt', generation: 1, pid: 4001 },
    { type: 'worker.loaded', kind: 'stt', generation: 1 },
  ]);
  h.clock.increment(LIMITS.loadTimeLimitMs * 10);
  t.equal(h.state(), '{"running":"loaded"}', 'the load limit does not reach a loaded worker');
  expectUnload(t, h, 'endpoint stop', LIMITS.terminationGraceMs);

  const loading = harness();
  loading.actor.send({ type: 'worker.start', start: baseStart(launch()) });
  loading.engine({ type: 'engine.spawned', pid: 4001 });
  expectUnload(t, loading, 'endpoint stop', LIMITS.terminationGraceMs);
  loading.engine({ type: 'engine.ready' });
  t.equal(loading.state(), '"unloaded"', 'a late ready does not revive an unloaded start');
});

t.test('an unload naming another generation changes nothing', async (t) => {
  const h = harness();
  load(h, 3);
  t.notOk(h.actor.getSnapshot().can({ type: 'worker.unload', generation: 2, reason: 'late' }));
  h.actor.send({ type: 'worker.unload', generation: 2, reason: 'late' });
  t.equal(h.state(), '{"running":"loaded"}');
  t.same(h.commands, []);
});

t.test('an engine that does not load in time is stopped and reported as a timeout', async (t) => {
  for (const input of [{}, { loadTimeLimitMs: 2_000, terminationGraceMs: 500 }]) {
    const limit = (input as { loadTimeLimitMs?: number }).loadTimeLimitMs ?? LIMITS.loadTimeLimitMs;
    const h = harness(input);
    h.actor.send({ type: 'worker.start', start: baseStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 4001 });
    h.clock.increment(limit - 1);
    t.equal(h.state(), '{"running":"loading"}', `not before ${limit} ms`);
    h.clock.increment(1);
    t.equal(h.state(), '{"running":"unloading"}');
    t.same(h.commands, ['engine.stop']);
    t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'reported once the process is gone');
    h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
    t.same(h.emitted.at(-1), {
      type: 'worker.exited',
      kind: 'stt',
      generation: 1,
      cause: 'timeout',
      message: `The test worker did not become ready within ${limit / 1000} s (timeout); it was stopped.`,
    });
    t.equal(h.state(), '"unloaded"');
  }
});

t.test('an engine that ends on its own is reported at once, loading or loaded; the next start loads again', async (t) => {
  const report = { exitCode: 1, signal: null, cause: 'model_error', message: 'The test worker could not load its model.' };
  const loading = harness();
  loading.actor.send({ type: 'worker.start', start: baseStart(launch()) });
  loading.engine({ type: 'engine.exited', report });
  t.same(loading.emitted.at(-1), { type: 'worker.exited', kind: 'stt', generation: 1, cause: 'model_error', message: report.message });
  t.equal(loading.state(), '"unloaded"');
  t.equal(loading.actor.getSnapshot().context.last, report.message, 'the status keeps the diagnosis');

  const loaded = harness();
  load(loaded);
  loaded.engine({ type: 'engine.exited', report });
  t.same(loaded.emitted.at(-1), { type: 'worker.exited', kind: 'stt', generation: 1, cause: 'model_error', message: report.message });
  load(loaded, 2);
  t.equal(loaded.state(), '{"running":"loaded"}');
  t.same(loaded.engines.map((e) => e.launch.generation), [1, 2], 'one engine per start');
});

t.test('every state is reachable', async (t) => {
  const ids = getStateNodes(machine.root).map((n) => n.id).sort();
  t.same(ids, ['testWorker.running', 'testWorker.running.loaded', 'testWorker.running.loading', 'testWorker.running.lost', 'testWorker.running.unloading', 'testWorker.unloaded']);
  // running.lost is reached by a delay (the kill limit after SIGKILL): test/machines/chatWorker.test.ts reaches it on a clock.
  const paths = getShortestPaths(machine.provide({ actors: { engine: fromCallback(() => undefined) } }), {
    input: {},
    events: [
      { type: 'worker.start', start: baseStart(launch()) },
      { type: 'engine.ready' },
      { type: 'worker.unload', generation: 1, reason: 'stop' },
      { type: 'engine.exited', report: { exitCode: 0, signal: null, cause: 'stopped', message: 'x' } },
    ],
  });
  const reached = new Set(paths.map((p) => JSON.stringify(p.state.value)));
  for (const value of ['"unloaded"', '{"running":"loading"}', '{"running":"loaded"}', '{"running":"unloading"}']) t.ok(reached.has(value), `${value} is reachable`);
});
