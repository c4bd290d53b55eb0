// Spec 8, the memory check before every worker start, as pure arithmetic the supervisor runs on
// the facts an adapter gathered (a fresh GPU probe, the RAM budget, the model's own metadata):
//
// - "Memory check before every start: real free GPU and RAM capacity, cgroup limit and reserves."
// - "GPUs are selected by UUID order."
// - "shallow fit search: at most ten steps to find a fitting GPU layer count when a fixed tensor
//   split is given (ratios and context are not rewritten)."
// - "Without a fixed split, the checked fit parameters of the build apply."
// - (7) "busy GPU at worker start: the start is rejected"; "Memory forecasts are predictions, not
//   proof of error-free operation."
// - (3.4) the TTS worker starts only while its designated GPU has at least 7 GiB free.
//
// Nothing here reads a file or a clock: the same facts always give the same verdict.
import type { Forecast, GpuView, JobSpec, StartPlan, StartVerdict, WorkerKind, WorkerRecord } from './supervisor.types.js';

export const MIB = 1024 * 1024;
/** q4_0 stores 32 values in 18 bytes; the chat worker's K and V caches are fixed to q4_0. */
export const Q4_0_BYTES_PER_VALUE = 18 / 32;
/** Per used GPU: the CUDA context and compute buffers a llama-server needs beyond weights and KV. */
export const GPU_OVERHEAD_MIB = 512;
/** In RAM: the process, its compute buffers on the CPU and the HTTP server. */
export const RAM_OVERHEAD_MIB = 256;
/** Spec 3.4, 8: the TTS worker's GPU needs at least 7 GiB free. */
export const TTS_MIN_FREE_MIB = 7 * 1024;
/** The shallow search's step budget (spec 8). */
export const FIT_STEP_LIMIT = 10;

/** What the GGUF's own metadata says about the model's memory (from src/adapters/gguf.ts). */
export interface ModelShape {
  layerCount: number;
  /** KV heads per layer (a single number in most models, a per-layer array in some). */
  headCountKv: number[];
  keyLength: number;
  valueLength: number;
  /** Bytes of each block `blk.<i>.*`. */
  layerBytes: number[];
  /** token_embd and the other tensors that stay on the CPU. */
  inputBytes: number;
  /** output and output_norm: on the GPU only when every layer is (`-ngl` above the block count). */
  outputBytes: number;
  /** A vision projector (`--mmproj`, the enhancer's i2i): loaded whole on the first GPU in use, else in RAM. */
  projectorBytes?: number;
}

/** What the plan shows, the profile's view too, when the build's fit tool is missing on a host with GPUs. */
export const FIT_TOOL_MISSING_NOTE = "llama-fit-params is not installed: the layer count is the service's own estimate";
export const FIT_TOOL_MISSING = 'not_installed';

/** llama-fit-params' answer for this profile, or why it has none. */
export type BuildFit =
  | {
      ok: true;
      gpuLayers: number | 'all' | null;
      tensorSplit: number[] | null;
      overrides: string[];
      /** Where its logged projection was made: `host` when the build saw no GPU (a build without a GPU backend). */
      projectedOn?: 'device' | 'host';
    }
  | { ok: false; reason: string };

export type StartDemand =
  | {
      kind: 'chat';
      model: ModelShape;
      /** Total context (shared by the slots: --kv-unified) and slots, as stored. */
      context: number;
      slots: number;
      gpuSplit: number[] | null;
      /** The profile's GPU layer limit, if it sets one. */
      gpuLayers: number | null;
      /**
       * The build's answer when it was asked (GPUs present, no fixed split); `not_installed` when
       * the build has no llama-fit-params, so our own shallow search stands in and the plan says
       * so; null when it was not asked.
       */
      buildFit: BuildFit | typeof FIT_TOOL_MISSING | null;
    }
  /** Image, TTS and STT: what their profile says they need, on one device. */
  | { kind: 'image' | 'tts' | 'stt'; device: 'cpu' | 'first-gpu' | string; gpuMiB: number; ramMiB: number; basis: string };

