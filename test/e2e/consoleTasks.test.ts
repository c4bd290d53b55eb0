// The rest of the operator's tasks in the console, in chromium against the real serve: every page
// and form labelled; a profile edited while someone else saved it (the conflict with the newer
// values, then taking them), its prompt-enhancer choice kept, then deleted; no port change while
// running (the button disabled, saying why); the log page in columns, with its level filter; the token rotated (shown once, the
// new one works, the old one not); the password changed (this page stays in, other sessions end).
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { PASSWORD, TOKEN } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, otherSession, startServe, unlabelledControls } from '../helpers/consoleServe.js';
import { tinyModelIn } from '../helpers/llama.js';
import { tempDir } from '../helpers/build.js';
import { startHub } from '../helpers/hub.js';

const NEW_PASSWORD = 'a brand new passphrase';

t.test('the other admin tasks in chromium', async (t) => {
  // A local hub laid out like huggingface.co, for the enhancer install.
  const hub = await startHub(t);
  hub.put('test-org/tiny-enhancer', 'main', 'tiny.gguf', Buffer.alloc(1024 * 1024, 3));
  hub.options.chunkBytes = 16 * 1024;
  hub.options.chunkDelayMs = 25;
  const recipes = path.join(await tempDir(t), 'recipes.json');
  const recipe = { repo: 'test-org/tiny-enhancer', revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }], context: 2048 };
  await writeFile(recipes, JSON.stringify({ t2i: recipe, i2i: recipe }));
  const { origin, apiPort } = await startServe(t, { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes });
  const model = await tinyModelIn(await tempDir(t));
  const browser = await launch(t);
  const w = await openPage(browser, origin);
  const { page } = w;
  page.on('dialog', (dialog) => void dialog.accept());
  await login(page);
  const other = await otherSession(origin);

  // Every page, and the profile form of every category, has a label on every control.
  for (const title of ['Overview', 'Profiles', 'Models', 'Requests', 'Chat test', 'Image test', 'Enhancers', 'Audio', 'State charts', 'Logs', 'Settings']) {
    await goTo(page, title);
    t.same(await unlabelledControls(page), [], `${title}: every control is labelled`);
  }
  await goTo(page, 'Profiles');
  await page.getByRole('button', { name: 'New profile' }).click();
  const form = page.getByRole('form', { name: 'New profile' });
  for (const category of ['chat', 'image', 'tts', 'stt']) {
    await form.getByLabel('Category').selectOption(category);
    t.same(await unlabelledControls(page), [], `the ${category} form: every control is labelled`);
  }

  // Create, then edit while someone else saves: the conflict shows their values; take them.
  await form.getByLabel('Category').selectOption('chat');
  await form.getByLabel("Name (the API's model name)").fill('edited');
  await form.getByLabel('model', { exact: true }).fill(model);
  await form.getByRole('button', { name: 'Create' }).click();
  const row = page.locator('tr[data-profile="edited"]');
  await row.waitFor();
  const id = (await (await other('GET', '/api/v1/profiles')).json()) as { profiles: Array<{ id: string; name: string }> };
  const profileId = id.profiles.find((p) => p.name === 'edited')!.id;
  await page.getByRole('button', { name: 'Edit edited' }).click();
  const edit = page.getByRole('form', { name: 'Edit profile edited' });
  await edit.getByLabel('context').fill('3072');
  const saved = await other('PUT', `/api/v1/profiles/${profileId}`, {
    revision: 1,
    name: 'edited',
    category: 'chat',
    params: { model, context: 4096 },
    prompt_enhancer: { t2i: null, i2i: null, device: 'auto' },
  });
  t.equal(saved.status, 200, 'someone else saved revision 2');
  await edit.getByRole('button', { name: 'Save' }).click();
  const conflict = edit.locator('.conflict');
  await conflict.waitFor();
  t.match(await conflict.textContent(), /Someone saved revision 2 while you edited revision 1/);
  t.match(await conflict.textContent(), /"context": 4096/, 'their values are shown');
  await conflict.getByRole('button', { name: 'Take theirs' }).click();
  t.equal(await edit.getByLabel('context').inputValue(), '4096', 'the form now holds their values');
  await edit.getByLabel('slots').fill('2');
  await edit.getByRole('button', { name: 'Save' }).click();
  await row.getByText('3', { exact: true }).waitFor();
  const after = (await (await other('GET', `/api/v1/profiles/${profileId}`)).json()) as { revision: number; params: { context: number; slots: number }; prompt_enhancer?: unknown };
  t.same([after.revision, after.params.context, after.params.slots], [3, 4096, 2], 'revision 3 with their context and my slots');
  t.same(after.prompt_enhancer, { t2i: null, i2i: null, device: 'auto' }, 'the prompt-enhancer choice the form does not show is kept');
  await page.getByRole('button', { name: 'Delete edited' }).click();
  await row.waitFor({ state: 'detached' });
  t.equal((await other('GET', `/api/v1/profiles/${profileId}`)).status, 404, 'deleted');

  // Enhancers: an image profile switched to t2i carries the blocker; installing clears it.
  const image = (await (await other('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model } })).json()) as { id: string };
  await goTo(page, 'Enhancers');
  const switchRow = page.locator('tr[data-profile="painter"]');
  await switchRow.getByRole('checkbox', { name: /t2i/ }).check();
  await switchRow.getByText('prompt enhancer not installed: test-org/tiny-enhancer (t2i)').waitFor();
  t.pass('switched on, the profile names the missing enhancer');
  const t2i = page.locator('#enhancer-t2i');
  await t2i.getByRole('button', { name: 'Install' }).click();
  const bar = t2i.getByRole('progressbar');
  await bar.waitFor();
  // The bar as the event stream moves it: some value between nothing and all of it.
  const seen = new Set<number>();
  const deadline = Date.now() + 30_000;
  while (!(await t2i.getByText('installed', { exact: true }).isVisible())) {
    if (Date.now() > deadline) throw new Error(`the install did not end in 30 s (progress seen: ${[...seen].join(', ')})`);
    const value = Number((await bar.getAttribute('value').catch(() => null)) ?? 0);
    seen.add(value);
    await page.waitForTimeout(50);
  }
  const midway = [...seen].filter((n) => n > 0 && n < 1024 * 1024);
  t.ok(midway.length > 0, `progress shown while downloading (${[...seen].sort((a, b) => a - b).join(', ')} of ${1024 * 1024} bytes)`);
  await switchRow.getByRole('cell', { name: '—' }).waitFor();
  const painter = (await (await other('GET', `/api/v1/profiles/${image.id}`)).json()) as { blockers: string[]; prompt_enhancer: { t2i: string | null } };
  t.same([painter.blockers.filter((b) => b.startsWith('prompt enhancer')), painter.prompt_enhancer.t2i], [[], 'test-org/tiny-enhancer'], 'installed: no enhancer blocker left');

  // While running, the port cannot be changed: the button is disabled and says why (consoleWorkers.test.ts looks closer).
  await goTo(page, 'Overview');
  await page.getByRole('button', { name: 'Start' }).click();
  await page.locator('.endpoint.running').waitFor();
  await page.waitForFunction("document.querySelector('#listener button[type=submit]').disabled");
  t.match(await page.getByRole('button', { name: 'Change port' }).getAttribute('title'), /only while the listener is stopped/, 'Change port is disabled while running, and says why');

  // The log page: lines as they come, in columns, and the level filter.
  await goTo(page, 'Logs');
  const rows = page.locator('table.log tbody tr');
  await rows.first().waitFor();
  const infoLines = await rows.count();
  t.ok(infoLines > 3, `${infoLines} lines at info and above`);
  t.ok((await page.locator('table.log tbody tr[data-level="info"]').count()) > 0, 'info lines among them');
  t.same(
    await page.locator('table.log thead th').allTextContents(),
    ['Time', 'Level', 'Message', 'Source', 'Profile', 'Job', 'Request', 'Status', 'ms', 'Other fields'],
    'time, level, message and the key fields have columns',
  );
  // An access line, of a request made here: each field in its column, none as JSON.
  t.equal(await page.evaluate(async () => (await fetch('/api/v1/endpoint', { headers: { 'x-service-deck': '1' } })).status), 200);
  const access = rows.filter({ has: page.locator('td[data-column="Request"]', { hasText: 'GET /api/v1/endpoint' }) }).first();
  await access.waitFor();
  const cells = await access.locator('td').allTextContents();
  t.match(cells[0], /^\d{1,2}:\d\d:\d\d/, 'the time (the browser locale says how)');
  t.same(cells.slice(1, 4), ['info', 'access', 'admin'], 'the level, the message and the listener');
  t.same([cells[6], cells[7]], ['GET /api/v1/endpoint', '200'], 'the request and its status');
  t.match(cells[8], /^\d+(\.\d)?$/, 'the milliseconds, rounded');
  t.match(cells[9], /^reqId=\S+/, 'the other fields as key=value');
  t.notOk(cells.some((cell) => cell.includes('{') || cell.includes('"')), 'no raw JSON in any cell');
  await page.getByLabel('Level').selectOption({ label: 'error and above' });
  t.equal(await page.locator('table.log tbody tr[data-level="info"]').count(), 0, 'no info line once the filter says error');

  // The token: rotated, shown once, the new one works on /v1 and the old one no longer does.
  await goTo(page, 'Settings');
  await page.getByRole('button', { name: 'Rotate token' }).click();
  const tokenField = page.getByLabel('New API token (shown once: copy it now)');
  await tokenField.waitFor();
  const token = await tokenField.inputValue();
  t.ok(token.length >= 32, 'a new token is shown');
  const models = (bearer: string) => fetch(`http://127.0.0.1:${apiPort}/v1/models`, { headers: { authorization: `Bearer ${bearer}` } }).then((r) => r.status);
  t.equal(await models(token), 200, 'the new token works');
  t.equal(await models(TOKEN), 401, 'the old one no longer does');
  await goTo(page, 'Overview');
  await goTo(page, 'Settings');
  t.equal(await page.getByLabel('New API token (shown once: copy it now)').count(), 0, 'shown once: gone after leaving the page');

  // The password: this page stays logged in, the other session ends, the new password logs in.
  await page.getByLabel('Current password').fill(PASSWORD);
  await page.getByLabel('New password', { exact: true }).fill(NEW_PASSWORD);
  await page.getByLabel('New password again').fill(NEW_PASSWORD);
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.locator('.notice.info', { hasText: 'Password changed' }).waitFor();
  t.equal((await other('GET', '/api/v1/endpoint')).status, 401, 'the other session ended');
  await goTo(page, 'Overview');
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.locator('.endpoint.stopped').waitFor();
  t.pass('this page still acts: it stopped the endpoint with its fresh session');
  await page.getByRole('button', { name: 'Log out' }).click();
  await login(page, NEW_PASSWORD);
  t.pass('the new password logs in');

  const expected = [/status of 409/];
  t.same(
    w.problems.filter((p) => !expected.some((e) => e.test(p))),
    [],
    'the browser console shows no error but the 409 the test provoked (the stale revision)',
  );
  t.same(w.foreign, [], 'no request left the origin');
});
