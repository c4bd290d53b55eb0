// The facts the memory check judges (spec 8), gathered fresh before every worker start: the real
// GPU inventory (nvidia-smi, or the simulated one), the RAM budget from cgroup v2/v1 and the host,
// the configured reserves, and what the worker will need: for chat the GGUF's own metadata (and,
// on GPUs without a fixed split, the fit that the build's own llama-fit-params reports, or that
// the build has none, which the plan then says), for image, TTS
// and STT what their profiles say; for an image job with the prompt enhancer, the enhancer model
// as a chat start of one slot as well. The supervisor's `decideStart` turns these facts into a plan or
// a refusal; nothing is decided here.
import { stat } from 'node:fs/promises';
import { fromCallback, fromPromise } from 'xstate';
import type { BuildFit, CheckInput, ForecastRoom, GpuView, ModelShape, StartDemand, StartFacts, SupervisorEvent } from '../../machines/supervisor/index.js';
import { enhancerGpus, FIT_TOOL_MISSING, MIB } from '../../machines/supervisor/index.js';
import { runFitParams } from '../adapters/fitParams.js';
import { modelFacts, readGgufInfo, type GgufInfo } from '../adapters/gguf.js';
import { probeGpus, type Gpu } from '../adapters/gpus.js';
import { ramBudget, readRamFacts } from '../adapters/memory.js';
import { resolveRuntime, type RuntimeLookup } from '../adapters/runtimes.js';
import type { Config } from '../config.js';
import type { ChatParams, StoredProfile } from '../store/profile.schema.js';

/** The compute buffer of an image worker grows with the picture: about 1 GiB per megapixel. */
const IMAGE_MIB_PER_MEGAPIXEL = 1024;
const TTS_RAM_MIB = 512;
const STT_BASE_RAM_MIB = 200;

export interface FactsDeps {
  config: Config;
  lookup: RuntimeLookup;
  /** The pids of our own worker processes, for the probe's own/foreign marks. */
  ownPids: () => ReadonlySet<number>;
}

export function gpuViews(gpus: Gpu[]): GpuView[] {
  return gpus.map((g) => ({
    uuid: g.uuid,
    memoryTotalMiB: g.memoryTotalMiB,
    memoryFreeMiB: g.memoryFreeMiB,
    processes: g.processes.map((p) => ({ pid: p.pid, usedMiB: p.usedMiB })),
  }));
}

async function fileMiB(file: string | undefined): Promise<number> {
  if (!file) return 0;
  return (await stat(file)).size / MIB;
}

/** What a llama-server start is asked to hold: a chat profile's stored parameters, or the enhancer's (4.7). */
type ServerParams = Pick<ChatParams, 'model' | 'context' | 'slots' | 'gpuSplit' | 'gpuLayers'> & {
  /** The enhancer's vision projector (`--mmproj`, i2i): llama-server loads it whole on the first device. */
  projector?: string | null;
};

/** What the memory check needs of a GGUF model (its header, a split model's merged), and of its projector's bytes. */
export function chatShape(info: GgufInfo, projectorBytes = 0): ModelShape {
  const facts = modelFacts(info);
  // Without its own output.weight the model shares token_embd, which llama.cpp then loads a
  // second time as the output layer (on the GPU once every layer is there).
  const tiedOutput = info.tensors.some((t) => t.name === 'output.weight') ? 0 : (info.tensors.find((t) => t.name === 'token_embd.weight')?.bytes ?? 0);
  return {
    layerCount: facts.layerCount,
    headCountKv: facts.headCountKvPerLayer,
    keyLength: facts.keyLength,
    valueLength: facts.valueLength,
    layerBytes: facts.layerBytes.slice(0, facts.layerCount),
    inputBytes: facts.inputBytes,
    outputBytes: facts.outputBytes + tiedOutput,
    ...(projectorBytes > 0 ? { projectorBytes } : {}),
  };
}

async function chatDemand(params: ServerParams, gpus: GpuView[], deps: FactsDeps, signal: AbortSignal, env: NodeJS.ProcessEnv = deps.config.env): Promise<Extract<StartDemand, { kind: 'chat' }>> {
  const info = await readGgufInfo(params.model);
  const projectorBytes = params.projector ? (await stat(params.projector)).size : 0;
  let buildFit: BuildFit | typeof FIT_TOOL_MISSING | null = null;
  if (gpus.length > 0 && params.gpuSplit === null) {
    const tool = await resolveRuntime('llama-fit-params', deps.lookup);
    if (tool) {
      const outcome = await runFitParams(
        tool,
        // The build's fit knows nothing of a projector: its room is kept back as part of the margin.
        { model: params.model, context: params.context, slots: params.slots, reserveMiB: deps.config.gpuReserveMiB.default + Math.ceil(projectorBytes / MIB), kv: { typeK: 'q4_0', typeV: 'q4_0' } },
        { env, signal },
      );
      buildFit = outcome.ok
        ? { ok: true, gpuLayers: outcome.gpuLayers, tensorSplit: outcome.tensorSplit, overrides: outcome.overrides, ...(outcome.projectedOn ? { projectedOn: outcome.projectedOn } : {}) }
        : outcome;
    } else buildFit = FIT_TOOL_MISSING;
  }
  return {
    kind: 'chat',
    model: chatShape(info, projectorBytes),
    context: params.context,
    slots: params.slots,
    gpuSplit: params.gpuSplit,
    gpuLayers: params.gpuLayers,
    buildFit,
  };
}

