// The prompt enhancer's preview in the console (spec 4.7: "In the image test, a preview shows
// original and suggestion; accepting, or keeping the original, skips the re-enhancement for exactly
// that test job"), in chromium against the real serve: the t2i enhancer installed from the local
// hub (a generated tiny model on the real llama-server), an image profile with t2i on and the
// stand-in sd-cli. The page shows the 409 of a preview with nothing installed; then previews,
// shows the original beside a suggestion, will not send a choice for another prompt, makes the
// image from the suggestion and says the enhancer was skipped (sd-cli got exactly the suggestion);
// the next test without a choice is enhanced again and shows its rewrite; the enhancers page
// shows the last preview.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { tempDir } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, otherSession, recordTexts, shot, startServe } from '../helpers/consoleServe.js';
import { startHub } from '../helpers/hub.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

const REPO = 'test-org/tiny-enhancer';
const PROMPT = 'a lighthouse on a cliff at dusk';

/** The prompt of each run of the stand-in sd-cli, in order (it appends its flags to `<model>.runs.jsonl`). */
async function sdPrompts(model: string): Promise<string[]> {
  const lines = (await readFile(`${model}.runs.jsonl`, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  return lines.map((line) => {
    const { args } = JSON.parse(line) as { args: string[] };
    return args[args.indexOf('-p') + 1] ?? '';
  });
}

interface Preview {
  profile_id: string;
  original: string;
  suggestion: string;
  wh_ratio: number | null;
}

t.test('the image test previews the enhancement and makes the image from the suggestion', async (t) => {
  const dir = await tempDir(t);
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'tiny.gguf', await readFile(await tinyModelIn(dir, 'tiny.gguf', { charBias: { '"': 3 } })));
  const recipes = path.join(dir, 'recipes.json');
  const recipe = { repo: REPO, revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }], context: 8192 };
  await writeFile(recipes, JSON.stringify({ t2i: recipe, i2i: recipe }));
  // The enhancer's llama-server starts 1.5 s late (a wrapper), longer than the status push interval
  // (500 ms): the page must show the enhancer worker while it loads, however fast the tiny model is.
  const slowServer = path.join(dir, 'llama-server');
  await writeFile(slowServer, `#!/bin/sh\nsleep 1.5\nexec '${await llamaServerPath()}' "$@"\n`, { mode: 0o755 });
  const { origin } = await startServe(t, { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_LLAMA_SERVER: slowServer });

  // Set-up outside the page: an image profile, its enhancer off and none installed yet.
  const other = await otherSession(origin);
  const enhancersNow = async () => (await (await other('GET', '/api/v1/prompt-enhancers')).json()) as { t2i: { state: string }; preview: Preview | null };
  const model = path.join(dir, 'painter.gguf');
  await writeFile(model, 'ok');
  const created = (await (await other('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model, width: 64, height: 64, steps: 2 } })).json()) as { id: string };

  const browser = await launch(t);
  const w = await openPage(browser, origin);
  const { page } = w;
  await login(page);
  await goTo(page, 'Image test');
  const panel = page.getByRole('region', { name: 'Enhancer preview' });
  await panel.getByText('No preview yet.').waitFor();
  const previewButton = page.getByRole('button', { name: 'Preview enhancement' });
  t.ok(await previewButton.isDisabled(), 'no preview without a prompt');
  await page.getByLabel('Image profile').selectOption({ label: 'painter' });
  await page.getByRole('textbox', { name: 'Prompt' }).fill(PROMPT);

  // Nothing installed: the refusal is shown with its status and code.
  await previewButton.click();
  const refusal = panel.getByTestId('preview-refusal');
  await refusal.waitFor();
  t.match(await refusal.textContent(), /not installed.*\(409 enhancer_not_installed\)/, 'the 409 is shown with its code');

  // The t2i enhancer installed from the hub, and switched on for painter (revision 2).
  t.equal((await other('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' })).status, 202, 'install t2i');
  await until('t2i installed', async () => ((await enhancersNow()).t2i.state === 'installed' ? true : undefined), 30_000);
  const switched = await other('POST', '/api/v1/profiles/prompt-enhancer', { id: created.id, revision: 1, prompt_enhancer: { t2i: null, i2i: false, device: 'auto' } });
  t.same(((await switched.json()) as { blockers: string[] }).blockers, [], 'painter has t2i on and no blocker');

  // The preview: busy while the enhancer loads and answers, then the original beside the suggestion.
  const activity = await recordTexts(page, '[data-testid="enhancer-activity"]');
  const began = Date.now();
  await previewButton.click();
  const suggestion = panel.getByTestId('preview-suggestion');
  await suggestion.waitFor({ timeout: 80_000 });
  const took = Date.now() - began;
  const seen = await activity();
  t.ok(seen.length > 0, `the busy preview said what it waits for: ${seen.join(' | ')}`);
  t.ok(
    seen.some((line) => /^Enhancer worker (loading|loaded|unloading) \(pid \d+\)/.test(line)),
    'the enhancer worker was shown while the preview ran',
  );
  t.equal(await panel.getByTestId('preview-original').textContent(), PROMPT, 'the original is shown');
  const shown = (await suggestion.textContent()) ?? '';
  t.ok(shown.trim().length > 0, `a suggestion of ${shown.length} characters is shown`);
  const server = (await enhancersNow()).preview;
  t.same([server?.profile_id, server?.original, server?.suggestion], [created.id, PROMPT, shown], "it is the service's last preview");
  const shape = (await panel.getByTestId('preview-shape').textContent()) ?? '';
  t.equal(
    shape,
    server?.wh_ratio == null ? 'no shape suggested' : `suggested shape W:H ≈ ${server.wh_ratio.toFixed(2)} (only a suggestion: the profile's resolution stays)`,
    'the shape as a suggestion only',
  );

  // Another prompt in the field: the choice cannot be sent; putting the previewed prompt back allows it.
  const accept = panel.getByRole('button', { name: 'Make image with suggestion' });
  const keep = panel.getByRole('button', { name: 'Make image with original' });
  t.same([await accept.isEnabled(), await keep.isEnabled()], [true, true], 'both choices offered for the previewed prompt');
  await page.getByRole('textbox', { name: 'Prompt' }).fill(`${PROMPT}, in winter`);
  t.same([await accept.isDisabled(), await keep.isDisabled()], [true, true], 'no choice for another prompt');
  t.match(await panel.getByTestId('preview-mismatch').textContent(), /the preview is for another prompt/);
  await panel.getByRole('button', { name: 'Put the previewed prompt back' }).click();
  t.equal(await page.getByRole('textbox', { name: 'Prompt' }).inputValue(), PROMPT, 'the previewed prompt is back');
  t.ok(await accept.isEnabled(), 'and the choice with it');

  // The image from the suggestion: done, the enhancer skipped by the preview, sd-cli got the suggestion.
  await accept.click();
  await page.locator('img.result').waitFor({ timeout: 60_000 });
  const facts = (await page.locator('.facts').textContent()) ?? '';
  t.match(facts, /Phase\s*done/, 'the job is done');
  t.match(facts, /Prompt enhancer\s*skipped: made from the preview's suggestion/, 'the preview choice is shown');
  t.equal(await page.getByTestId('job-rewrite').count(), 0, 'no rewrite of its own: it was not enhanced again');
  await page.evaluate('window.scrollTo(0, 0)');
  await shot(page, 'image-preview');
  t.same(await sdPrompts(model), [shown], "one sd-cli run, its prompt the suggestion the page showed");

  // Without a choice the next test is enhanced again: the page shows the rewrite sd-cli got.
  await page.getByRole('button', { name: 'Generate' }).click();
  const rewrite = page.getByTestId('job-rewrite');
  await rewrite.waitFor({ timeout: 80_000 });
  t.match(await page.locator('.facts').textContent(), /Prompt enhancer\s*ran: the image was made from its rewrite/, 'the enhancer ran');
  const prompts = await sdPrompts(model);
  t.equal(prompts.length, 2, 'a second sd-cli run');
  t.equal(prompts[1], await rewrite.textContent(), 'the rewrite shown is the prompt sd-cli got');

  // The enhancers page shows the last preview.
  await goTo(page, 'Enhancers');
  const last = page.locator('#enhancer-preview');
  t.match(await last.locator('.facts').textContent(), /Profile\s*painter \(revision 2\)\s*Task\s*t2i\s*When/, 'profile, task and time');
  t.same([await last.getByTestId('preview-original').textContent(), await last.getByTestId('preview-suggestion').textContent()], [PROMPT, shown], 'original and suggestion');

  t.same(w.problems.filter((p) => !/status of 409/.test(p)), [], 'the browser console shows no error but the 409 the test provoked');
  t.same(w.foreign, [], 'no request left the origin');
  t.comment(`preview on the tiny model through the page: ${took} ms`);
});
