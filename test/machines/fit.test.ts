// Spec 8, the memory check and the shallow fit search, on the pure functions: a fixed tensor split
// is searched in at most ten steps for the largest GPU layer count that fits (ratios and context
// never rewritten); without a split the build's own fit applies; reserves per GPU and for RAM;
// the TTS worker's 7 GiB; our own workers counted once, foreign memory never freed.
import t from 'tap';
import {
  decideStart,
  emptyWorker,
  FIT_STEP_LIMIT,
  FIT_TOOL_MISSING,
  FIT_TOOL_MISSING_NOTE,
  gpuAvailableMiB,
  kvMiBPerLayer,
  placeChat,
  type BuildFit,
  type CheckInput,
  type JobSpec,
  type ModelShape,
  type StartFacts,
  type WorkerRecord,
} from '../../machines/supervisor/index.js';
import { GIB, gpu, model } from '../helpers/supervisor.js';

const job = (over: Partial<JobSpec> = {}): JobSpec => ({
  id: 'j',
  kind: 'chat',
  source: 'api',
  profileId: 'p',
  revision: 1,
  slots: 1,
  device: 'cpu',
  whenBusy: 'wait',
  profile: null,
  at: 0,
  ...over,
});
const workers = (over: Partial<Record<'chat' | 'tts' | 'stt' | 'image', WorkerRecord>> = {}) => ({
  chat: emptyWorker('chat'),
  image: emptyWorker('image'),
  tts: emptyWorker('tts'),
  stt: emptyWorker('stt'),
  enhancer: emptyWorker('enhancer'),
  ...over,
});
const input = (over: Partial<CheckInput> = {}): CheckInput => ({ job: job(), workers: workers(), idle: [], ...over });

function chatFacts(m: ModelShape, free: number[], opts: { split?: number[] | null; limit?: number | null; fit?: BuildFit | typeof FIT_TOOL_MISSING | null; ram?: number; context?: number } = {}): StartFacts {
  const gpus = free.map((f, i) => gpu(`GPU-${String.fromCharCode(97 + i)}`, 24 * GIB, f));
  return {
    gpus,
    gpuReserveMiB: Object.fromEntries(gpus.map((g) => [g.uuid, 512])),
    ram: { availableMiB: opts.ram ?? 64 * GIB, reserveMiB: 1024, limitedBy: 'host' },
    demand: { kind: 'chat', model: m, context: opts.context ?? 8192, slots: 1, gpuSplit: opts.split ?? null, gpuLayers: opts.limit ?? null, buildFit: opts.fit ?? null },
  };
}

const steps = (fit: string) => Number(/in (\d+) steps/.exec(fit)?.[1] ?? /\((\d+) step\)/.exec(fit)?.[1] ?? NaN);

t.test('KV cache: q4_0 for the stored total context, per layer from the model’s own heads', async (t) => {
  const m = model(4, 100);
  const kv = kvMiBPerLayer(m, 8192);
  t.equal(kv.length, 4);
  t.equal(kv[0], (8192 * 8 * (128 + 128) * 18) / 32 / 1024 / 1024, '8 KV heads x (128+128) values x 18/32 bytes per token');
  t.equal(kvMiBPerLayer(m, 16384)[0], kv[0]! * 2, 'twice the context, twice the cache');
});

t.test('placement as llama.cpp loads it: the output layer is the last of block count + 1 slots; the last n slots go to the GPUs by cumulative ratio', async (t) => {
  const m = model(4, 100);
  const kv = kvMiBPerLayer(m, 1024)[0]!;
  t.same(placeChat(m, 1024, 0, [1, 1]).gpuMiB, [0, 0], '-ngl 0: nothing on a GPU');
  const one = placeChat(m, 1024, 1, [1, 1]);
  t.same(one.gpuMiB, [250 + 512, 0], '-ngl 1 puts the output layer on the GPU first');
  t.equal(one.ramMiB, 250 + 256 + 4 * (100 + kv), 'every block stays in RAM');
  const two = placeChat(m, 1024, 2, [1, 1]);
  t.same(two.gpuMiB, [100 + kv + 512, 250 + 512], '-ngl 2: the last block and the output layer, one slot per GPU');
  const all = placeChat(m, 1024, 5, [3, 1]);
  t.same(all.gpuMiB, [400 + 4 * kv + 512, 250 + 512], '3:1 over five slots: four blocks, then the output layer');
  t.equal(all.ramMiB, 250 + 256, 'only the input embeddings and the overhead stay in RAM');
  t.same(placeChat(m, 1024, 5, [0, 0]).gpuMiB, [0, 0], 'ratios that sum to 0 place nothing on a GPU');
});

