// Spec 3.4, the TTS worker machine, row by row on a running actor with a simulated clock and a
// simulated engine: the first speech request loads it and it stays ready; an image job, an
// incompatible GPU change or the endpoint stop unloads it (SIGTERM, then SIGKILL after the grace);
// an engine that ends on its own is reported at once. The 7 GiB condition is the supervisor's
// memory check (test/machines/fit.test.ts); here the start arrives only when it passed.
import t, { type Test } from 'tap';
import { TTS_WORKER_LIMITS, ttsWorkerMachine, type TtsLaunch } from '../../machines/ttsWorker/index.js';
import { expectUnload, lifecycleHarness } from '../helpers/lifecycle.js';
import { ttsStart } from '../helpers/workerStart.js';

const launch = (over: Partial<TtsLaunch> = {}): TtsLaunch => ({ generation: 1, profileId: 'tts', revision: 1, backend: 'espeak-ng', device: 'cpu', command: undefined, ...over });
const harness = () => lifecycleHarness(ttsWorkerMachine);
const load = (h: ReturnType<typeof harness>, generation = 1) => {
  h.actor.send({ type: 'worker.start', start: ttsStart(launch({ generation })) });
  h.engine({ type: 'engine.spawned', pid: 5000 + generation });
  h.engine({ type: 'engine.ready' });
};

const unloadRow = (reason: string) => async (t: Test) => {
  const h = harness();
  load(h);
  expectUnload(t, h, reason, TTS_WORKER_LIMITS.terminationGraceMs);
};

t.test('spec 3.4 TTS worker, row by row', async (t) => {
  await t.test('unloaded | first speech request | the designated GPU has at least 7 GiB free | loaded | worker stays ready for further requests', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: ttsStart(launch({ device: 'GPU-a' })) });
    t.same(h.engines, [{ launch: launch({ device: 'GPU-a' }) }], 'the engine gets the profile snapshot and its device');
    h.engine({ type: 'engine.spawned', pid: 5001 });
    h.engine({ type: 'engine.ready' });
    t.equal(h.state(), '{"running":"loaded"}');
    t.same(h.emitted, [
      { type: 'worker.started', kind: 'tts', generation: 1, pid: 5001 },
      { type: 'worker.loaded', kind: 'tts', generation: 1 },
    ]);
    h.clock.increment(TTS_WORKER_LIMITS.loadTimeLimitMs * 10);
    t.equal(h.state(), '{"running":"loaded"}', 'it stays ready for further requests');
    t.same(h.commands, []);
  });
  // The row's three triggers (an image job, an incompatible GPU profile change, the endpoint stop)
  // are the supervisor's decisions, each a row of test/machines/supervisor.test.ts; the worker
  // machine gets one `worker.unload` for all of them, and keeps its reason for the status.
  await t.test(
    'loaded | exclusive image or video mode, incompatible GPU profile change, endpoint stop (the supervisor\'s worker.unload) | | unloaded | foreign GPU processes are never ended',
    unloadRow('an image job needs every GPU'),
  );
});

t.test('an engine that ends on its own is reported at once; the next request loads again', async (t) => {
  const h = harness();
  load(h);
  h.engine({ type: 'engine.exited', report: { exitCode: 1, signal: null, cause: 'unclear', message: 'The text-to-speech worker exited with code 1.' } });
  t.same(h.emitted.at(-1), { type: 'worker.exited', kind: 'tts', generation: 1, cause: 'unclear', message: 'The text-to-speech worker exited with code 1.' });
  t.equal(h.state(), '"unloaded"');
  load(h, 2);
  t.equal(h.state(), '{"running":"loaded"}');
});