async function otherDemand(profile: StoredProfile): Promise<StartDemand> {
  switch (profile.category) {
    case 'tts': {
      const { device, memoryMiB } = profile.params;
      return { kind: 'tts', device, gpuMiB: memoryMiB, ramMiB: TTS_RAM_MIB, basis: `the TTS profile: ${memoryMiB} MiB on ${device}` };
    }
    case 'stt': {
      const model = await fileMiB(profile.params.model);
      return { kind: 'stt', device: 'cpu', gpuMiB: 0, ramMiB: Math.ceil(model * 1.2 + STT_BASE_RAM_MIB), basis: `the STT model file (${Math.ceil(model)} MiB) and the engine` };
    }
    case 'image': {
      const { params } = profile;
      const files = await Promise.all([params.model, ...Object.values(params.files)].map((f) => fileMiB(f)));
      const weights = files.reduce((a, b) => a + b, 0);
      const megapixels = (params.width * params.height) / (1024 * 1024);
      const gpuMiB = Math.ceil(weights * 1.1 + megapixels * IMAGE_MIB_PER_MEGAPIXEL);
      return { kind: 'image', device: 'first-gpu', gpuMiB, ramMiB: 512, basis: `the image model files (${Math.ceil(weights)} MiB) and ${params.width}x${params.height}` };
    }
    default:
      throw new Error(`a ${profile.category} profile has no fixed demand`);
  }
}

/** The room a start is checked on now: the GPUs probed afresh, their reserves, the RAM budget. */
export async function gatherRoom(deps: Pick<FactsDeps, 'config' | 'ownPids'>): Promise<ForecastRoom> {
  const inventory = await probeGpus(deps.config.env, deps.ownPids());
  if (inventory.problem) throw new Error(`the GPU probe failed: ${inventory.problem}`);
  const gpus = gpuViews(inventory.gpus);
  const ram = await readRamFacts();
  const budget = ramBudget(ram, 0);
  const { gpuReserveMiB, ramReserveMiB } = deps.config;
  return {
    gpus,
    gpuReserveMiB: Object.fromEntries(gpus.map((g) => [g.uuid, gpuReserveMiB.byGpu[g.uuid] ?? gpuReserveMiB.default])),
    ram: { availableMiB: ram.availableBytes / MIB, reserveMiB: ramReserveMiB, limitedBy: `${budget.limitedBy} (${ram.source})` },
  };
}

export async function gatherStartFacts(input: CheckInput, deps: FactsDeps, signal: AbortSignal): Promise<StartFacts> {
  const profile = input.job.profile as StoredProfile;
  const room = await gatherRoom(deps);
  const { gpus } = room;
  const demand = profile.category === 'chat' ? await chatDemand(profile.params, gpus, deps, signal) : await otherDemand(profile);
  // The enhancer (4.7): one slot, no fixed split, so the build's fit places it on the GPUs its
  // device allows (every one for `auto`, its own for a UUID, none for `cpu`). Not asked for the
  // image step that follows an enhancer on the CPU.
  const step = input.step === 'image' ? null : input.job.enhancer;
  let enhancer: Extract<StartDemand, { kind: 'chat' }> | undefined;
  let enhancerProblem: string | undefined;
  if (step) {
    const { device } = step;
    const seen = enhancerGpus(gpus, device);
    const env = device === 'auto' || seen.length === 0 ? deps.config.env : { ...deps.config.env, CUDA_VISIBLE_DEVICES: device };
    const params = { model: step.model, projector: step.mmproj, context: step.context, slots: 1, gpuSplit: null, gpuLayers: null };
    enhancer = await chatDemand(params, seen, deps, signal, env).catch((error: unknown) => {
      enhancerProblem = `its model ${step.model} cannot be read: ${(error as Error).message}`;
      return undefined;
    });
  }
  return {
    ...room,
    demand,
    ...(enhancer ? { enhancer } : {}),
    ...(enhancerProblem === undefined ? {} : { enhancerProblem }),
  };
}

/** The supervisor's real actors: the fact gatherer and the GPU watcher. */
export function supervisorAdapters(deps: FactsDeps) {
  return {
    gatherStartFacts: fromPromise<StartFacts, CheckInput>(({ input, signal }) => gatherStartFacts(input, deps, signal)),
    watchGpus: fromCallback<SupervisorEvent>(({ sendBack }) => {
      // One probe at a time: the next is scheduled when the last has answered, so a slow
      // nvidia-smi never piles up and answers never arrive out of order.
      let stopped = false;
      let timer: NodeJS.Timeout | undefined;
      const poll = async () => {
        const inventory = await probeGpus(deps.config.env, deps.ownPids()).catch(() => undefined);
        if (stopped) return;
        if (inventory && !inventory.problem) sendBack({ type: 'gpu.inventory', gpus: gpuViews(inventory.gpus) });
        timer = setTimeout(() => void poll(), deps.config.gpuPollMs);
      };
      timer = setTimeout(() => void poll(), deps.config.gpuPollMs);
      return () => {
        stopped = true;
        clearTimeout(timer);
      };
    }),
  };
}