t.test('fixed split: everything fits in one step, ratios kept', async (t) => {
  const verdict = decideStart(chatFacts(model(32, 200), [24 * GIB, 24 * GIB], { split: [1, 1] }), input());
  t.match(verdict, { verdict: 'start', plan: { gpuLayers: 33, tensorSplit: [1, 1], gpus: ['GPU-a', 'GPU-b'] } });
  if (verdict.verdict === 'start') t.equal(steps(verdict.plan.fit), 1);
});

t.test('fixed split: the shallow search finds the largest fitting layer count within ten steps', async (t) => {
  let seed = 99;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let run = 0; run < 300; run++) {
    const layers = 1 + Math.floor(random() * 300);
    const m = model(layers, 20 + Math.floor(random() * 400));
    const free = [Math.floor(random() * 24 * GIB), Math.floor(random() * 24 * GIB)];
    const split = [Math.floor(random() * 4), 1 + Math.floor(random() * 4)];
    const context = 512 * (1 + Math.floor(random() * 32));
    const facts = chatFacts(m, free, { split, context, ram: 1024 * GIB });
    const verdict = decideStart(facts, input());
    if (verdict.verdict !== 'start') {
      t.fail(`run ${run}: ${JSON.stringify(verdict)}`);
      continue;
    }
    const { plan } = verdict;
    const n = plan.gpuLayers ?? 0;
    const available = facts.gpus.map((g) => g.memoryFreeMiB - 512);
    const fits = (k: number) => placeChat(m, context, k, split).gpuMiB.every((mib, i) => mib === 0 || mib <= available[i]!);
    if (!fits(n)) t.fail(`run ${run}: ${n} layers do not fit`);
    if (steps(plan.fit) > FIT_STEP_LIMIT) t.fail(`run ${run}: ${plan.fit}`);
    if (layers + 1 <= 2 ** (FIT_STEP_LIMIT - 1) && n < layers + 1 && fits(n + 1)) t.fail(`run ${run}: ${n + 1} layers would fit too`);
    if (JSON.stringify(plan.tensorSplit ?? split) !== JSON.stringify(split) && plan.gpus.length > 1) t.fail(`run ${run}: the split was rewritten`);
  }
  t.pass('300 random models and GPUs: a fitting, maximal layer count in at most ten steps, ratios kept');
});

t.test('the profile’s GPU layer limit caps the search; a split for more GPUs than present is refused', async (t) => {
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB], { split: [1], limit: 10 }), input()), { verdict: 'start', plan: { gpuLayers: 10, gpuLayerLimit: 10 } });
  t.match(decideStart(chatFacts(model(8, 100), [24 * GIB], { split: [1, 1] }), input()), {
    verdict: 'refuse',
    code: 'start_check_failed',
    message: /2 ratios but 1 GPU/,
  });
});

t.test('without a split the build’s fit applies, within the profile’s limit; its failure is a refusal naming why', async (t) => {
  const fit: BuildFit = { ok: true, gpuLayers: 20, tensorSplit: [2, 1], overrides: ['blk\\.3\\.ffn=CPU'] };
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB, 24 * GIB], { fit }), input()), {
    verdict: 'start',
    plan: { gpuLayers: 20, tensorSplit: [2, 1], overrides: ['blk\\.3\\.ffn=CPU'], fit: /llama-fit-params: -ngl 20/, fitTool: 'used' },
  });
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB, 24 * GIB], { fit, limit: 12 }), input()), { verdict: 'start', plan: { gpuLayers: 12, fit: /profile limit 12/ } });
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB], { fit: { ok: true, gpuLayers: 'all', tensorSplit: null, overrides: [], projectedOn: 'host' } }), input()), {
    verdict: 'start',
    plan: { gpuLayers: 33, fitTool: 'used', fit: "the build's llama-fit-params: -ngl 33 (all layers); the build saw no GPU (its fit is for host memory only)" },
  }, 'a build without a GPU backend: its answer is used, and the plan says what it saw');
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB], { fit: { ok: false, reason: 'would shrink the context from 8192 to 4096' } }), input()), {
    verdict: 'refuse',
    code: 'insufficient_memory',
    message: /shrink the context/,
  });
});

