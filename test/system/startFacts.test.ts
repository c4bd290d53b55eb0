// The facts the memory check judges, gathered for real: a generated GGUF read for its metadata,
// the simulated GPU inventory, the host's RAM, the configured reserves, and the build's real
// llama-fit-params (the one the set-up builds; or none, which the plan then says). Then the
// verdict on them.
import { chmod, readFile, truncate, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { decideStart, emptyWorker, FIT_TOOL_MISSING, FIT_TOOL_MISSING_NOTE, type JobSpec } from '../../machines/supervisor/index.js';
import { encodeGguf } from '../../src/adapters/gguf.js';
import { loadConfig, parseGpuReserve } from '../../src/config.js';
import { gatherStartFacts } from '../../src/system/startFacts.js';
import { tempDir } from '../helpers/build.js';
import { llamaFitParamsPath, tinyModelIn } from '../helpers/llama.js';

const Q8_0 = 8;
const F32 = 0;

/** A llama-style GGUF: `blocks` blocks of 64x64 Q8_0 matrices, 4 heads, 2 KV heads, head size 32. */
function tinyGguf(blocks: number, withOutput = true): Uint8Array {
  const tensor = (name: string, dims: number[], type: number) => {
    const bytes = type === F32 ? dims.reduce((a, b) => a * b, 1) * 4 : (dims.reduce((a, b) => a * b, 1) / 32) * 34;
    return { name, dims, type, data: new Uint8Array(bytes) };
  };
  const tensors = [tensor('token_embd.weight', [64, 256], Q8_0)];
  for (let i = 0; i < blocks; i++) {
    tensors.push(tensor(`blk.${i}.attn_q.weight`, [64, 64], Q8_0), tensor(`blk.${i}.ffn_up.weight`, [64, 128], Q8_0), tensor(`blk.${i}.attn_norm.weight`, [64], F32));
  }
  tensors.push(tensor('output_norm.weight', [64], F32));
  if (withOutput) tensors.push(tensor('output.weight', [64, 256], Q8_0));
  return encodeGguf({
    metadata: [
      ['general.architecture', { type: 'string', value: 'llama' }],
      ['llama.block_count', { type: 'uint32', value: blocks }],
      ['llama.context_length', { type: 'uint32', value: 2048 }],
      ['llama.embedding_length', { type: 'uint32', value: 64 }],
      ['llama.attention.head_count', { type: 'uint32', value: 2 }],
      ['llama.attention.head_count_kv', { type: 'uint32', value: 1 }],
    ],
    tensors,
  });
}

function chatJob(modelFile: string, params: Partial<{ gpuSplit: number[] | null; gpuLayers: number | null; context: number; slots: number }> = {}): JobSpec {
  const stored = { model: modelFile, context: 4096, slots: 2, gpuSplit: null, gpuLayers: null, sampling: {}, ...params };
  return {
    id: 'j1',
    kind: 'chat',
    source: 'api',
    profileId: 'p',
    revision: 1,
    slots: stored.slots,
    device: 'cpu',
    whenBusy: 'wait',
    at: 0,
    profile: { id: 'p', revision: 1, name: 'p', category: 'chat', params: stored },
  };
}

const workers = () => ({ chat: emptyWorker('chat'), image: emptyWorker('image'), tts: emptyWorker('tts'), stt: emptyWorker('stt'), enhancer: emptyWorker('enhancer') });
const signal = new AbortController().signal;

t.test('chat on the CPU: the model shape comes from the GGUF, the RAM from the host, the reserve from the config', async (t) => {
  const dir = await tempDir(t);
  const file = path.join(dir, 'tiny.gguf');
  await writeFile(file, tinyGguf(3));
  const config = loadConfig({ stateDir: dir }, { SERVICE_DECK_GPUS: 'none', SERVICE_DECK_RAM_RESERVE_MIB: '700', PATH: '' });
  const facts = await gatherStartFacts({ job: chatJob(file), workers: workers(), idle: [] }, { config, lookup: { env: config.env, cacheDir: dir }, ownPids: () => new Set() }, signal);
  t.same(facts.gpus, []);
  t.equal(facts.ram.reserveMiB, 700);
  t.ok(facts.ram.availableMiB > 100, `RAM available: ${Math.round(facts.ram.availableMiB)} MiB`);
  t.match(facts.ram.limitedBy, /cgroup|host/);
  if (facts.demand.kind !== 'chat') throw new Error('chat demand expected');
  const block = (64 * 64 + 64 * 128) / 32 * 34 + 64 * 4;
  t.same(facts.demand.model, {
    layerCount: 3,
    headCountKv: [1, 1, 1],
    keyLength: 32,
    valueLength: 32,
    layerBytes: [block, block, block],
    inputBytes: (64 * 256) / 32 * 34,
    outputBytes: 64 * 4 + (64 * 256) / 32 * 34,
  });
  t.equal(facts.demand.buildFit, null, 'no GPU: no fit to ask for');
  const verdict = decideStart(facts, { job: chatJob(file), workers: workers(), idle: [] });
  t.match(verdict, { verdict: 'start', plan: { gpus: [], gpuLayers: null, fit: /CPU only/ } });

  await writeFile(file, tinyGguf(3, false));
  const tied = await gatherStartFacts({ job: chatJob(file), workers: workers(), idle: [] }, { config, lookup: { env: config.env, cacheDir: dir }, ownPids: () => new Set() }, signal);
  if (tied.demand.kind !== 'chat') throw new Error('chat demand expected');
  t.equal(tied.demand.model.outputBytes, 64 * 4 + (64 * 256) / 32 * 34, 'shared embeddings: token_embd counts again as the output layer');
});

t.test('chat on two GPUs without a split: the build’s real llama-fit-params is asked, with our reserve and the stored context', async (t) => {
  const real = await llamaFitParamsPath();
  const dir = await tempDir(t);
  const file = await tinyModelIn(dir);
  // A wrapper that notes the argv and runs the real tool with it.
  const fit = path.join(dir, 'llama-fit-params');
  const argsFile = path.join(dir, 'args');
  await writeFile(fit, `#!/bin/sh\necho "$@" > '${argsFile}'\nexec '${real}' "$@"\n`);
  await chmod(fit, 0o755);
  const env = {
    SERVICE_DECK_GPUS: '[{"uuid":"GPU-b","memoryTotalMiB":8192},{"uuid":"GPU-a","memoryTotalMiB":24576}]',
    SERVICE_DECK_GPU_RESERVE_MIB: '1500,GPU-b=900',
    SERVICE_DECK_LLAMA_FIT_PARAMS: fit,
    PATH: process.env.PATH,
  };
  const config = loadConfig({ stateDir: dir }, env);
  const deps = { config, lookup: { env: config.env, cacheDir: dir }, ownPids: () => new Set<number>() };
  const job = chatJob(file);
  const facts = await gatherStartFacts({ job, workers: workers(), idle: [] }, deps, signal);
  t.same(facts.gpus.map((g) => g.uuid), ['GPU-a', 'GPU-b'], 'GPUs in UUID order');
  t.same(facts.gpuReserveMiB, { 'GPU-a': 1500, 'GPU-b': 900 });
  // This build has no GPU backend: it prints "-c 4096 -ngl -1" and projects on host memory.
  t.same(facts.demand.kind === 'chat' && facts.demand.buildFit, { ok: true, gpuLayers: 'all', tensorSplit: null, overrides: [], projectedOn: 'host' });
  const args = (await readFile(argsFile, 'utf8')).trim().split(' ');
  t.equal(args[args.indexOf('-fitc') + 1], '4096', 'the context may not be shrunk');
  t.equal(args[args.indexOf('-fitt') + 1], '1500', 'our reserve is its margin');
  const verdict = decideStart(facts, { job, workers: workers(), idle: [] });
  t.match(verdict, {
    verdict: 'start',
    plan: {
      gpus: ['GPU-a'],
      gpuLayers: 3,
      tensorSplit: null,
      fitTool: 'used',
      fit: "the build's llama-fit-params: -ngl 3 (all layers); the build saw no GPU (its fit is for host memory only)",
    },
  }, 'two blocks and the output layer, split 3:1 by free memory as llama.cpp does without -ts: all three on the larger GPU');

  // Its real refusal: a margin no host has. The start is refused with the tool's reason.
  const greedy = loadConfig({ stateDir: dir }, { ...env, SERVICE_DECK_GPU_RESERVE_MIB: '100000000' });
  const refused = await gatherStartFacts({ job, workers: workers(), idle: [] }, { ...deps, config: greedy, lookup: { env: greedy.env, cacheDir: dir } }, signal);
  t.match(refused.demand, { kind: 'chat', buildFit: { ok: false, reason: /^llama-fit-params exited with code 1/ } });
  t.match(decideStart(refused, { job, workers: workers(), idle: [] }), { verdict: 'refuse', code: 'insufficient_memory', message: /the build's fit found no parameters that fit: llama-fit-params exited with code 1/ });
});

t.test('chat on a GPU without llama-fit-params: the facts say so, and so does the plan', async (t) => {
  const dir = await tempDir(t);
  const file = await tinyModelIn(dir);
  const job = chatJob(file);
  for (const [what, extra] of [
    ['a variable naming a missing file', { SERVICE_DECK_LLAMA_FIT_PARAMS: path.join(dir, 'gone') }],
    ['an empty cache and nothing on PATH', { PATH: '' }],
  ] as const) {
    const config = loadConfig({ stateDir: dir }, { SERVICE_DECK_GPUS: '[{"uuid":"GPU-a","memoryTotalMiB":24576}]', PATH: process.env.PATH, ...extra });
    const facts = await gatherStartFacts({ job, workers: workers(), idle: [] }, { config, lookup: { env: config.env, cacheDir: path.join(dir, 'empty-cache') }, ownPids: () => new Set() }, signal);
    t.match(facts.demand, { kind: 'chat', buildFit: FIT_TOOL_MISSING }, what);
    const verdict = decideStart(facts, { job, workers: workers(), idle: [] });
    t.match(verdict, { verdict: 'start', plan: { gpus: ['GPU-a'], gpuLayers: 3, fitTool: 'not_installed' } }, what);
    if (verdict.verdict === 'start') t.ok(verdict.plan.fit.startsWith(`${FIT_TOOL_MISSING_NOTE}; shallow search: `), verdict.plan.fit);
  }
});

t.test('image, TTS and STT demands come from their profiles and files; a failing probe fails the check', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'sd.gguf');
  await writeFile(model, '');
  await truncate(model, 2048 * 1024 * 1024);
  const config = loadConfig({ stateDir: dir }, { SERVICE_DECK_GPUS: '[{"uuid":"GPU-a","memoryTotalMiB":24576}]', PATH: '' });
  const deps = { config, lookup: { env: config.env, cacheDir: dir }, ownPids: () => new Set<number>() };
  const job = (kind: JobSpec['kind'], profile: unknown): JobSpec => ({ ...chatJob(model), kind, profile });
  const image = await gatherStartFacts(
    { job: job('image', { category: 'image', params: { model, files: {}, width: 1024, height: 1024 } }), workers: workers(), idle: [] },
    deps,
    signal,
  );
  t.match(image.demand, { kind: 'image', device: 'first-gpu', gpuMiB: Math.ceil(2048 * 1.1 + 1024), basis: /2048 MiB.*1024x1024/ });
  const tts = await gatherStartFacts({ job: job('tts', { category: 'tts', params: { device: 'GPU-a', memoryMiB: 7168 } }), workers: workers(), idle: [] }, deps, signal);
  t.match(tts.demand, { kind: 'tts', device: 'GPU-a', gpuMiB: 7168 });
  const stt = await gatherStartFacts({ job: job('stt', { category: 'stt', params: { backend: 'whisper.cpp', model } }), workers: workers(), idle: [] }, deps, signal);
  t.match(stt.demand, { kind: 'stt', device: 'cpu', gpuMiB: 0, ramMiB: Math.ceil(2048 * 1.2 + 200) });

  const smiDir = await tempDir(t);
  await writeFile(path.join(smiDir, 'nvidia-smi'), '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n');
  await chmod(path.join(smiDir, 'nvidia-smi'), 0o755);
  const broken = loadConfig({ stateDir: dir }, { PATH: smiDir });
  await t.rejects(
    gatherStartFacts({ job: job('stt', { category: 'stt', params: { backend: 'pocketsphinx' } }), workers: workers(), idle: [] }, { ...deps, config: broken, lookup: { env: broken.env, cacheDir: dir } }, signal),
    /GPU probe failed/,
    'never start blind when the probe fails',
  );
});

t.test('reserves and the poll interval are read once from the environment, and refused when malformed', async (t) => {
  const config = loadConfig({ stateDir: '/tmp/x' }, {});
  t.same(config.gpuReserveMiB, { default: 1024, byGpu: {} });
  t.equal(config.ramReserveMiB, 1024);
  t.equal(config.gpuPollMs, 2000);
  t.same(parseGpuReserve('2048, GPU-a=512 ,GPU-b=0'), { default: 2048, byGpu: { 'GPU-a': 512, 'GPU-b': 0 } });
  t.throws(() => loadConfig({ stateDir: '/tmp/x' }, { SERVICE_DECK_GPU_RESERVE_MIB: 'GPU-a=lots' }), /GPU_RESERVE_MIB \(GPU-a\).*whole number of MiB/);
  t.throws(() => loadConfig({ stateDir: '/tmp/x' }, { SERVICE_DECK_RAM_RESERVE_MIB: '-1' }), /RAM_RESERVE_MIB/);
  t.throws(() => loadConfig({ stateDir: '/tmp/x' }, { SERVICE_DECK_GPU_POLL_MS: '1.5' }), /whole number of milliseconds/);
});

t.test("an image job with the prompt enhancer: the enhancer's GGUF as a one-slot chat demand with its projector; an unreadable model is named", async (t) => {
  const dir = await tempDir(t);
  const sd = path.join(dir, 'sd.gguf');
  await writeFile(sd, 'x');
  const enhancer = path.join(dir, 'enhancer.gguf');
  await writeFile(enhancer, tinyGguf(3));
  const mmproj = path.join(dir, 'mmproj.gguf');
  await writeFile(mmproj, Buffer.alloc(4096));
  const config = loadConfig({ stateDir: dir }, { SERVICE_DECK_GPUS: 'none', PATH: '' });
  const deps = { config, lookup: { env: config.env, cacheDir: dir }, ownPids: () => new Set<number>() };
  const imageJob = (model: string): JobSpec => ({
    ...chatJob(sd),
    kind: 'image',
    profile: { category: 'image', params: { model: sd, files: {}, width: 512, height: 512 } },
    enhancer: { task: 'i2i', model, mmproj, context: 2048, image: true, device: 'auto' },
  });
  const facts = await gatherStartFacts({ job: imageJob(enhancer), workers: workers(), idle: [] }, deps, signal);
  t.match(facts.demand, { kind: 'image' });
  t.match(facts.enhancer, { kind: 'chat', context: 2048, slots: 1, gpuSplit: null, gpuLayers: null, model: { layerCount: 3, projectorBytes: 4096 } });
  t.equal(facts.enhancerProblem, undefined);
  const broken = await gatherStartFacts({ job: imageJob(sd), workers: workers(), idle: [] }, deps, signal);
  t.equal(broken.enhancer, undefined);
  t.match(broken.enhancerProblem, /^its model .*sd\.gguf cannot be read: /);
});
