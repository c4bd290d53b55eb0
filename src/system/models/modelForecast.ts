// CONTRACT section 10: what a model file is and whether it fits, in the words of the admin API.
// The facts come from the GGUF header (src/adapters/gguf.ts), the forecast from the memory check
// itself (`forecastChatStart`, the supervisor's `decideStart` for a chat worker of one slot) on the
// room probed now, so that a file listed as fitting is one a chat profile can start.
import { forecastChatStart, MIB, type ForecastRoom, type ModelShape } from '../../../machines/supervisor/index.js';
import type { GgufSummary } from '../../adapters/gguf.js';

/** A model file's facts (null fields: the file does not say). */
export type ModelFacts = GgufSummary;

/** The memory check's answer for a chat worker of the model at `context` on today's inventory. */
export interface ModelForecast {
  /** The memory check would start it (with `gpu_layers` of `layer_count` on the GPUs, the rest in RAM). */
  fits: boolean;
  gpu_layers: number;
  gpus: Array<{ uuid: string; bytes: number }>;
  ram_bytes: number;
  /** Why it does not fit, or what it gives up (layers left in RAM); null when every layer is on a GPU, or there is no GPU. */
  reason: string | null;
  /** The context forecast: the profile default 8192, at most the model's own. */
  context: number;
  /** Every layer there is to place: the blocks and the output layer. */
  layer_count: number;
}

/** A chat profile's default context (CONTRACT section 4). */
export const DEFAULT_CONTEXT = 8192;

/** The context a forecast is made for: the profile default, at most what the model was trained for. */
export function forecastContext(facts: Pick<GgufSummary, 'context_length'>): number {
  return Math.min(DEFAULT_CONTEXT, facts.context_length ?? DEFAULT_CONTEXT);
}

const gib = (mib: number) => `${(mib / 1024).toFixed(1)} GiB`;

/** The forecast for `shape` at `context` on `room`. */
export function forecastView(room: ForecastRoom, shape: ModelShape, context: number): ModelForecast {
  const verdict = forecastChatStart(room, shape, context);
  const layerCount = shape.layerCount + 1;
  if (verdict.verdict !== 'start') {
    return { fits: false, gpu_layers: 0, gpus: [], ram_bytes: 0, reason: verdict.message, context, layer_count: layerCount };
  }
  const { plan } = verdict;
  const gpuLayers = plan.gpuLayers ?? 0;
  const gpus = Object.entries(plan.forecast.gpuMiB).map(([uuid, mib]) => ({ uuid, bytes: Math.ceil(mib * MIB) }));
  let reason: string | null = null;
  if (room.gpus.length > 0 && gpuLayers < layerCount) {
    const whole = forecastChatStart({ ...room, gpus: room.gpus.map((g) => ({ ...g, memoryFreeMiB: Number.MAX_SAFE_INTEGER / MIB })) }, shape, context);
    const need = whole.verdict === 'start' ? Object.values(whole.plan.forecast.gpuMiB).reduce((a, b) => a + b, 0) : 0;
    const offered = plan.gpuBudget.reduce((sum, gpu) => sum + Math.max(0, gpu.availableMiB), 0);
    const short = need > offered ? `needs ${gib(need - offered)} more than the GPUs offer after the reserve: ` : '';
    reason = `${short}${gpuLayers} of ${layerCount} layers on the GPUs, the rest in RAM`;
  }
  return { fits: true, gpu_layers: gpuLayers, gpus, ram_bytes: Math.ceil(plan.forecast.ramMiB * MIB), reason, context, layer_count: layerCount };
}