t.test('no llama-fit-params on a host with GPUs: the own search stands in and the plan says so plainly', async (t) => {
  const missing = decideStart(chatFacts(model(32, 100), [24 * GIB, 24 * GIB], { fit: FIT_TOOL_MISSING }), input());
  t.match(missing, { verdict: 'start', plan: { gpuLayers: 33, fitTool: 'not_installed' } });
  if (missing.verdict === 'start') {
    t.ok(missing.plan.fit.startsWith(`${FIT_TOOL_MISSING_NOTE}; shallow search: `), missing.plan.fit);
    t.equal(steps(missing.plan.fit), 1);
  }
  const tight = decideStart(chatFacts(model(32, 1000), [10 * GIB], { fit: FIT_TOOL_MISSING }), input());
  t.match(tight, { verdict: 'start', plan: { fitTool: 'not_installed', fit: /^llama-fit-params is not installed: the layer count is the service's own estimate; shallow search: -ngl \d+ of 33 in \d+ steps$/ } });
  t.match(decideStart(chatFacts(model(32, 100), [24 * GIB], { split: [1] }), input()), { verdict: 'start', plan: { fitTool: null, fit: /^shallow search \(fixed split\)/ } }, 'a fixed split never asks the build');
  t.match(decideStart(chatFacts(model(32, 100), []), input()), { verdict: 'start', plan: { fitTool: null, fit: 'CPU only: no GPU present' } });
});

t.test('RAM: the budget after the reserve decides; a CPU-only start needs it all in RAM', async (t) => {
  const m = model(32, 200);
  t.match(decideStart(chatFacts(m, [], { ram: 9 * GIB }), input()), { verdict: 'start', plan: { gpus: [], ramBudget: { reserveMiB: 1024 } } });
  t.match(decideStart(chatFacts(m, [], { ram: 8 * GIB }), input()), { verdict: 'refuse', code: 'insufficient_memory', message: /RAM.*not a proof/ });
});

t.test('the TTS worker starts only while its designated GPU has at least 7 GiB free (its own margin, not on top of the reserve)', async (t) => {
  const tts = (freeMiB: number, memoryMiB = 7168): StartFacts => ({
    gpus: [gpu('GPU-a', 24 * GIB, freeMiB)],
    gpuReserveMiB: { 'GPU-a': 512 },
    ram: { availableMiB: 8 * GIB, reserveMiB: 1024, limitedBy: 'host' },
    demand: { kind: 'tts', device: 'GPU-a', gpuMiB: memoryMiB, ramMiB: 512, basis: 'TTS profile' },
  });
  const ttsJob = input({ job: job({ kind: 'tts', device: 'GPU-a' }) });
  t.match(decideStart(tts(7168), ttsJob), { verdict: 'start', plan: { gpus: ['GPU-a'], forecast: { gpuMiB: { 'GPU-a': 7168 } } } }, 'exactly 7 GiB free: it starts');
  t.match(decideStart(tts(7167), ttsJob), { verdict: 'refuse', code: 'insufficient_memory', message: /7167 MiB free.*at least 7168 MiB/ });
  t.match(decideStart(tts(4096, 1024), ttsJob), { verdict: 'refuse', code: 'insufficient_memory' }, 'a profile asking for less still needs the 7 GiB');
  t.match(
    decideStart(tts(6.5 * GIB, 2048), ttsJob),
    { verdict: 'refuse', code: 'insufficient_memory', message: /6656 MiB free.*at least 7168 MiB/ },
    'a profile asking for 2048 MiB with 6.5 GiB free: the 7 GiB rule refuses it (a 6 GiB rule would start it)',
  );
  t.match(decideStart(tts(7 * GIB, 2048), ttsJob), { verdict: 'start', plan: { forecast: { gpuMiB: { 'GPU-a': 7168 } } } }, 'the same profile with 7 GiB free starts, and is counted at 7 GiB');
  t.match(decideStart(tts(12 * GIB, 10 * GIB), ttsJob), { verdict: 'start', plan: { forecast: { gpuMiB: { 'GPU-a': 10 * GIB } } } }, 'a profile asking for more gets more');
  t.match(decideStart(tts(10 * GIB, 10 * GIB + 1), ttsJob), { verdict: 'refuse' });
  t.match(decideStart({ ...tts(20 * GIB), demand: { kind: 'tts', device: 'GPU-z', gpuMiB: 7168, ramMiB: 512, basis: '' } }, ttsJob), {
    verdict: 'refuse',
    code: 'start_check_failed',
    message: /GPU-z is not present/,
  });
});

t.test('the build’s fit is checked against our own loading workers and the reserves; its missing split stays missing', async (t) => {
  const fit: BuildFit = { ok: true, gpuLayers: 33, tensorSplit: null, overrides: [] };
  const facts = chatFacts(model(32, 400), [24 * GIB], { fit });
  t.match(decideStart(facts, input()), { verdict: 'start', plan: { gpuLayers: 33, tensorSplit: null } });
  const loadingTts: WorkerRecord = {
    ...emptyWorker('tts'),
    state: 'loading',
    plan: { gpus: ['GPU-a'], gpuLayers: null, gpuLayerLimit: null, tensorSplit: null, overrides: [], forecast: { ramMiB: 0, gpuMiB: { 'GPU-a': 12 * GIB }, basis: '' }, gpuBudget: [], ramBudget: { availableMiB: 0, reserveMiB: 0, forecastMiB: 0, limitedBy: '' }, foreignAtStart: [], fit: '', fitTool: null },
  };
  t.match(decideStart(facts, input({ workers: workers({ tts: loadingTts }) })), { verdict: 'refuse', code: 'insufficient_memory', message: /build's fit \(-ngl 33\) does not fit beside our other workers/ });
  t.match(decideStart(facts, input({ workers: workers({ tts: { ...loadingTts, state: 'loaded' } }), idle: ['tts'] })), { verdict: 'unload-first', kinds: ['tts'] }, 'an idle TTS worker in the way is unloaded first');
});

t.test('our own workers are counted once (measured or forecast, the larger); foreign memory is never counted as free', async (t) => {
  const chat: WorkerRecord = {
    ...emptyWorker('chat'),
    state: 'loaded',
    pid: 10,
    plan: { gpus: ['GPU-a'], gpuLayers: 10, gpuLayerLimit: 33, tensorSplit: null, overrides: [], forecast: { ramMiB: 0, gpuMiB: { 'GPU-a': 6000 }, basis: '' }, gpuBudget: [], ramBudget: { availableMiB: 0, reserveMiB: 0, forecastMiB: 0, limitedBy: '' }, foreignAtStart: [], fit: '', fitTool: null },
  };
  const measured = gpu('GPU-a', 24 * GIB, 24 * GIB - 5000 - 3000, [{ pid: 10, usedMiB: 5000 }, { pid: 77, usedMiB: 3000 }]);
  t.equal(gpuAvailableMiB(measured, 512, [chat], []), 24 * GIB - 3000 - 6000 - 512, 'the forecast stands in while it exceeds the measurement');
  const grown = gpu('GPU-a', 24 * GIB, 24 * GIB - 9000 - 3000, [{ pid: 10, usedMiB: 9000 }, { pid: 77, usedMiB: 3000 }]);
  t.equal(gpuAvailableMiB(grown, 512, [chat], []), 24 * GIB - 3000 - 9000 - 512, 'the measurement once it is larger');
  t.equal(gpuAvailableMiB(grown, 512, [], [chat]), 24 * GIB - 3000 - 512, 'a worker that goes frees its memory; the foreign 3000 MiB stay taken');
  const simulated = gpu('GPU-a', 24 * GIB, 24 * GIB);
  t.equal(gpuAvailableMiB(simulated, 512, [chat], []), 24 * GIB - 6000 - 512, 'a simulated GPU that does not show our worker: its forecast counts');
});

t.test('4.7 the prompt enhancer of an image job: placed over every GPU, CPU offload for what does not fit, checked in the same room as the image', async (t) => {
  const gpus = [gpu('GPU-a', 24 * GIB, 24 * GIB), gpu('GPU-b', 24 * GIB, 24 * GIB)];
  const base = { gpus, gpuReserveMiB: { 'GPU-a': 512, 'GPU-b': 512 }, ram: { availableMiB: 96 * GIB, reserveMiB: 1024, limitedBy: 'host' } };
  const image = { kind: 'image', device: 'first-gpu', gpuMiB: 8 * GIB, ramMiB: 1024, basis: 'image files' } as const;
  const enhancer = (m: ModelShape) => ({ kind: 'chat', model: m, context: 8192, slots: 1, gpuSplit: null, gpuLayers: null, buildFit: FIT_TOOL_MISSING }) as const;
  const imageJob = input({ job: job({ kind: 'image', enhancer: { task: 't2i', model: '/e.gguf', mmproj: null, context: 8192, image: true, device: 'auto' } }) });

  const small = decideStart({ ...base, demand: image, enhancer: enhancer(model(16, 100)) }, imageJob);
  t.equal(small.verdict, 'start');
  const fits = small.verdict === 'start' ? small.plan.enhancer : undefined;
  t.same(fits?.gpus, ['GPU-a', 'GPU-b'], 'a small enhancer spreads over both GPUs');
  t.equal(fits?.gpuLayers, 17, 'every layer on a GPU');

  // 64 blocks of 1200 MiB (75 GiB) cannot sit on two 24 GiB GPUs: the rest stays in RAM.
  const big = decideStart({ ...base, demand: image, enhancer: enhancer(model(64, 1200)) }, imageJob);
  t.equal(big.verdict, 'start');
  const offloaded = big.verdict === 'start' ? big.plan.enhancer : undefined;
  t.ok(offloaded && offloaded.gpuLayers! > 0 && offloaded.gpuLayers! < 65, `-ngl ${offloaded?.gpuLayers} of 65: CPU offload for the rest`);
  t.same(offloaded?.gpus, ['GPU-a', 'GPU-b']);
  t.ok(offloaded && offloaded.forecast.ramMiB > 20 * GIB, 'the offloaded layers are forecast in RAM');
  t.ok(big.verdict === 'start' && big.plan.forecast.gpuMiB['GPU-a'] === 8 * GIB, 'the image plan is its own: the two never run together');

  const tooBig = decideStart({ ...base, ram: { ...base.ram, availableMiB: 8 * GIB }, demand: image, enhancer: enhancer(model(64, 1200)) }, imageJob);
  t.match(tooBig, { verdict: 'refuse', code: 'insufficient_memory', message: /^the prompt enhancer cannot start: .*RAM/ });

  const cpu = decideStart({ ...base, gpus: [], gpuReserveMiB: {}, demand: { ...image, device: 'first-gpu' }, enhancer: enhancer(model(16, 100)) }, imageJob);
  t.match(cpu, { verdict: 'start', plan: { enhancer: { gpus: [], gpuLayers: null, fit: 'CPU only: no GPU present' } } }, 'CPU only is possible');
  t.match(decideStart({ ...base, demand: image, enhancerProblem: 'its model cannot be read' }, imageJob), { verdict: 'refuse', code: 'enhancer_failed' });
});

t.test("4.7 the enhancer's vision projector is forecast on the first GPU in use (in RAM on the CPU), and costs layers when room is short", async (t) => {
  const m = model(4, 100);
  const withProjector = { ...m, projectorBytes: 600 * 1024 * 1024 };
  const plain = placeChat(m, 1024, 5, [1, 1]);
  const placed = placeChat(withProjector, 1024, 5, [1, 1]);
  t.same(placed.gpuMiB, [plain.gpuMiB[0]! + 600, plain.gpuMiB[1]], 'the whole projector on the first GPU');
  t.equal(placed.ramMiB, plain.ramMiB);
  const cpu = placeChat(withProjector, 1024, 0, []);
  t.equal(cpu.ramMiB, placeChat(m, 1024, 0, []).ramMiB + 600, 'on the CPU it is in RAM');

  // One 8 GiB GPU: 32 blocks of 200 MiB fit whole without the projector, not with a 3 GiB one.
  const big = model(32, 200);
  const facts = (shape: ModelShape) => chatFacts(shape, [8 * GIB], { fit: FIT_TOOL_MISSING });
  const without = decideStart(facts(big), input());
  const withIt = decideStart(facts({ ...big, projectorBytes: 3 * GIB * 1024 * 1024 }), input());
  t.ok(without.verdict === 'start' && withIt.verdict === 'start');
  const layers = (v: typeof without) => (v.verdict === 'start' ? (v.plan.gpuLayers ?? 0) : -1);
  t.ok(layers(withIt) < layers(without), `fewer GPU layers with the projector: ${layers(withIt)} < ${layers(without)}`);
});
