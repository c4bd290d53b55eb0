// The context a profile made from a model file gets: the largest of the model's own context and
// 32768, 16384, 8192, 4096, 2048 (never above the model's own) at which the memory check's forecast
// has every layer on the GPUs, or fits at all on a machine without GPUs; 2048 when none does. Each
// room is checked against the forecast itself: the chosen context is whole, the larger tries not.
import t from 'tap';
import type { ForecastRoom } from '../../../machines/supervisor/index.js';
import { forecastView, profileContext } from '../../../src/system/models/modelForecast.js';
import { gpu, room, SEVEN_GIB_MODEL } from '../../helpers/forecastRoom.js';

const shape = SEVEN_GIB_MODEL;
const GIB = 1024;

/** Whether the forecast at `context` has every layer on the GPUs (without GPUs: fits). */
function whole(r: ForecastRoom, context: number): boolean {
  const view = forecastView(r, shape, context);
  return view.fits && (r.gpus.length === 0 || view.gpu_layers === view.layer_count);
}

/** `none`: no context is whole, so the smallest (at most the model's own) is taken. */
const cases: Array<{ name: string; room: ForecastRoom; own: number | null; context: number; none?: true }> = [
  { name: 'a big GPU holds the model at its own 131072 tokens', room: room([gpu('GPU-a', 24 * GIB)]), own: 131_072, context: 131_072 },
  { name: 'a 10 GiB GPU: at 131072 part of the layers stay in RAM, so 32768', room: room([gpu('GPU-a', 10 * GIB)]), own: 131_072, context: 32_768 },
  { name: "the model's own context between the steps is tried first", room: room([gpu('GPU-a', 10 * GIB)]), own: 40_960, context: 40_960 },
  { name: 'a 9 GiB GPU: 16384', room: room([gpu('GPU-a', 9 * GIB)]), own: 131_072, context: 16_384 },
  { name: 'an 8 GiB GPU never holds every layer: 2048', room: room([gpu('GPU-a', 8 * GIB)]), own: 131_072, context: 2048, none: true },
  { name: 'two 5 GiB GPUs share the layers: 8192', room: room([gpu('GPU-a', 5 * GIB), gpu('GPU-b', 5 * GIB)]), own: 131_072, context: 8192 },
  { name: 'no GPU and 64 GiB of RAM: the own context', room: room([]), own: 131_072, context: 131_072 },
  { name: 'no GPU and 12 GiB of RAM: 32768', room: room([], 12 * GIB), own: 131_072, context: 32_768 },
  { name: 'no GPU and 4 GiB of RAM: nothing fits, 2048', room: room([], 4 * GIB), own: 131_072, context: 2048, none: true },
  { name: 'a model with a small own context keeps it on a big GPU', room: room([gpu('GPU-a', 24 * GIB)]), own: 4096, context: 4096 },
  { name: 'a model below 2048 that does not fit keeps its own', room: room([], 4 * GIB), own: 1024, context: 1024, none: true },
  { name: 'a model that does not say its own context is held to the default 8192', room: room([gpu('GPU-a', 24 * GIB)]), own: null, context: 8192 },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const chosen = profileContext(c.room, shape, c.own);
    t.equal(chosen, c.context);
    const most = c.own ?? 8192;
    const larger = [most, 32_768, 16_384, 8192, 4096, 2048].filter((context) => context <= most && context > chosen);
    for (const context of larger) t.notOk(whole(c.room, context), `${context} tokens was tried and is not whole`);
    t.equal(whole(c.room, chosen), !c.none, c.none ? `${chosen} tokens is not whole either: the smallest` : `${chosen} tokens is whole`);
  });
}

t.test('the rule is "every layer", not "fits": at 131072 on the 10 GiB GPU the forecast fits with layers in RAM', async (t) => {
  const view = forecastView(room([gpu('GPU-a', 10 * GIB)]), shape, 131_072);
  t.equal(view.fits, true);
  t.ok(view.gpu_layers < view.layer_count, `${view.gpu_layers} of ${view.layer_count} layers on the GPU`);
});
