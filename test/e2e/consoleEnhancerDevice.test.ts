// Where an image profile's prompt enhancer runs (CONTRACT 8: `auto`, `cpu` or a GPU UUID), chosen
// on the console's Enhancers page, in chromium against the real serve on a simulated inventory of
// two GPUs: the choices offered are every GPU, the CPU and each GPU of the inventory; a choice is
// saved as the profile's next revision.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { tempDir } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, otherSession, startServe } from '../helpers/consoleServe.js';
import { until } from '../helpers/until.js';

const GPU_B = 'GPU-bbbbbbbb-0000-0000-0000-000000000002';
const INVENTORY = JSON.stringify([
  { uuid: 'GPU-aaaaaaaa-0000-0000-0000-000000000001', name: 'sim-a', memoryTotalMiB: 24576 },
  { uuid: GPU_B, name: 'sim-b', memoryTotalMiB: 24576 },
]);

t.test('the Enhancers page sets where an image profile\'s enhancer runs', async (t) => {
  const dir = await tempDir(t);
  const { origin } = await startServe(t, { SERVICE_DECK_GPUS: INVENTORY });
  const other = await otherSession(origin);
  const model = path.join(dir, 'painter.gguf');
  await writeFile(model, 'ok');
  const created = (await (await other('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model, width: 64, height: 64, steps: 2 } })).json()) as { id: string };
  const stored = async () => {
    const { profiles } = (await (await other('GET', '/api/v1/profiles')).json()) as { profiles: Array<{ id: string; revision: number; prompt_enhancer?: { device: string } }> };
    return profiles.find((p) => p.id === created.id)!;
  };

  const browser = await launch(t);
  const w = await openPage(browser, origin);
  const { page } = w;
  await login(page);
  await goTo(page, 'Enhancers');
  const select = page.getByLabel('Enhancer device of painter');
  await select.waitFor();
  const options = await select.locator('option').evaluateAll((nodes) => nodes.map((n) => n.getAttribute('value')));
  t.same(options, ['auto', 'cpu', 'GPU-aaaaaaaa-0000-0000-0000-000000000001', GPU_B], 'every GPU, the CPU, and each GPU of the inventory');
  t.equal(await select.inputValue(), 'auto');

  await select.selectOption('cpu');
  const onCpu = await until('saved on the CPU', async () => ((await stored()).prompt_enhancer?.device === 'cpu' ? stored() : undefined));
  t.equal(onCpu.revision, 2, 'saved as the next revision');
  await until('the page shows it', async () => ((await page.getByLabel('Enhancer device of painter').inputValue()) === 'cpu' ? true : undefined));

  await page.getByLabel('Enhancer device of painter').selectOption(GPU_B);
  const onGpu = await until('saved on GPU b', async () => ((await stored()).prompt_enhancer?.device === GPU_B ? stored() : undefined));
  t.equal(onGpu.revision, 3);
  t.same(w.problems, [], 'the browser console shows no error');
});
