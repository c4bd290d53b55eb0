// The forecast's sentence for people: every layer on one GPU, on two, part of the layers with the
// shortfall named, the CPU only, and a model that does not fit; each from the memory check itself.
import t from 'tap';
import { forecastView } from '../../../src/system/models/modelForecast.js';
import { gpu, MIB, room, SEVEN_GIB_MODEL } from '../../helpers/forecastRoom.js';

const shape = SEVEN_GIB_MODEL;

t.test('every layer on one GPU', async (t) => {
  const view = forecastView(room([gpu('GPU-a', 24 * 1024)]), shape, 8192);
  t.match(view, { fits: true, gpu_layers: 37, layer_count: 37, reason: null });
  t.equal(view.summary, 'fits on GPU 0 with every layer at 8192 tokens');
});

t.test('split over two GPUs', async (t) => {
  const view = forecastView(room([gpu('GPU-a', 5 * 1024), gpu('GPU-b', 5 * 1024)]), shape, 8192);
  t.equal(view.gpu_layers, 37);
  t.equal(view.summary, 'fits on GPUs 0 and 1 with every layer at 8192 tokens');
});

t.test('part of the layers on a GPU too small: the shortfall and the layer count', async (t) => {
  const view = forecastView(room([gpu('GPU-a', 4 * 1024)]), shape, 8192);
  t.equal(view.fits, true);
  t.ok(view.gpu_layers > 0 && view.gpu_layers < 37, `${view.gpu_layers} layers on the GPU`);
  t.match(view.summary, new RegExp(`^needs \\d+\\.\\d GiB more than GPU 0 has: ${view.gpu_layers} of 37 layers on the GPU at 8192 tokens, the rest in RAM$`));
});

t.test('no GPU: the CPU and its RAM', async (t) => {
  const view = forecastView(room([]), shape, 4096);
  t.match(view, { fits: true, gpu_layers: 0, gpus: [] });
  t.match(view.summary, /^runs on the CPU at 4096 tokens, \d+\.\d GiB of RAM$/);
});

t.test('neither the GPU nor the RAM holds it', async (t) => {
  const view = forecastView(room([gpu('GPU-a', 1024)], 2 * 1024), shape, 8192);
  t.equal(view.fits, false);
  t.match(view.summary, /^does not fit at 8192 tokens: /);
  t.equal(view.summary, `does not fit at 8192 tokens: ${view.reason}`);
});

t.test('a small shortfall is said in MiB, never as 0.0 GiB', async (t) => {
  // Every layer on the GPU needs a little more than it has: find the free memory where it just misses.
  const whole = forecastView(room([gpu('GPU-a', 64 * 1024)]), shape, 8192);
  const needMiB = Math.ceil((whole.gpus[0]?.bytes ?? 0) / MIB);
  const view = forecastView(room([gpu('GPU-a', needMiB + 512 - 20)]), shape, 8192);
  t.ok(view.gpu_layers < 37, `${view.gpu_layers} of 37 layers: it just misses`);
  t.match(view.summary, /^needs \d+ MiB more than GPU 0 has: /);
  t.notMatch(view.summary, /0\.0 GiB/);
});
