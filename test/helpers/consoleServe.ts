// The real `service-deck serve` for the console's browser tests, and the page steps they share:
// log in, go to a page by its navigation link.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import type { Test } from 'tap';
import { PASSWORD, TOKEN, freePort, tempDir } from './build.js';
import { llamaServerPath } from './llama.js';
import { spawnCli } from './spawn.js';

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
