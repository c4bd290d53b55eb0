// The console's worker tools and the walk-through's fixes, in chromium against
// the real serve with the stand-in llama-server (mode `slow`: a 3 s stream ending with its usage and
// timings), wrapped to print what a verbose llama-server prints on stderr (a prompt, a key):
// - the enhancer's Install button shows the download's size and the free disk, refuses a download
//   that does not fit, and asks before one that does;
// - "Change port" is disabled while the listener runs, and says why;
// - the Profiles table's cells line up with its header; the State charts' actor list is not clipped;
// - each loaded worker has an Unload button (disabled with the reason while it answers), its stderr
//   lines (redacted), and the Requests page lists each answer live with its measures, no text.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Page } from 'playwright-core';
import t from 'tap';
import { TOKEN, tempDir } from '../helpers/build.js';
import { launch, openPage } from '../helpers/browser.js';
import { goTo, login, otherSession, shot, startServe } from '../helpers/consoleServe.js';
import { startHub } from '../helpers/hub.js';
import { FAKE_LLAMA_SERVER, tinyModelIn } from '../helpers/llama.js';

const PROMPT = 'Describe the purple walrus';

/** The left edge of every cell, per row (header first), of the table `selector` (page script as text: no DOM types here). */
const cellEdges = (page: Page, selector: string) =>
  page.evaluate(
    `[...document.querySelectorAll(${JSON.stringify(`${selector} tr`)})].map((row) => [...row.children].map((cell) => Math.round(cell.getBoundingClientRect().left)))`,
  ) as Promise<number[][]>;
/** The bottom edge of every cell, per row: a row's cells end where the row ends (their borders in one line). */
const cellBottoms = (page: Page, selector: string) =>
  page.evaluate(
    `[...document.querySelectorAll(${JSON.stringify(`${selector} tbody tr`)})].map((row) => [Math.round(row.getBoundingClientRect().bottom), ...[...row.children].map((cell) => Math.round(cell.getBoundingClientRect().bottom))])`,
  ) as Promise<number[][]>;

