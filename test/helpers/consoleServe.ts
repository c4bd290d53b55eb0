// The real `service-deck serve` for the console's browser tests, and the page steps they share:
// log in, go to a page by its navigation link, a second operator session outside the browser,
// the texts an element showed, a screenshot for the docs (SERVICE_DECK_SCREENSHOTS).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import type { Test } from 'tap';
import { PASSWORD, TOKEN, freePort, tempDir } from './build.js';
import { llamaServerPath } from './llama.js';
import { spawnCli } from './spawn.js';

const SHOTS = process.env.SERVICE_DECK_SCREENSHOTS;

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));

export async function startServe(t: Test, env: NodeJS.ProcessEnv = {}) {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: false, port: apiPort, published: [] }), { mode: 0o600 });
  const served = spawnCli(t, ['serve', '--ui-port', String(uiPort)], {
    SERVICE_DECK_STATE_DIR: stateDir,
    SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
    SERVICE_DECK_API_TOKEN: TOKEN,
    SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(),
    SERVICE_DECK_SD_CLI: SD_CLI,
    SERVICE_DECK_GPUS: 'none',
    SERVICE_DECK_DRAIN_LIMIT_MS: '1000',
    ...env,
  });
  const [, origin] = await served.waitFor(/operator console on (http:\/\/[^/\s]+)\//, 60_000);
  t.teardown(async () => {
    if (served.child.exitCode === null) {
      served.child.kill('SIGTERM');
      await served.exited;
    }
  });
  return { stateDir, origin: origin!, apiPort, served };
}

export async function login(page: Page, password = PASSWORD): Promise<void> {
  await page.goto('/');
  await page.getByLabel('Operator password').fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('navigation', { name: 'Console pages' }).waitFor();
  await page.locator('.live.live').waitFor();
}

export async function goTo(page: Page, title: string): Promise<void> {
  await page.getByRole('navigation', { name: 'Console pages' }).getByRole('link', { name: title, exact: true }).click();
  await page.getByRole('heading', { level: 1, name: title }).waitFor();
}

/** Inputs, selects and text areas on the page without a label (their outer HTML, cut short). */
export async function unlabelledControls(page: Page): Promise<string[]> {
  // Page scripts as text: the tests' type check has no DOM library.
  return (await page.evaluate(
    "[...document.querySelectorAll('input, select, textarea')].filter((el) => !el.labels?.length && !el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby')).map((el) => el.outerHTML.slice(0, 80))",
  )) as string[];
}

/** A second operator session, outside the browser (what "someone else" does meanwhile, or a test's set-up). */
export async function otherSession(origin: string) {
  const response = await fetch(`${origin}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0]!;
  const { csrfToken } = (await response.json()) as { csrfToken: string };
  return (method: string, path: string, body?: unknown) =>
    fetch(`${origin}${path}`, {
      method,
      headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
}

/** With SERVICE_DECK_SCREENSHOTS=docs/screenshots, the page as it is now, as `<name>.png` there. */
export async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  await mkdir(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: false });
}

/** Every text the element showed, recorded in the page as it changed (a MutationObserver). */
export async function recordTexts(page: Page, selector: string): Promise<() => Promise<string[]>> {
  // Page scripts as text: the tests' type check has no DOM library.
  await page.evaluate(`(() => {
    const seen = [];
    window.__seen = seen;
    const note = () => {
      const text = document.querySelector(${JSON.stringify(selector)})?.textContent ?? '';
      if (text && seen[seen.length - 1] !== text) seen.push(text);
    };
    new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
  })()`);
  return () => page.evaluate('window.__seen') as Promise<string[]>;
}
