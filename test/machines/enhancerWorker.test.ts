// Spec 4.7, the prompt enhancer worker machine, row by row on a running actor with a simulated clock
// and a simulated llama-server process: loaded on demand for one image job (its start comes with
// the job's grant of every GPU), ended once it answered (the supervisor's unload: SIGTERM, then
// SIGKILL), a start whose job left is aborted, a process that dies is reported at once, one that
// does not load in time is stopped. Which job gets it, and that the image worker starts only after
// it is gone, are the supervisor's (test/machines/supervisor.test.ts); the command line is args.ts's.
import t from 'tap';
import { SERVER_DEFAULTS } from '../../machines/chatWorker/index.js';
import { ENHANCER_WORKER_LIMITS, enhancerArgs, enhancerWorkerMachine, type EnhancerLaunch } from '../../machines/enhancerWorker/index.js';
import { expectUnload, lifecycleHarness } from '../helpers/lifecycle.js';
import { enhancerStart } from '../helpers/workerStart.js';

const launch = (over: Partial<EnhancerLaunch> = {}): EnhancerLaunch => ({
  generation: 1,
  profileId: 'img',
  revision: 2,
  name: 'prompt-enhancer-t2i',
  model: '/state/enhancers/t2i/model.gguf',
  context: 8192,
  slots: 1,
  gpuLayers: 40,
  tensorSplit: null,
  overrides: [],
  gpus: ['GPU-a', 'GPU-b'],
  task: 't2i',
  mmproj: null,
  ...over,
});
const harness = (input: { loadTimeLimitMs?: number } = {}) => lifecycleHarness(enhancerWorkerMachine, input);

t.test('spec 4.7 prompt enhancer, row by row', async (t) => {
  await t.test('unloaded | image job whose profile has the task on | every GPU reserved, enhancer installed | loaded: llama-server with the enhancer (the prompt never in the context)', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch()) });
    t.same(h.engines, [{ launch: launch() }], 'one process with the installed model and the fit over every GPU');
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    t.equal(h.state(), '{"running":"loading"}');
    h.engine({ type: 'engine.ready' });
    t.equal(h.state(), '{"running":"loaded"}');
    t.same(h.emitted, [
      { type: 'worker.started', kind: 'enhancer', generation: 1, pid: 8001 },
      { type: 'worker.loaded', kind: 'enhancer', generation: 1 },
    ]);
    t.equal(h.actor.getSnapshot().context.port, 40001);
    t.notOk(JSON.stringify(h.actor.getSnapshot().context).includes('prompt":'), 'no prompt in the context');
  });
  await t.test('loaded | the enhancer answered | | unloaded: ended before the image worker starts (SIGTERM, SIGKILL after the grace)', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    h.engine({ type: 'engine.ready' });
    expectUnload(t, h, 'the enhancer answered: it ends before the image worker starts', ENHANCER_WORKER_LIMITS.terminationGraceMs);
  });
  await t.test('loading | the client left, the test was cancelled or the endpoint stopped | | unloaded: the start is aborted', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    h.actor.send({ type: 'worker.unload', generation: 1, reason: 'its image job ended: the enhancer is not kept loaded' });
    t.same(h.commands, ['engine.stop']);
    h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
    t.equal(h.state(), '"unloaded"');
    t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'an abort we asked for is no failure');
  });
  await t.test('an unload naming another start changes nothing', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch({ generation: 5 })) });
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    h.actor.send({ type: 'worker.unload', generation: 4, reason: 'late' });
    t.equal(h.state(), '{"running":"loading"}');
    t.same(h.commands, []);
  });
  await t.test('the process died: reported at once with its diagnosis (the job ends with 502 enhancer_failed)', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch({ task: 'i2i', mmproj: '/state/enhancers/i2i/mmproj.gguf' })) });
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    h.engine({ type: 'engine.exited', report: { exitCode: 1, signal: null, cause: 'model_error', message: 'The prompt enhancer could not load its model.' } });
    t.equal(h.state(), '"unloaded"');
    t.same(h.emitted.at(-1), { type: 'worker.exited', kind: 'enhancer', generation: 1, cause: 'model_error', message: 'The prompt enhancer could not load its model.' });
  });
  await t.test('loading | not loaded within the limit | | unloaded: stopped and reported as a timeout', async (t) => {
    const h = harness({ loadTimeLimitMs: 30_000 });
    h.actor.send({ type: 'worker.start', start: enhancerStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 8001, port: 40001 });
    h.clock.increment(30_000);
    t.same(h.commands, ['engine.stop']);
    h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
    t.match(h.emitted.at(-1), { type: 'worker.exited', kind: 'enhancer', cause: 'timeout', message: 'The prompt enhancer did not finish loading within 30 s (timeout); it was stopped.' });
  });
});

t.test('the enhancer command line: the chat worker fixed defaults, one slot, the fit, the projector for i2i only', async (t) => {
  const place = { port: 40001, keyFile: '/state/runtime/enhancer-1.key' };
  const t2i = enhancerArgs(launch(), place);
  t.same(t2i.slice(0, 6), ['-m', '/state/enhancers/t2i/model.gguf', '-c', '8192', '-np', '1']);
  t.ok(SERVER_DEFAULTS.every((arg) => t2i.includes(arg)), 'the backend defaults the memory check forecast with');
  t.same(t2i.slice(t2i.indexOf('-ngl'), t2i.indexOf('-ngl') + 2), ['-ngl', '40']);
  t.notOk(t2i.includes('--mmproj'));
  t.same(t2i.slice(t2i.indexOf('--api-key-file'), t2i.indexOf('--api-key-file') + 2), ['--api-key-file', place.keyFile], 'its own short-lived key');
  const i2i = enhancerArgs(launch({ task: 'i2i', mmproj: '/state/enhancers/i2i/mmproj.gguf', tensorSplit: [3, 1], gpus: ['GPU-a', 'GPU-b'] }), place);
  t.same(i2i.slice(-2), ['--mmproj', '/state/enhancers/i2i/mmproj.gguf']);
  t.same(i2i.slice(i2i.indexOf('-ts'), i2i.indexOf('-ts') + 2), ['-ts', '3,1'], 'the split over both GPUs');
  const cpu = enhancerArgs(launch({ gpus: [], gpuLayers: null }), place);
  t.same(cpu.slice(cpu.indexOf('-ngl'), cpu.indexOf('-ngl') + 2), ['-ngl', '0'], 'CPU only: very slow, but possible');
});
