// The console's Models page in chromium, against the real service (`build()`) and the local hub
// (test/helpers/hub.ts): a tiny GGUF in <state>/models listed with its facts and the forecast's
// sentence and marker, a hostile one with its error; a hub repository's files with their sizes; a
// GGUF's forecast shown before any download (the hub's log holds range requests only, far fewer
// bytes than the file); a hub that refuses shown as the message in role=alert; a pull with its
// progress bar growing to done, the files listed again with the pulled file, a profile made from
// it and shown unpublished on the Profiles page; slow pulls, one waiting for a download slot, the
// same file again refused with 409, each cancelled. The page logs no error but
// the refusals the test provokes, and makes no request beyond the service's origin.
// SERVICE_DECK_SCREENSHOTS=docs/screenshots writes the Models page's screenshots.
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Page } from 'playwright-core';
import t from 'tap';
import { writeTinyModel } from '../../src/adapters/tinyModel.js';
import type { ModelFilesView } from '../../src/system/models/modelFiles.js';
import { build, tempDir } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, recordTexts, shot, unlabelledControls } from '../helpers/consoleServe.js';
import { hostileGguf } from '../helpers/hostileGguf.js';
import { startHub } from '../helpers/hub.js';
import { writeTinyWhisper } from '../helpers/tinyWhisper.js';
import { until } from '../helpers/until.js';

const REPO = 'test-org/tiny-chat';
/** The whisper files pulled slowly and cancelled: two take both download slots, the third waits. */
const SLOW = ['ggml-tiny.bin', 'ggml-small.bin', 'ggml-base.bin'] as const;
/** One simulated GPU: room after the reserve for some of the hub model's layers, not all. */
const GPUS = JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 1560 }]);