export interface StartFacts {
  gpus: GpuView[];
  /** Per GPU UUID, the free memory always kept back. */
  gpuReserveMiB: Record<string, number>;
  ram: { availableMiB: number; reserveMiB: number; limitedBy: string };
  demand: StartDemand;
  /**
   * image with an enhancer step (4.7): the enhancer model as a chat start of one slot on every GPU,
   * without a fixed split (the build's fit, CPU offload for what does not fit). It runs before the
   * image worker, never beside it, so each is checked against the same room.
   */
  enhancer?: Extract<StartDemand, { kind: 'chat' }>;
  /** Why the enhancer's demand could not be read (its model is no readable GGUF): the job fails with enhancer_failed. */
  enhancerProblem?: string;
}

export interface CheckInput {
  job: JobSpec;
  /** The workers as the supervisor knows them when the check starts. */
  workers: Record<WorkerKind, WorkerRecord>;
  /** Kinds of our own workers that are idle and could be unloaded to make room. */
  idle: WorkerKind[];
  /**
   * An image job with an enhancer on the CPU is checked in two steps: `enhancer`, the enhancer
   * alone (no GPU, nothing of ours unloaded); then `image`, the image alone once the enhancer has
   * answered. Absent: the job as a whole (its enhancer, if any, on the GPUs, before the image).
   */
  step?: 'enhancer' | 'image';
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
const toMiB = (bytes: number) => bytes / MIB;

/** MiB of the q4_0 K and V cache of one layer for `context` tokens in total. */
export function kvMiBPerLayer(model: ModelShape, context: number): number[] {
  return model.layerBytes.map((_, i) => {
    const heads = model.headCountKv[i] ?? model.headCountKv[0] ?? 0;
    return toMiB(context * heads * (model.keyLength + model.valueLength) * Q4_0_BYTES_PER_VALUE);
  });
}

/**
 * Where `-ngl n` with split `ratios` puts the model, as llama.cpp's `load_tensors` does it: there
 * are block count + 1 slots, the last one the output layer; the last `n` slots go to the GPUs (so
 * any `n >= 1` puts the output layer there, and only `n` above the block count puts every block
 * there), each slot on the first GPU whose cumulative split share exceeds its position among the
 * offloaded slots; the input embeddings and the rest stay in RAM. Ratios that sum to 0 place
 * nothing on a GPU.
 */
export function placeChat(model: ModelShape, context: number, gpuLayers: number, ratios: number[]): { gpuMiB: number[]; ramMiB: number } {
  const layers = model.layerCount;
  const kv = kvMiBPerLayer(model, context);
  const total = sum(ratios);
  const offloaded = total > 0 ? Math.max(0, Math.min(gpuLayers, layers + 1)) : 0;
  const firstOnGpu = layers + 1 - offloaded;
  const cumulative = ratios.map((_, i) => sum(ratios.slice(0, i + 1)) / total);
  const gpuMiB = ratios.map(() => 0);
  let ramMiB = toMiB(model.inputBytes) + RAM_OVERHEAD_MIB;
  for (let slot = 0; slot <= layers; slot++) {
    const size = slot < layers ? toMiB(model.layerBytes[slot] ?? 0) + (kv[slot] ?? 0) : toMiB(model.outputBytes);
    if (slot < firstOnGpu) {
      ramMiB += size;
      continue;
    }
    const position = (slot - firstOnGpu) / offloaded;
    const found = cumulative.findIndex((c) => c > position);
    const device = found >= 0 ? found : ratios.length - 1;
    gpuMiB[device] = (gpuMiB[device] ?? 0) + size;
  }
  const projector = toMiB(model.projectorBytes ?? 0);
  if (projector > 0) {
    const first = gpuMiB.findIndex((m) => m > 0);
    if (first >= 0) gpuMiB[first] = gpuMiB[first]! + projector;
    else ramMiB += projector;
  }
  return { gpuMiB: gpuMiB.map((m) => (m > 0 ? m + GPU_OVERHEAD_MIB : 0)), ramMiB };
}

/** Memory a GPU offers a new worker: free, plus what our workers that go away hold, minus what those that stay will still take, minus the reserve. */
export function gpuAvailableMiB(gpu: GpuView, reserveMiB: number, staying: WorkerRecord[], leaving: WorkerRecord[]): number {
  const measured = (w: WorkerRecord) => sum(gpu.processes.filter((p) => p.pid === w.pid).map((p) => p.usedMiB));
  const expected = (w: WorkerRecord) => Math.max(w.plan?.forecast.gpuMiB[gpu.uuid] ?? 0, measured(w));
  const own = [...staying, ...leaving];
  return gpu.memoryFreeMiB + sum(own.map(measured)) - sum(staying.map(expected)) - reserveMiB;
}

function foreignPids(gpu: GpuView, workers: WorkerRecord[]): number[] {
  const own = new Set(workers.flatMap((w) => (w.pid === null ? [] : [w.pid])));
  return gpu.processes.filter((p) => !own.has(p.pid)).map((p) => p.pid);
}

const round = (n: number) => Math.ceil(n);

interface Room {
  gpus: GpuView[];
  availableMiB: number[];
  ramAvailableMiB: number;
}

function roomFor(facts: StartFacts, input: CheckInput, leavingKinds: WorkerKind[]): Room {
  const all = Object.values(input.workers).filter((w) => w.state !== 'unloaded' && w.kind !== input.job.kind);
  const leaving = all.filter((w) => leavingKinds.includes(w.kind));
  const staying = all.filter((w) => !leavingKinds.includes(w.kind));
  // Workers still loading have not taken their RAM yet: their forecast counts against the budget.
  const pendingRam = sum(staying.filter((w) => w.state === 'loading').map((w) => w.plan?.forecast.ramMiB ?? 0));
  return {
    gpus: facts.gpus,
    availableMiB: facts.gpus.map((g) => gpuAvailableMiB(g, facts.gpuReserveMiB[g.uuid] ?? 0, staying, leaving)),
    ramAvailableMiB: facts.ram.availableMiB - facts.ram.reserveMiB - pendingRam,
  };
}

function plan(
  facts: StartFacts,
  room: Room,
  used: number[],
  forecast: Forecast,
  parts: Pick<StartPlan, 'gpuLayers' | 'gpuLayerLimit' | 'tensorSplit' | 'overrides' | 'fit' | 'fitTool'>,
  foreign: number[],
): StartPlan {
  return {
    ...parts,
    gpus: used.map((i) => facts.gpus[i]!.uuid),
    forecast,
    gpuBudget: facts.gpus.map((g, i) => ({
      uuid: g.uuid,
      freeMiB: g.memoryFreeMiB,
      reserveMiB: facts.gpuReserveMiB[g.uuid] ?? 0,
      forecastMiB: round(forecast.gpuMiB[g.uuid] ?? 0),
      availableMiB: Math.floor(room.availableMiB[i] ?? 0),
    })),
    ramBudget: {
      availableMiB: Math.floor(room.ramAvailableMiB + facts.ram.reserveMiB),
      reserveMiB: facts.ram.reserveMiB,
      forecastMiB: round(forecast.ramMiB),
      limitedBy: facts.ram.limitedBy,
    },
    foreignAtStart: foreign,
  };
}

type Attempt = { ok: true; plan: StartPlan } | { ok: false; code: 'insufficient_memory' | 'start_check_failed'; message: string };

function ramShort(need: number, room: Room): string {
  return `the worker is forecast to need ${round(need)} MiB of RAM, but ${Math.max(0, Math.floor(room.ramAvailableMiB))} MiB are available after the reserve`;
}

function chatAttempt(facts: StartFacts, demand: Extract<StartDemand, { kind: 'chat' }>, room: Room, foreign: number[]): Attempt {
  const { model, context } = demand;
  const maxLayers = model.layerCount + 1;
  const limit = Math.min(demand.gpuLayers ?? maxLayers, maxLayers);
  const basis = `GGUF metadata: ${model.layerCount} blocks, q4_0 KV for ${context} tokens of context (${demand.slots} slots, unified)`;
  const forecastOf = (layers: number, ratios: number[]) => {
    const placed = placeChat(model, context, layers, ratios);
    const gpuMiB: Record<string, number> = {};
    placed.gpuMiB.forEach((m, i) => {
      if (m > 0) gpuMiB[facts.gpus[i]!.uuid] = m;
    });
    return { placed, forecast: { ramMiB: placed.ramMiB, gpuMiB, basis } };
  };
  const gpuFits = (placed: { gpuMiB: number[] }) => placed.gpuMiB.every((m, i) => m === 0 || m <= (room.availableMiB[i] ?? 0));
  const finish = (layers: number, ratios: number[], parts: Pick<StartPlan, 'overrides' | 'fit' | 'fitTool'>, passSplit = true): Attempt => {
    const { placed, forecast } = forecastOf(layers, ratios);
    if (placed.ramMiB > room.ramAvailableMiB) return { ok: false, code: 'insufficient_memory', message: `${ramShort(placed.ramMiB, room)} (${layers} GPU layers)` };
    const used = placed.gpuMiB.flatMap((m, i) => (m > 0 ? [i] : []));
    const split = used.length > 1 && passSplit ? ratios : null;
    const onGpus = facts.gpus.length > 0;
    const parts2 = { gpuLayers: onGpus ? layers : null, gpuLayerLimit: onGpus ? limit : null, tensorSplit: split, ...parts };
    return { ok: true, plan: plan(facts, room, used, forecast, parts2, foreign) };
  };

  if (facts.gpus.length === 0) return finish(0, [], { overrides: [], fit: 'CPU only: no GPU present', fitTool: null });

  let ratios: number[];
  if (demand.gpuSplit !== null) {
    if (demand.gpuSplit.length > facts.gpus.length) {
      return {
        ok: false,
        code: 'start_check_failed',
        message: `the profile's GPU split has ${demand.gpuSplit.length} ratios but ${facts.gpus.length} GPU(s) are present`,
      };
    }
    ratios = facts.gpus.map((_, i) => demand.gpuSplit?.[i] ?? 0);
  } else if (demand.buildFit !== null && demand.buildFit !== FIT_TOOL_MISSING && demand.buildFit.ok) {
    // The build's fit saw the probe's free memory; our own workers still loading and the reserves
    // per GPU are checked here on its placement. Without a -ts of its own, llama.cpp splits by
    // free memory, which the forecast follows; the plan then passes no split.
    const fit = demand.buildFit;
    const fitted = fit.gpuLayers === 'all' || fit.gpuLayers === null ? maxLayers : fit.gpuLayers;
    const layers = Math.min(fitted, limit);
    const split = fit.tensorSplit ? facts.gpus.map((_, i) => fit.tensorSplit?.[i] ?? 0) : facts.gpus.map((g) => g.memoryFreeMiB);
    if (!gpuFits(forecastOf(layers, split).placed)) {
      return { ok: false, code: 'insufficient_memory', message: `the build's fit (-ngl ${layers}) does not fit beside our other workers and the reserves` };
    }
    const all = fit.gpuLayers === 'all' || fit.gpuLayers === null ? ' (all layers)' : '';
    const blind = fit.projectedOn === 'host' ? '; the build saw no GPU (its fit is for host memory only)' : '';
    const note = `the build's llama-fit-params: -ngl ${layers}${layers < fitted ? ` (profile limit ${limit})` : all}${blind}`;
    return finish(layers, split, { overrides: fit.overrides, fit: note, fitTool: 'used' }, fit.tensorSplit !== null);
  } else if (demand.buildFit !== null && demand.buildFit !== FIT_TOOL_MISSING) {
    return { ok: false, code: 'insufficient_memory', message: `the build's fit found no parameters that fit: ${demand.buildFit.reason}` };
  } else {
    // The build has no llama-fit-params: split in proportion to what each GPU offers.
    ratios = room.availableMiB.map((m) => Math.max(0, m));
  }

  // Shallow search (spec 8): at most ten steps; ratios and context stay as they are. Without a
  // split it stands in for the build's missing fit tool, and the plan says so plainly.
  const fixed = demand.gpuSplit !== null;
  const missing = !fixed && demand.buildFit === FIT_TOOL_MISSING;
  const source = fixed ? 'shallow search (fixed split)' : `${missing ? FIT_TOOL_MISSING_NOTE : 'no fit from the build: the layer count is our own estimate'}; shallow search`;
  const fitTool = missing ? FIT_TOOL_MISSING : null;
  let steps = 1;
  if (gpuFits(forecastOf(limit, ratios).placed)) {
    return finish(limit, ratios, { overrides: [], fit: `${source}: all ${limit} layers fit at once (1 step)`, fitTool });
  }
  // -ngl 0 always fits the GPUs (it uses none); look for the largest count that does.
  let low = 1;
  let high = limit - 1;
  let best = 0;
  while (low <= high && steps < FIT_STEP_LIMIT) {
    const mid = Math.floor((low + high + 1) / 2);
    steps += 1;
    if (gpuFits(forecastOf(mid, ratios).placed)) {
      best = mid;
      low = mid + 1;
    } else high = mid - 1;
  }
  return finish(best, ratios, { overrides: [], fit: `${source}: -ngl ${best} of ${limit} in ${steps} steps`, fitTool });
}

function fixedAttempt(facts: StartFacts, demand: Extract<StartDemand, { kind: 'image' | 'tts' | 'stt' }>, room: Room, foreign: number[]): Attempt {
  const forecast: Forecast = { ramMiB: demand.ramMiB, gpuMiB: {}, basis: demand.basis };
  let index = -1;
  if (demand.device === 'first-gpu') index = facts.gpus.length > 0 ? 0 : -1;
  else if (demand.device !== 'cpu') {
    index = facts.gpus.findIndex((g) => g.uuid === demand.device);
    if (index < 0) return { ok: false, code: 'start_check_failed', message: `the designated GPU ${demand.device} is not present` };
  }
  if (index >= 0) {
    const gpu = facts.gpus[index]!;
    const available = room.availableMiB[index] ?? 0;
    if (demand.kind === 'tts') {
      // Spec 3.4: the designated GPU has at least 7 GiB free. That threshold is the TTS worker's
      // margin itself, so it is compared with the free memory before the reserve.
      const need = Math.max(TTS_MIN_FREE_MIB, demand.gpuMiB);
      const free = available + (facts.gpuReserveMiB[gpu.uuid] ?? 0);
      forecast.gpuMiB[gpu.uuid] = need;
      if (need > free) {
        return {
          ok: false,
          code: 'insufficient_memory',
          message: `GPU ${gpu.uuid} has ${Math.max(0, Math.floor(free))} MiB free for us; the TTS worker starts only with at least ${need} MiB free`,
        };
      }
    } else {
      forecast.gpuMiB[gpu.uuid] = demand.gpuMiB;
      if (demand.gpuMiB > available) {
        return {
          ok: false,
          code: 'insufficient_memory',
          message: `GPU ${gpu.uuid} offers ${Math.max(0, Math.floor(available))} MiB after the reserve; the ${demand.kind} worker needs ${demand.gpuMiB} MiB free`,
        };
      }
    }
  } else forecast.ramMiB += demand.gpuMiB;
  if (forecast.ramMiB > room.ramAvailableMiB) return { ok: false, code: 'insufficient_memory', message: ramShort(forecast.ramMiB, room) };
  const used = index >= 0 ? [index] : [];
  return { ok: true, plan: plan(facts, room, used, forecast, { gpuLayers: null, gpuLayerLimit: null, tensorSplit: null, overrides: [], fit: demand.basis, fitTool: null }, foreign) };
}

/** GPUs a start needs free of foreign processes: the image job all, chat all it may use, TTS its own. */
function neededGpus(facts: StartFacts): GpuView[] {
  const { demand } = facts;
  if (demand.kind === 'chat') {
    if (demand.gpuSplit !== null) return facts.gpus.filter((_, i) => (demand.gpuSplit?.[i] ?? 0) > 0);
    return facts.gpus;
  }
  if (demand.kind === 'image') return facts.gpus;
  if (demand.device === 'cpu') return [];
  if (demand.device === 'first-gpu') return facts.gpus.slice(0, 1);
  return facts.gpus.filter((g) => g.uuid === demand.device);
}

function attempt(facts: StartFacts, input: CheckInput, leaving: WorkerKind[]): Attempt {
  const room = roomFor(facts, input, leaving);
  const foreign = facts.gpus.flatMap((g) => foreignPids(g, Object.values(input.workers)));
  return facts.demand.kind === 'chat' ? chatAttempt(facts, facts.demand, room, foreign) : fixedAttempt(facts, facts.demand, room, foreign);
}

/** The GPUs the enhancer sees (CONTRACT section 8): every one for `auto`, none for `cpu`, its one GPU for a UUID (none when absent). */
export function enhancerGpus<G extends { uuid: string }>(gpus: G[], device: string): G[] {
  return device === 'auto' ? gpus : gpus.filter((g) => g.uuid === device);
}

/** The facts as the enhancer sees them, or why it cannot run where it was put. */
function enhancerFacts(facts: StartFacts, device: string): StartFacts | { missing: string } {
  const gpus = enhancerGpus(facts.gpus, device);
  if (device !== 'auto' && device !== 'cpu' && gpus.length === 0) return { missing: `its GPU ${device} is not present` };
  return { ...facts, gpus };
}

const FORECAST_NOTE = " (a forecast from the model's metadata and the probe, not a proof)";

/** Where the enhancer starts, on the device its profile chose: its plan, or the refusal. */
function enhancerAttempt(facts: StartFacts, input: CheckInput): { ok: true; plan: StartPlan } | Extract<StartVerdict, { verdict: 'refuse' }> {
  const cannot = 'the prompt enhancer cannot start';
  if (facts.enhancerProblem !== undefined) return { verdict: 'refuse', code: 'enhancer_failed', message: `${cannot}: ${facts.enhancerProblem}` };
  if (!facts.enhancer) return { verdict: 'refuse', code: 'start_check_failed', message: `${cannot}: its demand was not gathered` };
  const seen = enhancerFacts(facts, input.job.enhancer?.device ?? 'auto');
  if ('missing' in seen) return { verdict: 'refuse', code: 'start_check_failed', message: `${cannot}: ${seen.missing}` };
  const workers = Object.values(input.workers);
  const foreign = seen.gpus.flatMap((g) => foreignPids(g, workers));
  if (foreign.length > 0) {
    return { verdict: 'refuse', code: 'resources_busy', message: `${cannot}: its GPUs are busy with a process that is not ours (pid ${foreign.join(', ')})` };
  }
  const attempt = chatAttempt(seen, facts.enhancer, roomFor(seen, input, []), foreign);
  if (!attempt.ok) return { verdict: 'refuse', code: attempt.code, message: `${cannot}: ${attempt.message}${FORECAST_NOTE}` };
  if (seen.gpus.length === 0 && facts.gpus.length > 0) return { ok: true, plan: { ...attempt.plan, fit: 'CPU only: the profile puts the prompt enhancer on the CPU (-ngl 0, no GPU visible)' } };
  return attempt;
}

/** The memory check's verdict for one worker start. */
export function decideStart(facts: StartFacts, input: CheckInput): StartVerdict {
  // An enhancer on the CPU, checked alone: nothing of ours is unloaded for it.
  if (input.step === 'enhancer') {
    const enhancer = enhancerAttempt(facts, input);
    return 'verdict' in enhancer ? enhancer : { verdict: 'start', plan: { ...enhancer.plan, enhancer: enhancer.plan } };
  }
  const workers = Object.values(input.workers);
  for (const gpu of neededGpus(facts)) {
    const foreign = foreignPids(gpu, workers);
    if (foreign.length > 0) {
      return {
        verdict: 'refuse',
        code: 'resources_busy',
        message: `GPU ${gpu.uuid} is busy with a process that is not ours (pid ${foreign.join(', ')}); the start is rejected and that process is left alone`,
      };
    }
  }
  const first = attempt(facts, input, []);
  // An idle worker of ours that keeps the start from fitting, or from putting all its layers on
  // the GPUs, is an incompatible GPU profile change (3.4): it is unloaded first.
  const layers = (a: Attempt) => (a.ok ? (a.plan.gpuLayers ?? 0) : -1);
  if ((!first.ok && first.code === 'insufficient_memory') || (first.ok && input.idle.length > 0)) {
    const second = input.idle.length > 0 ? attempt(facts, input, input.idle) : first;
    if (second.ok && layers(second) > layers(first)) {
      const why = first.ok ? `only ${layers(first)} of ${layers(second)} GPU layers fit beside it` : first.message;
      return { verdict: 'unload-first', kinds: [...input.idle], message: `${why}; it fits once the idle ${input.idle.join(' and ')} worker is unloaded` };
    }
  }
  if (!first.ok) return { verdict: 'refuse', code: first.code, message: `${first.message}${FORECAST_NOTE}` };
  // The image step after an enhancer on the CPU, or an image job without an enhancer.
  if (input.step === 'image' || !input.job.enhancer) return { verdict: 'start', plan: first.plan };
  const enhancer = enhancerAttempt(facts, input);
  if ('verdict' in enhancer) return enhancer;
  return { verdict: 'start', plan: { ...first.plan, enhancer: enhancer.plan } };
}

/** The room a forecast is made on: the GPUs as probed, their reserves and the RAM (StartFacts without a demand). */
export type ForecastRoom = Pick<StartFacts, 'gpus' | 'gpuReserveMiB' | 'ram'>;

/**
 * CONTRACT section 10, a model file's forecast: the memory check's verdict for a chat worker of
 * `model` with one slot at `context` on `room`, no fixed split, the service's own layer estimate
 * (no file is at hand for the build's fit when the model is still on a hub), nothing of ours
 * loaded and nothing unloaded. Only memory is judged: a GPU process that is not ours would refuse
 * a start now, but says nothing about whether the model fits, so the room's processes are left out.
 */
export function forecastChatStart(room: ForecastRoom, model: ModelShape, context: number): StartVerdict {
  const workers = Object.fromEntries(
    (['chat', 'image', 'tts', 'stt', 'enhancer'] as const).map((kind) => [
      kind,
      { kind, state: 'unloaded', generation: 0, profileId: null, revision: null, slots: 1, pid: null, plan: null, stale: null, last: null } satisfies WorkerRecord,
    ]),
  ) as Record<WorkerKind, WorkerRecord>;
  const job: JobSpec = { id: 'forecast', kind: 'chat', source: 'test', profileId: 'forecast', revision: 1, slots: 1, device: 'cpu', whenBusy: 'refuse', profile: null, at: 0 };
  const facts: StartFacts = {
    ...room,
    gpus: room.gpus.map((gpu) => ({ ...gpu, processes: [] })),
    demand: { kind: 'chat', model, context, slots: 1, gpuSplit: null, gpuLayers: null, buildFit: null },
  };
  return decideStart(facts, { job, workers, idle: [] });
}
