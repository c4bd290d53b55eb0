// Spec 3.5, the STT worker machine (the life of one engine process on the CPU), row by row on a
// running actor with a simulated clock and a simulated engine: start and load, stay loaded for
// further recordings, unload on endpoint stop or a new build (SIGTERM, then SIGKILL after the
// grace), and an engine error reported at once. The shared process life (timeouts, generations,
// reachability) is tested in worker.test.ts.
import t, { type Test } from 'tap';
import { STT_WORKER_LIMITS, sttWorkerMachine, type SttLaunch } from '../../machines/sttWorker/index.js';
import { expectUnload, lifecycleHarness } from '../helpers/lifecycle.js';
import { sttStart } from '../helpers/workerStart.js';

const launch = (over: Partial<SttLaunch> = {}): SttLaunch => ({ generation: 1, profileId: 's', revision: 1, backend: 'pocketsphinx', model: undefined, threads: 2, ...over });

const harness = (input: { loadTimeLimitMs?: number; terminationGraceMs?: number } = {}) => lifecycleHarness(sttWorkerMachine, input);

interface Row {
  row: string;
  run: (h: ReturnType<typeof harness>, t: Test) => void;
}

const load = (h: ReturnType<typeof harness>, generation = 1) => {
  h.actor.send({ type: 'worker.start', start: sttStart(launch({ generation })) });
  h.engine({ type: 'engine.spawned', pid: 4000 + generation });
  h.engine({ type: 'engine.ready' });
};

const rows: Row[] = [
  {
    row: 'unloaded | first transcription request | | loaded (CPU) | one STT job at a time; worker stays loaded for further recordings',
    run: (h, t) => {
      t.equal(h.state(), '"unloaded"');
      h.actor.send({ type: 'worker.start', start: sttStart(launch()) });
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
        expectUnload(t, h, reason, STT_WORKER_LIMITS.terminationGraceMs);
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
      h.actor.send({ type: 'worker.start', start: sttStart(launch({ generation: 2 })) });
      t.equal(h.state(), '{"running":"loading"}', 'the next request starts it again');
    },
  },
];

t.test('spec 3.5 STT worker, row by row', async (t) => {
  t.equal(rows.length, 4, 'the two spec rows, the second for each of its three triggers that reach this machine');
  for (const row of rows) await t.test(row.row, async (t) => row.run(harness(), t));
});