t.test('the console from the walk-through: install size, port, tables, unload, stderr, recent requests', async (t) => {
  const hub = await startHub(t);
  hub.put('test-org/tiny-enhancer', 'main', 'tiny.gguf', Buffer.alloc(1024 * 1024, 3));
  const dir = await tempDir(t);
  const recipes = path.join(dir, 'recipes.json');
  const recipe = { repo: 'test-org/tiny-enhancer', revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }], context: 2048 };
  await writeFile(recipes, JSON.stringify({ t2i: recipe, i2i: recipe }));
  const printed = path.join(dir, 'stderr.txt');
  await writeFile(printed, ['main: loading model', `srv  update_slots: formatted prompt: ${PROMPT}`, 'main: api key: c2VjcmV0LWtleS10aGF0LW11c3Qtbm90LWJlLXNob3du', 'main: server is listening'].join('\n') + '\n');
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\ncat "${printed}" >&2\nFAKE_LLAMA_MODE=slow exec "${process.execPath}" "${FAKE_LLAMA_SERVER}" "$@"\n`, { mode: 0o755 });
  const { origin, apiPort } = await startServe(t, { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_LLAMA_SERVER: wrapper });
  const model = await tinyModelIn(dir);
  const other = await otherSession(origin);
  const created = (await (await other('POST', '/api/v1/profiles', { name: 'walrus-chat', category: 'chat', params: { model } })).json()) as { id: string };
  await other('POST', '/api/v1/endpoint/profile', { id: created.id, enabled: true });
  await other('POST', '/api/v1/profiles', { name: 'a-second-profile-with-a-long-name', category: 'chat', params: { model } });
  // A profile that cannot run: its blockers make its row taller than its buttons.
  await other('POST', '/api/v1/profiles', { name: 'third', category: 'chat', params: { model: path.join(dir, 'missing.gguf') } });

  const browser = await launch(t);
  const w = await openPage(browser, origin);
  const { page } = w;
  const dialogs: string[] = [];
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    void dialog.accept();
  });
  await login(page);

  // The enhancer: size and free disk on the button; too large is refused with the numbers, no question.
  await goTo(page, 'Enhancers');
  const t2i = page.locator('#enhancer-t2i');
  const install = t2i.getByRole('button', { name: /^Install/ });
  await t2i.getByRole('button', { name: /^Install \(1\.0 MB, [\d.]+ (GB|MB) free\)$/ }).waitFor();
  t.match(await t2i.getByTestId('plan-t2i').textContent(), /^Download: 1\.0 MB; free disk: [\d.]+ (GB|MB)\.$/, 'the size and the free disk beside it');
  hub.options.linkedSize = 10 ** 16;
  await install.click();
  const refusal = page.locator('.notice.error', { hasText: 'Install: not enough free disk space' });
  await refusal.waitFor();
  t.match(await refusal.textContent(), /9313225\.7 GiB to download and 0\.5 GiB to spare\), [\d.]+ GiB free/, 'refused with the numbers');
  t.same(dialogs, [], 'nothing was asked');
  t.equal(await t2i.getByText('not installed', { exact: true }).count(), 1, 'and nothing installs');
  await t2i.getByText(/It does not fit: not enough free disk space/).waitFor();
  hub.options.linkedSize = null;
  await install.click();
  await t2i.getByText('installed', { exact: true }).waitFor();
  t.equal(dialogs.length, 1, 'one question before the download');
  t.match(dialogs[0], /^Download 1\.0 MB from test-org\/tiny-enhancer\?\n\nFree disk: [\d.]+ (GB|MB), [\d.]+ (GB|MB) left afterwards\.$/, 'it states the size and the free disk');
  await shot(page, 'enhancer-install');

  // The port: changeable while stopped; while running the button is disabled and says why.
  await goTo(page, 'Overview');
  const change = page.getByRole('button', { name: 'Change port' });
  t.equal(await change.isDisabled(), false, 'Change port works while stopped');
  await page.getByRole('button', { name: 'Start' }).click();
  await page.locator('.endpoint.running').waitFor();
  await page.waitForFunction("document.querySelector('#listener button[type=submit]').disabled");
  t.match(await change.getAttribute('title'), /only while the listener is stopped/, 'its title says why');
  t.match(await page.locator('#port-why').textContent(), /changes only while the listener is stopped .* stop it first/, 'and so does the text beside it');

  // A stream on the API: while it runs, the worker's Unload is disabled and says why.
  const streaming = await fetch(`http://127.0.0.1:${apiPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'walrus-chat', messages: [{ role: 'user', content: PROMPT }], stream: true }),
  });
  t.equal(streaming.status, 200);
  const reader = streaming.body!.getReader();
  await reader.read();
  const unload = page.getByRole('button', { name: 'Unload the chat worker' });
  // The page's status says loaded with one active job (an earlier one may still say loading).
  await page.locator('tr[data-worker="chat"]', { hasText: /loaded.*1 active of 1 slots/ }).waitFor();
  t.equal(await unload.isDisabled(), true, 'Unload is disabled while the worker answers');
  t.match(await unload.getAttribute('title'), /Refused while it answers a request \(spec 3\.2\)/);
  while (!(await reader.read()).done) {
    // the rest of the answer
  }

  // Its stderr: the lines it wrote, the prompt withheld and the key redacted.
  await page.getByRole('button', { name: 'stderr of the chat worker' }).click();
  const stderr = page.getByRole('list', { name: 'stderr of the chat worker' });
  await stderr.getByText('main: server is listening').waitFor();
  const shown = await stderr.textContent();
  t.match(shown, /main: loading model.*\[line withheld: it may quote a prompt or an answer\].*main: api key: \[redacted\]/s);
  t.notMatch(shown, /walrus|c2VjcmV0/, 'no prompt, no key');
  await shot(page, 'worker-stderr');

  // Idle again: Unload asks, then the worker goes.
  await page.locator('tr[data-worker="chat"]').getByText('0 active of 1 slots').waitFor();
  await unload.click();
  await page.locator('.notice.info', { hasText: 'The chat worker is unloaded.' }).waitFor();
  t.match(dialogs.at(-1), /^Unload the chat worker\?/, 'it asked first');
  await page.locator('tr[data-worker="chat"]').waitFor({ state: 'detached' });
  t.pass('the chat worker is gone from the overview');

  // The recent requests, live: a new answer appears without a reload, with its measures and no text.
  await goTo(page, 'Requests');
  const rows = page.locator('#recent-requests tbody tr');
  await rows.first().waitFor();
  t.equal(await rows.count(), 1, 'the stream from before');
  const again = await fetch(`http://127.0.0.1:${apiPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'walrus-chat', messages: [{ role: 'user', content: PROMPT }], stream: true }),
  });
  await again.text();
  await rows.nth(1).waitFor();
  const newest = await rows.first().textContent();
  t.match(newest, /POST \/v1\/chat\/completions stream.*walrus-chat.*200/, 'route, profile and status');
  t.match(newest, /5 → 30.*10\.0\/s$/, 'tokens in and out, and the tokens per second');
  const cells = await rows.first().locator('td').allTextContents();
  t.match(cells[5], /^\d+ ms$|^[\d.]+ s$/, `its queue wait (${cells[5]})`);
  t.match(cells[6], /^\d+ ms$|^[\d.]+ s$/, `its time to first token (${cells[6]})`);
  t.notMatch(await page.locator('#recent-requests').textContent(), /Describe|purple/, 'no prompt on the page');
  await shot(page, 'recent-requests');

  // Profiles: every row's cells start where the header's do, and end where their row ends.
  await goTo(page, 'Profiles');
  await page.locator('tr[data-profile="third"]').waitFor();
  const edges = await cellEdges(page, '#profiles-list table');
  t.equal(edges.length, 4, 'the header and three rows');
  for (const [i, row] of edges.entries()) t.same(row, edges[0], `row ${i}: its cells line up with the header`);
  for (const row of await cellBottoms(page, '#profiles-list table')) t.ok(row.every((bottom) => bottom === row[0]), `every cell ends with its row (${row.join(', ')})`);
  await shot(page, 'profiles');

  // State charts: the actor list shows every actor, cut neither by its own box nor by the window,
  // beside the tallest chart (the supervisor) and beside a short one (the queue), the page at its end.
  await goTo(page, 'State charts');
  const list = page.getByRole('navigation', { name: 'Running actors' });
  const buttons = list.getByRole('button');
  await buttons.first().waitFor();
  const count = await buttons.count();
  t.ok(count >= 9, `${count} actors listed`);
  const own = (await page.evaluate("(() => { const n = document.querySelector('.charts-actors'); return [n.scrollHeight, n.clientHeight]; })()")) as [number, number];
  t.ok(own[0] <= own[1] + 1, `the list is not cut by its own box (content ${own[0]} px, box ${own[1]} px)`);
  await list.getByRole('button', { name: /^queue/ }).click();
  await page.evaluate('window.scrollTo(0, document.documentElement.scrollHeight)');
  const viewport = page.viewportSize()!;
  for (const i of [0, count - 1]) {
    const button = buttons.nth(i);
    await button.scrollIntoViewIfNeeded();
    const box = (await button.boundingBox())!;
    t.ok(box.y >= 0 && box.y + box.height <= viewport.height, `actor ${i + 1} of ${count} can be brought whole into the window (${Math.round(box.y)}..${Math.round(box.y + box.height)} of ${viewport.height})`);
  }
  const clipped = (await page.evaluate(
    "[...document.querySelectorAll('.charts-actors, .charts-actors *')].filter((el) => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible').map((el) => el.className || el.tagName)",
  )) as string[];
  t.same(clipped, [], 'nothing in the list is cut sideways');
  await shot(page, 'state-charts');

  t.same(w.problems, [], 'the browser console shows no error');
  t.same(w.foreign, [], 'no request left the origin');
});
