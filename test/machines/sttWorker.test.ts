// Spec 3.5, the STT worker machine (the life of one engine process on the CPU), row by row on a
// running actor with a simulated clock and a simulated engine: start and load, stay loaded for
// further recordings, unload on endpoint stop or a new build (SIGTERM, then SIGKILL after the
// grace), and an engine error reported at once. Also every state reachable (xstate/graph).
import t, { type Test } from 'tap';
import { fromCallback } from 'xstate';
import { getShortestPaths, getStateNodes } from 'xstate/graph';
import { STT_WORKER_LIMITS, sttWorkerMachine, type SttLaunch } from '../../machines/sttWorker/index.js';
import { lifecycleHarness } from '../helpers/lifecycle.js';

const launch = (over: Partial<SttLaunch> = {}): SttLaunch => ({ generation: 1, profileId: 's', revision: 1, backend: 'pocketsphinx', model: undefined, threads: 2, ...over });

const harness = (input: { loadTimeLimitMs?: number; terminationGraceMs?: number } = {}) => lifecycleHarness(sttWorkerMachine, input);

interface Row {
  row: string;
  run: (h: ReturnType<typeof harness>, t: Test) => void;
}

const load = (h: ReturnType<typeof harness>, generation = 1) => {
  h.actor.send({ type: 'worker.start', launch: launch({ generation }) });
  h.engine({ type: 'engine.spawned', pid: 4000 + generation });
  h.engine({ type: 'engine.ready' });
};

const rows: Row[] = [
  {
    row: 'unloaded | first transcription request | | loaded (CPU) | one STT job at a time; worker stays loaded for further recordings',
    run: (h, t) => {
      t.equal(h.state(), '"unloaded"');
      h.actor.send({ type: 'worker.start', launch: launch() });
      t.equal(h.state(), '{"running":"loading"}', 'the engine loads');
      t.same(h.engines, [{ launch: launch() }], 'one engine with the profile snapshot');
      h.engine({ type: 'engine.spawned', pid: 4001 });
      h.engine({ type: 'engine.ready' });
      t.equal(h.state(), '{"running":"loaded"}');
      t.same(h.emitted, [
        { type: 'worker.started', kind: 'stt', generation: 1, pid: 4001 },
        { type: 'worker.loaded', kind: 'stt', generation: 1 },
      ]);
      h.clock.increment(STT_WORKER_LIMITS.loadTimeLimitMs * 10);
      t.equal(h.state(), '{"running":"loaded"}', 'it stays loaded for further recordings, however long');
      t.same(h.commands, [], 'no signal was sent');
    },
  },
  ...['endpoint stop', 'a new build'].map(
    (reason): Row => ({
      row: `loaded | ${reason} | | unloaded |`,
      run: (h, t) => {
        load(h);
        t.ok(h.actor.getSnapshot().can({ type: 'worker.unload', generation: 1, reason }));
        h.actor.send({ type: 'worker.unload', generation: 1, reason });
        t.equal(h.state(), '{"running":"unloading"}');
        t.same(h.commands, ['engine.stop'], 'SIGTERM first');
        h.clock.increment(STT_WORKER_LIMITS.terminationGraceMs - 1);
        t.same(h.commands, ['engine.stop'], 'no SIGKILL before the grace');
        h.clock.increment(1);
        t.same(h.commands, ['engine.stop', 'engine.kill'], 'SIGKILL after the grace');
        h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGKILL', cause: 'stopped', message: 'stopped' } });
        t.equal(h.state(), '"unloaded"');
        t.equal(h.actor.getSnapshot().context.last, reason, 'the status keeps why');
        t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'an unload we asked for is not an exit');
      },
    }),
  ),
  {
    row: 'loaded | an error | | unloaded |',
    run: (h, t) => {
      load(h);
      h.engine({ type: 'engine.exited', report: { exitCode: 1, signal: null, cause: 'model_error', message: 'The speech-to-text worker could not load its model.' } });
      t.equal(h.state(), '"unloaded"');
      t.same(h.emitted.at(-1), { type: 'worker.exited', kind: 'stt', generation: 1, cause: 'model_error', message: 'The speech-to-text worker could not load its model.' }, 'reported at once with the diagnosis');
      h.actor.send({ type: 'worker.start', launch: launch({ generation: 2 }) });
      t.equal(h.state(), '{"running":"loading"}', 'the next request starts it again');
    },
  },
];

t.test('spec 3.5 STT worker, row by row', async (t) => {
  t.equal(rows.length, 4, 'the two spec rows, the second for each of its three triggers that reach this machine');
  for (const row of rows) await t.test(row.row, async (t) => row.run(harness(), t));
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
  const h = harness({ loadTimeLimitMs: 5_000, terminationGraceMs: 1_000 });
  h.actor.send({ type: 'worker.start', launch: launch() });
  h.engine({ type: 'engine.spawned', pid: 4001 });
  h.clock.increment(4_999);
  t.equal(h.state(), '{"running":"loading"}');
  h.clock.increment(1);
  t.equal(h.state(), '{"running":"unloading"}');
  t.same(h.commands, ['engine.stop']);
  t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'reported once the process is gone');
  h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
  t.match(h.emitted.at(-1), { type: 'worker.exited', kind: 'stt', generation: 1, cause: 'timeout', message: /within 5 s \(timeout\)/ });
  t.equal(h.state(), '"unloaded"');
});

t.test('every state is reachable', async (t) => {
  const ids = getStateNodes(sttWorkerMachine.root).map((n) => n.id).sort();
  t.same(ids, ['sttWorker.running', 'sttWorker.running.loaded', 'sttWorker.running.loading', 'sttWorker.running.unloading', 'sttWorker.unloaded']);
  const paths = getShortestPaths(sttWorkerMachine.provide({ actors: { engine: fromCallback(() => undefined) } }), {
    events: [
      { type: 'worker.start', launch: launch() },
      { type: 'engine.ready' },
      { type: 'worker.unload', generation: 1, reason: 'stop' },
      { type: 'engine.exited', report: { exitCode: 0, signal: null, cause: 'stopped', message: 'x' } },
    ],
  });
  const reached = new Set(paths.map((p) => JSON.stringify(p.state.value)));
  for (const value of ['"unloaded"', '{"running":"loading"}', '{"running":"loaded"}', '{"running":"unloading"}']) t.ok(reached.has(value), `${value} is reachable`);
});
