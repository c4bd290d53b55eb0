// Debian's chromium driven by playwright-core (no browser download): the console tests' browser.
// Each page records what a demanding reviewer checks at the end: every console message of level
// error, every uncaught page error, and every request that left the service's origin.
import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import type { Test } from 'tap';

export const CHROMIUM = process.env.SERVICE_DECK_CHROMIUM ?? '/usr/bin/chromium';

export interface Watched {
  page: Page;
  context: BrowserContext;
  /** Console errors and uncaught exceptions, in order. */
  problems: string[];
  /** Every request the page made that did not go to `origin` (data: and blob: URLs are local). */
  foreign: string[];
  /** Every request the page made, as `METHOD path`. */
  requests: string[];
}

export async function launch(t: Test): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: the console tests need Debian's chromium (run the tests as root, or: apt-get install chromium)`);
  }
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // No background traffic: the page's own requests are the only ones (this machine has no internet).
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  t.teardown(() => browser.close());
  return browser;
}

export async function openPage(browser: Browser, origin: string, viewport = { width: 1280, height: 800 }): Promise<Watched> {
  const context = await browser.newContext({ viewport, baseURL: origin });
  const page = await context.newPage();
  const watched: Watched = { page, context, problems: [], foreign: [], requests: [] };
  page.on('console', (message) => {
    if (message.type() === 'error') watched.problems.push(`console: ${message.text()}`);
  });
  page.on('pageerror', (error) => watched.problems.push(`page error: ${error.message}`));
  page.on('request', (request) => {
    const url = request.url();
    if (url.startsWith('data:') || url.startsWith('blob:')) return;
    const parsed = new URL(url);
    if (parsed.origin !== origin) watched.foreign.push(url);
    else watched.requests.push(`${request.method()} ${parsed.pathname}`);
  });
  return watched;
}
