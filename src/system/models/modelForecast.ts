// CONTRACT section 10: what a model file is and whether it fits, in the words of the admin API.
// The facts come from the GGUF header (src/adapters/gguf.ts), the forecast from the memory check
// itself (`forecastChatStart`, the supervisor's `decideStart` for a chat worker of one slot) on the
// room probed now, so that a file listed as fitting is one a chat profile can start.
import { forecastChatStart, MIB, type ForecastRoom, type ModelShape } from '../../../machines/supervisor/index.js';
import type { GgufSummary } from '../../adapters/gguf.js';
import type { ModelFacts, ModelForecast } from '../observe/console.types.js';

export type { ModelFacts, ModelForecast };

/** A chat profile's default context (CONTRACT section 4). */
export const DEFAULT_CONTEXT = 8192;

/** The context a forecast is made for: the profile default, at most what the model was trained for. */
export function forecastContext(facts: Pick<GgufSummary, 'context_length'>): number {
  return Math.min(DEFAULT_CONTEXT, facts.context_length ?? DEFAULT_CONTEXT);
}

const gib = (mib: number) => `${(mib / 1024).toFixed(1)} GiB`;
/** A shortfall in people's units: MiB below a tenth of a GiB (never "0.0 GiB"), else GiB. */
const shortfall = (mib: number) => (mib < 102.4 ? `${Math.ceil(mib)} MiB` : gib(mib));

/** "GPU 0", "GPUs 0 and 1": the GPUs by their place in the inventory (nvidia-smi's index). */
function gpuNames(room: ForecastRoom, uuids: string[]): string {
  const indexes = uuids.map((uuid) => room.gpus.findIndex((gpu) => gpu.uuid === uuid)).sort((a, b) => a - b);
  if (indexes.length === 1) return `GPU ${indexes[0]}`;
  return `GPUs ${indexes.slice(0, -1).join(', ')} and ${indexes.at(-1)}`;
}

/** The forecast for `shape` at `context` on `room`. */
export function forecastView(room: ForecastRoom, shape: ModelShape, context: number): ModelForecast {
  const verdict = forecastChatStart(room, shape, context);
  const layerCount = shape.layerCount + 1;
  if (verdict.verdict !== 'start') {
    return { fits: false, gpu_layers: 0, gpus: [], ram_bytes: 0, reason: verdict.message, context, layer_count: layerCount, summary: `does not fit at ${context} tokens: ${verdict.message}` };
  }
  const { plan } = verdict;
  const gpuLayers = plan.gpuLayers ?? 0;
  const gpus = Object.entries(plan.forecast.gpuMiB).map(([uuid, mib]) => ({ uuid, bytes: Math.ceil(mib * MIB) }));
  let reason: string | null = null;
  const used = gpus.filter((gpu) => gpu.bytes > 0).map((gpu) => gpu.uuid);
  const ramBytes = Math.ceil(plan.forecast.ramMiB * MIB);
  let summary =
    room.gpus.length === 0 || used.length === 0
      ? `runs on the CPU at ${context} tokens, ${gib(plan.forecast.ramMiB)} of RAM`
      : `fits on ${gpuNames(room, used)} with every layer at ${context} tokens`;
  if (room.gpus.length > 0 && gpuLayers < layerCount) {
    const whole = forecastChatStart({ ...room, gpus: room.gpus.map((g) => ({ ...g, memoryFreeMiB: Number.MAX_SAFE_INTEGER / MIB })) }, shape, context);
    const need = whole.verdict === 'start' ? Object.values(whole.plan.forecast.gpuMiB).reduce((a, b) => a + b, 0) : 0;
    const offered = plan.gpuBudget.reduce((sum, gpu) => sum + Math.max(0, gpu.availableMiB), 0);
    const short = need > offered ? `needs ${shortfall(need - offered)} more than the GPUs offer after the reserve: ` : '';
    reason = `${short}${gpuLayers} of ${layerCount} layers on the GPUs, the rest in RAM`;
    const where = used.length > 0 ? gpuNames(room, used) : room.gpus.length === 1 ? 'GPU 0' : 'the GPUs';
    const more = need > offered ? `needs ${shortfall(need - offered)} more than ${where} ${used.length > 1 || (used.length === 0 && room.gpus.length > 1) ? 'have' : 'has'}: ` : '';
    summary = `${more}${gpuLayers} of ${layerCount} layers on the GPU${room.gpus.length > 1 ? 's' : ''} at ${context} tokens, the rest in RAM`;
  }
  return { fits: true, gpu_layers: gpuLayers, gpus, ram_bytes: ramBytes, reason, context, layer_count: layerCount, summary };
}

/** The contexts a profile made from a model file tries after the model's own, largest first. */
export const PROFILE_CONTEXTS = [32768, 16384, 8192, 4096, 2048] as const;

/**
 * The context a chat profile made from a model file gets: the largest of the model's own context
 * and PROFILE_CONTEXTS, at most the model's own, at which the forecast on `room` has every layer on
 * the GPUs (on a machine without GPUs: at which it fits at all); the smallest, 2048 (at most the
 * model's own), when none does. A model that does not say its own context is held to the profile
 * default, as its listed forecast is.
 */
export function profileContext(room: ForecastRoom, shape: ModelShape, own: number | null): number {
  const most = own ?? DEFAULT_CONTEXT;
  const tries = [most, ...PROFILE_CONTEXTS.filter((context) => context < most)];
  const whole = (view: ModelForecast) => view.fits && (room.gpus.length === 0 || view.gpu_layers === view.layer_count);
  return tries.find((context) => whole(forecastView(room, shape, context))) ?? Math.min(PROFILE_CONTEXTS.at(-1)!, most);
}
