// Spec 3.3, the image worker machine, row by row on a running actor with a simulated clock and a
// simulated image process: one process per image; the finished image is held without a process
// until the supervisor's unload ("after each image the image worker process is terminated
// completely"); a client that leaves or the endpoint stop ends a process at work (SIGTERM, then
// SIGKILL); a failing process is reported at once; a process over the time limit is stopped. The
// GPUs, the chat and TTS unloads and the conflict of the GUI test are the supervisor's
// (test/machines/supervisor.test.ts, spec 3.3 rows); the sd-cli command line is args.ts's.
import t from 'tap';
import { IMAGE_WORKER_LIMITS, imageWorkerMachine, lastProgress, sdArgs, type ImageLaunch } from '../../machines/imageWorker/index.js';
import { expectUnload, lifecycleHarness } from '../helpers/lifecycle.js';
import { imageStart } from '../helpers/workerStart.js';

const launch = (over: Partial<ImageLaunch> = {}): ImageLaunch => ({
  generation: 1,
  profileId: 'img',
  revision: 1,
  model: '/models/flux.gguf',
  files: {},
  width: 1024,
  height: 768,
  steps: 20,
  guidance: 3.5,
  cfgScale: 1,
  seed: 42,
  gpus: ['GPU-a', 'GPU-b'],
  ...over,
});
const harness = (input: { loadTimeLimitMs?: number } = {}) => lifecycleHarness(imageWorkerMachine, input);

t.test('spec 3.3 image worker, row by row', async (t) => {
  await t.test('unloaded | image job | every GPU reserved, chat and TTS unloaded | one image process for this image; the finished image is held without a process', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    t.same(h.engines, [{ launch: launch() }], 'one process with the profile snapshot, the GPUs and the job folder (no prompt)');
    t.notOk(JSON.stringify(h.actor.getSnapshot().context).includes('prompt'), 'the prompt never enters the context');
    h.engine({ type: 'engine.spawned', pid: 7001 });
    t.equal(h.state(), '{"running":"loading"}', 'at work');
    h.engine({ type: 'engine.ready' });
    t.equal(h.state(), '{"running":"loaded"}', 'the image is written');
    t.same(h.emitted.map((e) => e.type), ['worker.started', 'worker.loaded']);
  });
  await t.test('image written | the job has its image | | unloaded: the process is terminated completely (nothing is left to signal)', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 7001 });
    h.engine({ type: 'engine.ready' });
    h.actor.send({ type: 'worker.unload', generation: 1, reason: 'the image is done: one image process per image' });
    t.same(h.commands, ['engine.stop']);
    h.engine({ type: 'engine.exited', report: { exitCode: 0, signal: null, cause: 'stopped', message: 'stopped' } });
    t.equal(h.state(), '"unloaded"');
    t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'an image that is done is no exit');
  });
  await t.test('running | the client left or the endpoint stopped | | unloaded: SIGTERM, then SIGKILL after the grace', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 7001 });
    t.ok(h.actor.getSnapshot().can({ type: 'worker.unload', generation: 1, reason: 'endpoint stop' }));
    h.actor.send({ type: 'worker.unload', generation: 1, reason: 'endpoint stop' });
    t.same(h.commands, ['engine.stop']);
    h.clock.increment(IMAGE_WORKER_LIMITS.terminationGraceMs);
    t.same(h.commands, ['engine.stop', 'engine.kill']);
    h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGKILL', cause: 'stopped', message: 'stopped' } });
    t.equal(h.state(), '"unloaded"');
  });
  await t.test('running | the process fails | | unloaded: reported at once with its diagnosis (the job gets 502 worker_failed)', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 7001 });
    h.engine({ type: 'engine.exited', report: { exitCode: 1, signal: null, cause: 'gpu_oom', message: 'The image worker ran out of GPU memory.' } });
    t.equal(h.state(), '"unloaded"');
    t.same(h.emitted.at(-1), { type: 'worker.exited', kind: 'image', generation: 1, cause: 'gpu_oom', message: 'The image worker ran out of GPU memory.' });
  });
  await t.test('running | longer than the limit | | unloaded: stopped, reported as a timeout that says the image was not finished', async (t) => {
    const h = harness({ loadTimeLimitMs: 90_000 });
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 7001 });
    h.clock.increment(90_000);
    t.same(h.commands, ['engine.stop']);
    h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
    t.match(h.emitted.at(-1), { type: 'worker.exited', cause: 'timeout', message: 'The image worker did not finish its image within 90 s (timeout); it was stopped.' });
  });
  await t.test('a finished image held for a job can still be unloaded the usual way', async (t) => {
    const h = harness();
    h.actor.send({ type: 'worker.start', start: imageStart(launch()) });
    h.engine({ type: 'engine.spawned', pid: 7001 });
    h.engine({ type: 'engine.ready' });
    expectUnload(t, h, 'an image job needs every GPU', IMAGE_WORKER_LIMITS.terminationGraceMs);
  });
});

t.test('the sd-cli command line: model files, the profile settings, the output in the job folder, no metadata, one -r per reference in order', async (t) => {
  t.same(sdArgs(launch(), { prompt: 'a fox', references: [] }, '/state/jobs/image-1/output.png'), [
    '-m', '/models/flux.gguf', '-p', 'a fox', '-W', '1024', '-H', '768', '--steps', '20', '--cfg-scale', '1', '--guidance', '3.5', '-s', '42',
    '-o', '/state/jobs/image-1/output.png', '--disable-image-metadata',
  ]);
  const split = sdArgs(launch({ files: { vae: '/m/ae.safetensors', llm: '/m/qwen.gguf', clip_l: '/m/clip.safetensors', t5xxl: '/m/t5.gguf' } }), { prompt: 'p', references: ['/j/reference-1.png', '/j/reference-2.jpg'] }, '/o.png');
  t.same(split.slice(0, 10), ['--diffusion-model', '/models/flux.gguf', '--vae', '/m/ae.safetensors', '--llm', '/m/qwen.gguf', '--clip_l', '/m/clip.safetensors', '--t5xxl', '/m/t5.gguf']);
  t.same(split.slice(-4), ['-r', '/j/reference-1.png', '-r', '/j/reference-2.jpg']);
  t.same(lastProgress('  |====>      | 3/20 - 1.20s/it\r  |=====>     | 4/20 - 1.19s/it\r'), { step: 4, steps: 20 });
  t.equal(lastProgress('[INFO ] loading model'), undefined);
});
