// The operator console in a real browser: Debian's chromium driven by playwright-core against the
// real `service-deck serve` (built dist/ and dist/console), the tiny chat model on the real
// llama-server and the stand-in sd-cli. Everything goes through the page: login, a chat profile
// created from the schema form and published, the listener started, a chat test whose tokens
// appear as they stream (and one more through the Responses API), the worker in the overview and its state chart in its loaded state,
// unpublish, logout; an image test with its progress, a 409 while busy, then the picture. The
// page's console shows no error, and no request leaves the service's origin.
// SERVICE_DECK_SCREENSHOTS=docs/screenshots writes the README's screenshots.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { PASSWORD, TOKEN, tempDir } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, recordTexts, shot, startServe, unlabelledControls } from '../helpers/consoleServe.js';
import { tinyModelIn } from '../helpers/llama.js';

t.test('the console in chromium: every admin task of a chat profile, live overview and state chart, then an image test', async (t) => {
  const { origin, apiPort } = await startServe(t);
  const modelDir = await tempDir(t);
  // Wider than the default tiny model: it writes ~300 rather than ~4 000 tokens a second, so the
  // chat test below streams for seconds, not for a few of the console feed's 50 ms steps.
  const model = await tinyModelIn(modelDir, 'tiny.gguf', { embedding: 512, layers: 6, heads: 8, seed: 7 });

  // What the listener answers before any script runs.
  const index = await fetch(`${origin}/`);
  t.equal(index.status, 200, 'the console is served at /');
  t.match(index.headers.get('content-type'), /^text\/html/);
  const csp = index.headers.get('content-security-policy') ?? '';
  t.match(csp, /default-src 'none'/, 'a strict CSP');
  t.match(csp, /script-src 'self'(;|$)/, 'scripts only from the service itself, none inline');
  t.notMatch(csp, /unsafe-inline|unsafe-eval|https?:/, 'no inline code and no remote origin');
  t.equal(index.headers.get('access-control-allow-origin'), null, 'no CORS');
  const html = await index.text();
  t.notMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/, 'the page has no inline script');

  const browser = await launch(t);
  const w = await openPage(browser, origin);
  const { page } = w;
  await login(page);
  t.pass('logged in with the operator password');

  // Profiles: a chat profile from the schema form, then published.
  await goTo(page, 'Profiles');
  await page.getByRole('button', { name: 'New profile' }).click();
  const form = page.getByRole('form', { name: 'New profile' });
  await form.getByLabel('Category').selectOption('chat');
  await form.getByLabel('Name (the API\'s model name)').fill('tiny-chat');
  await form.getByLabel('model', { exact: true }).fill(model);
  await form.getByLabel('context').fill('2048');
  await shot(page, 'profile-form');
  await form.getByRole('button', { name: 'Create' }).click();
  const row = page.locator('tr[data-profile="tiny-chat"]');
  await row.waitFor();
  t.match(await row.textContent(), /chat1not publishedyes/, 'created: revision 1, not published, can run');
  await page.getByRole('button', { name: 'Publish tiny-chat' }).click();
  await row.getByText('published', { exact: true }).waitFor();
  t.pass('published from the list');

  // Overview: start the listener; its state arrives by the event stream.
  await goTo(page, 'Overview');
  await page.getByRole('button', { name: 'Start' }).click();
  await page.locator('.endpoint.running').waitFor();
  const address = await page.locator('.facts').first().textContent();
  t.match(address, /running/, 'the listener runs');

  // The inference API answers the published profile with the bearer token (outside the page).
  const models = await fetch(`http://127.0.0.1:${apiPort}/v1/models`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.same(((await models.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id), ['tiny-chat']);

  // Chat test: tokens appear while the answer streams, then timings and usage.
  await goTo(page, 'Chat test');
  await page.getByLabel('Chat profile').selectOption({ label: 'tiny-chat' });
  await page.getByLabel('Max tokens').fill('400');
  await page.getByLabel('Message', { exact: true }).fill('Hello there');
  const texts = await recordTexts(page, '[data-testid="streaming-answer"]');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.locator('.msg.assistant:not(.streaming)').waitFor({ timeout: 120_000 });
  const seen = (await texts()).filter((text) => !text.endsWith('…'));
  t.ok(seen.length >= 3, `the answer grew in ${seen.length} steps while it streamed`);
  t.ok(seen.every((text, i) => i === 0 || text.startsWith(seen[i - 1]!)), 'each step extends the one before');
  await page.getByText(/tokens in .* tokens\/s/).first().waitFor();
  const facts = await page.locator('.facts').textContent();
  t.match(facts, /Generation\d+ tokens in [\d.]+ (ms|s) \([\d.]+ tokens\/s\)/, 'generation timings shown');
  t.match(facts, /Usage\d+ prompt \+ \d+ completion = \d+ tokens/, 'usage shown');
  t.equal(await page.locator('.msg.user').count(), 1, 'the question is in the conversation');
  await shot(page, 'chat-test');

  // The other door, OpenAI's Responses API, is an extension beyond the specification: off on a
  // default install, so its option is disabled and the route answers 404, until the overview's
  // switch turns it on, for the test and for the API clients at once.
  const askResponses = () =>
    fetch(`http://127.0.0.1:${apiPort}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny-chat', input: 'Hello', max_output_tokens: 1 }),
    });
  t.equal(await page.getByLabel('API', { exact: true }).locator('option[value="responses"]').isDisabled(), true, 'the Responses door cannot be chosen while it is off');
  t.equal((await askResponses()).status, 404, 'and POST /v1/responses answers 404');
  await goTo(page, 'Overview');
  const toggle = page.getByRole('switch', { name: /Responses API/ });
  t.equal(await toggle.isChecked(), false, 'the overview shows the Responses API off');
  await toggle.check();
  await page.getByText('The Responses API is on', { exact: false }).first().waitFor();
  t.equal(await toggle.isChecked(), true, 'the switch is on');
  t.match(await page.locator('#extensions').textContent(), /Responses API \(POST \/v1\/responses\)\s*on/, 'and says so');
  const served = await askResponses();
  t.equal(served.status, 200, 'POST /v1/responses answers from the next request');
  await served.body?.cancel();
  await shot(page, 'extensions');
  await goTo(page, 'Chat test');

  // The same conversation through the other door, OpenAI's Responses API.
  await page.getByLabel('API', { exact: true }).selectOption({ label: 'Responses API (/v1/responses)' });
  await page.getByLabel('Max tokens').fill('32');
  await page.getByLabel('Message', { exact: true }).fill('And through the other door');
  await page.getByRole('button', { name: 'Send' }).click();
  await page.locator('.msg.assistant:not(.streaming)').nth(1).waitFor({ timeout: 120_000 });
  await page.getByText('Responses API (/v1/responses)', { exact: true }).last().waitFor();
  const doorFacts = await page.locator('.facts').textContent();
  t.match(doorFacts, /APIResponses API \(\/v1\/responses\)Phasedone/, 'the second test went through the Responses API');
  t.match(doorFacts, /Usage\d+ prompt \+ 32 completion = \d+ tokens/, 'its usage shown');
  t.equal(await page.locator('.msg.user').count(), 2, 'both questions are in the conversation');

  // Overview: the chat worker, loaded.
  await goTo(page, 'Overview');
  const worker = page.locator('tr[data-worker="chat"]');
  await worker.getByText('loaded', { exact: true }).waitFor();
  t.match(await worker.textContent(), /tiny-chat/, 'the worker shows its profile');
  t.match(await worker.textContent(), /\d+ active of 1 slots/);
  await shot(page, 'overview');

  // The state chart of the chat worker, drawn from its machine, in its loaded state.
  await goTo(page, 'State charts');
  await page.getByRole('button', { name: /chatWorker/ }).click();
  const active = page.locator('svg [aria-label$="(active)"]');
  await active.first().waitFor();
  const activeLabels = await active.evaluateAll((nodes) => nodes.map((n) => n.getAttribute('aria-label')));
  t.ok(activeLabels.some((label) => /loaded/.test(label ?? '')), `an active state is loaded: ${activeLabels.join(', ')}`);
  await shot(page, 'state-chart');

  // Unpublish, then log out: the old cookie is no longer a session.
  await goTo(page, 'Profiles');
  await page.getByRole('button', { name: 'Unpublish tiny-chat' }).click();
  await row.getByText('not published', { exact: true }).waitFor();
  t.pass('unpublished');

  // Image test: progress, a 409 while busy, then the picture.
  const painterModel = path.join(modelDir, 'painter.gguf');
  await writeFile(painterModel, 'slow');
  await page.getByRole('button', { name: 'New profile' }).click();
  await form.getByLabel('Category').selectOption('image');
  await form.getByLabel('Name (the API\'s model name)').fill('painter');
  await form.getByLabel('model', { exact: true }).fill(painterModel);
  await form.getByLabel('width').fill('64');
  await form.getByLabel('height').fill('72');
  await form.getByLabel('steps').fill('10');
  await form.getByRole('button', { name: 'Create' }).click();
  await page.locator('tr[data-profile="painter"]').waitFor();
  await goTo(page, 'Image test');
  await page.getByLabel('Image profile').selectOption({ label: 'painter' });
  await page.getByRole('textbox', { name: 'Prompt' }).fill('a lighthouse at dusk');
  await page.getByRole('button', { name: 'Generate' }).click();
  await page.getByText(/^Step \d+ of 10$/).waitFor({ timeout: 30_000 });
  t.pass('progress steps shown');
  await page.getByRole('button', { name: 'Generate' }).click();
  const refusal = page.getByTestId('image-refusal');
  await refusal.waitFor();
  t.match(await refusal.textContent(), /409 image_busy/, 'the busy reservation is a 409 shown at once');
  const picture = page.locator('img.result');
  await picture.waitFor({ timeout: 60_000 });
  const size = await picture.evaluate((img) => `${(img as unknown as { naturalWidth: number }).naturalWidth}x${(img as unknown as { naturalHeight: number }).naturalHeight}`);
  t.equal(size, '64x72', "the picture in the profile's resolution");
  t.match(await page.locator('.facts').textContent(), /Metadata removed.*tEXt/, 'the stripped chunks are named');
  await shot(page, 'image-test');

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel('Operator password').waitFor();
  const after = await w.context.request.get('/api/v1/endpoint', { headers: { 'X-Service-Deck': '1' } });
  t.equal(after.status(), 401, 'logged out: the cookie is no longer a session');

  const expected = [/status of 409/];
  const unexpected = w.problems.filter((p) => !expected.some((e) => e.test(p)));
  t.same(unexpected, [], 'the browser console shows no error');
  t.equal(w.problems.length - unexpected.length, 1, 'exactly the one expected 409 was logged by the browser');
  t.same(w.foreign, [], 'no request left the service origin');
  t.ok(w.requests.every((r) => r === 'GET /' || r.startsWith('GET /assets/') || r.includes(' /api/v1/')), 'the page used only its assets and the admin API');
});

t.test('the console on a narrow window, by keyboard', async (t) => {
  const { origin } = await startServe(t);
  const browser = await launch(t);
  const w = await openPage(browser, origin, { width: 390, height: 844 });
  const { page } = w;
  await page.goto('/');
  await page.getByLabel('Operator password').waitFor();
  await page.keyboard.press('Tab');
  t.equal(await page.evaluate('document.activeElement?.id'), 'password', 'the first Tab lands on the password');
  await page.keyboard.type(PASSWORD);
  await page.keyboard.press('Enter');
  await page.getByRole('navigation', { name: 'Console pages' }).waitFor();
  await page.locator('.live.live').waitFor();
  await page.getByRole('heading', { name: 'Needs attention' }).waitFor();
  const overflow = (await page.evaluate('document.documentElement.scrollWidth - window.innerWidth')) as number;
  t.ok(overflow <= 1, `no sideways scrolling on a 390 px window (${overflow} px too wide)`);
  t.same(await unlabelledControls(page), [], 'every control has a label');
  t.same(w.problems, [], 'no browser error');
  t.same(w.foreign, [], 'no request left the origin');
});