t.test('the Models page: files, a forecast before the download, a pull, a profile from it, a cancel', async (t) => {
  const stateDir = await tempDir(t);
  const models = path.join(stateDir, 'models');
  await mkdir(models, { recursive: true, mode: 0o700 });
  const local = await writeTinyModel(path.join(models, 'local-tiny.gguf'));
  await writeFile(path.join(models, 'hostile.gguf'), hostileGguf());
  const work = await tempDir(t);
  // Wide enough that its weights dwarf its header, and that the simulated GPU takes only some layers.
  const big = await readFile(await writeTinyModel(path.join(work, 'big.gguf'), { embedding: 256, layers: 8, heads: 4 }));
  const whisper = await readFile(await writeTinyWhisper(path.join(work, 'ggml-tiny.bin')));
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'big-F32.gguf', big);
  hub.put(REPO, 'main', 'ggml-tiny.bin', whisper);
  hub.put(REPO, 'main', 'README.md', Buffer.from('# tiny\n'));
  for (const file of SLOW.slice(1)) hub.put(REPO, 'main', file, whisper);
  const b = await build(t, { stateDir, env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: GPUS } });
  const listing = async () => (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  const before = await listing();
  const localView = before.files.find((file) => file.path === local)!;
  t.ok(localView.forecast?.fits && localView.forecast.reason === null, 'precondition: the local tiny model fits with every layer');

  const browser = await launch(t);
  const w = await openPage(browser, b.adminUrl);
  const { page } = w;
  await login(page);
  await goTo(page, 'Models');

  // The files in <state>/models: facts, the forecast's marker and sentence, the hostile file's error.
  const localRow = page.locator(`tr[data-file="${local}"]`);
  await localRow.waitFor();
  const localText = (await localRow.textContent()) ?? '';
  t.match(localText, /gguf/, 'the format');
  t.match(localText, /llama · \d+ K parameters · F32 · context \d+ · chat template/, 'the facts: architecture, parameters, quantization, context, template');
  t.ok(localText.includes(`fits ${localView.forecast!.summary}`), `the marker "fits" and the sentence "${localView.forecast!.summary}"`);
  const hostileRow = page.locator(`tr[data-file="${path.join(models, 'hostile.gguf')}"]`);
  t.match(await hostileRow.locator('.error').textContent(), /tensor/i, 'the hostile file shows why it cannot be read');
  t.equal(await localRow.getByRole('button', { name: `Create a profile from ${local}` }).count(), 1, 'a readable GGUF offers a profile');
  t.equal(await hostileRow.getByRole('button').count(), 0, 'an unreadable one does not');
  t.same(await unlabelledControls(page), [], 'every control has a label');

  // A hub that refuses: its message in role=alert, instead of a list.
  t.equal(await page.getByLabel('Revision').inputValue(), 'main', 'the revision is main unless changed');
  await page.getByLabel('Repository', { exact: true }).fill('test-org/nothing-here');
  await page.getByRole('button', { name: 'List files' }).click();
  const hubError = page.getByTestId('hub-error');
  await hubError.waitFor();
  t.equal(await hubError.getAttribute('role'), 'alert');
  t.match(await hubError.textContent(), /did not list test-org\/nothing-here.*404.*\(502 hub_refused\)/, 'the hub\'s refusal, with status and code');

  // The hub box: a repository's files with their sizes.
  await page.getByLabel('Repository', { exact: true }).fill(REPO);
  await page.getByRole('button', { name: 'List files' }).click();
  const hubTable = page.getByRole('table', { name: `Files of ${REPO} at main` });
  await hubTable.waitFor();
  t.equal(await hubError.count(), 0, 'the error is gone with the next listing');
  const hubRows = await hubTable.locator('tbody tr').allTextContents();
  const whisperRow = (file: string) => `${file}${sizeOf(whisper.length)}whisperPull`;
  t.same(
    hubRows,
    [`big-F32.gguf${sizeOf(big.length)}ggufForecastPull`, whisperRow(SLOW[0]), 'README.md7 bytesunknown', whisperRow(SLOW[1]), whisperRow(SLOW[2])],
    'each file with its size in human units and its format; Forecast for a GGUF, Pull for a model file',
  );

  // A forecast before any download: facts and the sentence, from range requests alone.
  await page.getByRole('button', { name: 'Forecast big-F32.gguf' }).click();
  const detail = page.locator('tr[data-forecast="big-F32.gguf"]');
  await detail.waitFor();
  const remote = (await (await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`)).json()) as { forecast: { summary: string; fits: boolean; gpu_layers: number; reason: string | null } };
  t.ok(remote.forecast.fits && remote.forecast.gpu_layers > 0 && remote.forecast.reason !== null, `precondition: the hub model fits partly on the GPU (${remote.forecast.summary})`);
  const detailText = (await detail.textContent()) ?? '';
  t.ok(detailText.includes(`partly on GPU ${remote.forecast.summary}`), `the marker "partly on GPU" and the sentence "${remote.forecast.summary}"`);
  t.match(detailText, /llama · \d+ M parameters · F32/, 'the facts read from the header');
  t.match(detailText, /nothing is downloaded until you pull it/);
  const cdnBefore = hub.requests.filter((r) => r.method === 'GET' && r.url.startsWith('/cdn/'));
  t.ok(cdnBefore.length > 0, 'the header was read from the hub');
  t.ok(cdnBefore.every((r) => r.range !== undefined), 'before Pull: every read of the file was a range request, none a full GET');
  t.ok(hub.sent() < big.length / 4, `before Pull the hub served ${hub.sent()} bytes of ${big.length}`);

  // A pull: progress while it runs (slow chunks), then done; the files are listed again.
  hub.options.chunkBytes = 256 * 1024;
  hub.options.chunkDelayMs = 60;
  const progress = await recordTexts(page, '#model-pulls .pull-progress');
  const values = await recordValues(page);
  await page.getByRole('button', { name: 'Pull big-F32.gguf' }).click();
  const bar = page.getByRole('progressbar', { name: 'Pull of big-F32.gguf' });
  await bar.waitFor();
  await until('the pull under way', async () => (Number(await bar.getAttribute('aria-valuenow')) > 0 ? true : undefined));
  await page.locator('#model-hub').scrollIntoViewIfNeeded();
  await shot(page, 'models');
  const pulled = path.join(models, 'test-org', 'tiny-chat', 'big-F32.gguf');
  const pullItem = page.locator('#model-pulls li').first();
  await pullItem.getByText('done', { exact: true }).waitFor({ timeout: 60_000 });
  const seen = await values();
  t.ok(seen.length >= 3, `the bar moved in ${seen.length} steps: ${seen.join(', ')}`);
  t.ok(seen.every((v, i) => i === 0 || v >= seen[i - 1]!), 'and never back');
  t.match((await progress()).join('\n'), /\d+% · [\d.]+ (KiB|MiB) of [\d.]+ MiB/, 'the percent and the bytes of the bytes');
  t.equal((await stat(pulled)).size, big.length, 'the file is in <state>/models/<owner>/<name>');
  await page.locator(`tr[data-file="${pulled}"]`).waitFor();
  t.pass('the files list shows the pulled file without a reload');
  hub.options.chunkDelayMs = 0;

  // A profile from the pulled file: asked its name and context, then on the Profiles page, unpublished.
  await pullItem.getByRole('button', { name: `Create a profile from ${pulled}` }).click();
  const form = page.getByRole('form', { name: 'Create a profile from a model file' });
  t.equal(await form.getByLabel('Profile name (the API\'s model name)').inputValue(), 'big-F32', 'the name proposed from the file');
  t.equal(await form.getByLabel('Context (tokens)').inputValue(), String(remote.forecast.summary.match(/at (\d+) tokens/)![1]), 'the context of the forecast');
  await form.getByLabel('Profile name (the API\'s model name)').fill('big-chat');
  await form.getByLabel('Context (tokens)').fill('2048');
  await form.getByRole('button', { name: 'Create' }).click();
  const created = page.getByTestId('created-profile');
  await created.waitFor();
  t.match(await created.textContent(), /Created the chat profile big-chat\. It is not published/, 'created, and said to be unpublished');
  await shot(page, 'models-profile');
  const { profiles } = (await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: Array<{ name: string; params: { model: string; context: number } }> };
  t.match(profiles.find((p) => p.name === 'big-chat')?.params, { model: pulled, context: 2048 }, 'the profile names the pulled file and the context given');
  await created.getByRole('link', { name: 'big-chat' }).click();
  await page.getByRole('heading', { level: 1, name: 'Profiles' }).waitFor();
  const row = page.locator('tr[data-profile="big-chat"]');
  await row.waitFor();
  t.match(await row.textContent(), /chat1not published/, 'on the Profiles page: revision 1, not published');
  t.equal(await row.getAttribute('aria-current'), 'true', 'the linked profile is the one marked');

  // Slow pulls: the hub holds the bytes after the first chunk until the test lets go. Two hold
  // both download slots, a third waits for one; the same file again is refused; each is cancelled.
  await goTo(page, 'Models');
  await page.getByLabel('Repository', { exact: true }).fill(REPO);
  await page.getByRole('button', { name: 'List files' }).click();
  let release!: () => void;
  hub.options.chunkBytes = 16 * 1024;
  hub.options.gate = new Promise<void>((resolve) => (release = resolve));
  t.teardown(() => release());
  const item = (file: string) => page.locator('#model-pulls li', { has: page.getByText(`${REPO}/${file}`, { exact: true }) });
  for (const file of SLOW) {
    await page.getByRole('button', { name: `Pull ${file}` }).click();
    await item(file).waitFor();
  }
  await item(SLOW[2]).getByText('waiting for a download slot').waitFor();
  t.pass('the third pull waits for a download slot');
  const slow = page.getByRole('progressbar', { name: `Pull of ${SLOW[0]}` });
  // Both running pulls have asked the hub for the bytes and got their first chunk; the waiting one has not.
  const fetched = (file: string) => hub.requests.some((r) => r.method === 'GET' && r.url === `/${REPO}/resolve/main/${file}`);
  await until('the two running pulls asking for their bytes', async () => (fetched(SLOW[0]) && fetched(SLOW[1]) ? true : undefined));
  t.notOk(fetched(SLOW[2]), 'the waiting pull has not asked for its bytes');
  t.match(await slow.getAttribute('aria-valuetext'), /^\d+% · [\d.]+ (bytes|KiB) of 3\.0 MiB/, 'the bar says how far it is in words too');
  await page.getByRole('button', { name: `Pull ${SLOW[0]}` }).click();
  const pullError = page.getByTestId('pull-error');
  await pullError.waitFor();
  t.match(await pullError.textContent(), /Pull of ggml-tiny\.bin: .*\(409 pull_running\)/, 'the same file again: the refusal in role=alert');
  t.equal(await pullError.getAttribute('role'), 'alert');
  await shot(page, 'models-pulls');
  for (const file of SLOW) {
    await page.getByRole('button', { name: `Cancel the pull of ${file}` }).click();
    await item(file).getByText('cancelled', { exact: true }).waitFor();
  }
  t.equal(await page.getByRole('progressbar').count(), 0, 'no bar once cancelled');
  release();
  hub.options.gate = null;
  t.notOk((await listing()).files.some((file) => file.path.endsWith('.bin')), 'no file of the cancelled pulls is listed');

  const provoked = [/status of 502/, /status of 409/];
  t.same(w.problems.filter((p) => !provoked.some((e) => e.test(p))), [], 'the browser console shows no error but the refusals the test provoked');
  t.equal(w.problems.length, 2, 'the hub\'s 502 and the pull\'s 409, once each');
  t.same(w.foreign, [], 'no request left the service\'s origin');
});

/** A size as the page writes it (ui.tsx `bytes`). */
function sizeOf(value: number): string {
  return value >= 2 ** 20 ? `${(value / 2 ** 20).toFixed(1)} MiB` : `${Math.round(value / 1024)} KiB`;
}

/** Every aria-valuenow the pull's bar showed, recorded in the page as it changed. */
async function recordValues(page: Page): Promise<() => Promise<number[]>> {
  // Page scripts as text: the tests' type check has no DOM library.
  await page.evaluate(`(() => {
    const seen = [];
    window.__values = seen;
    const note = () => {
      const value = document.querySelector('#model-pulls [role="progressbar"]')?.getAttribute('aria-valuenow');
      if (value != null && seen[seen.length - 1] !== Number(value)) seen.push(Number(value));
    };
    new MutationObserver(note).observe(document.body, { subtree: true, childList: true, attributes: true });
  })()`);
  return () => page.evaluate('window.__values') as Promise<number[]>;
}
