// What the benchmarks share: the repository's root, percentiles of a sample, stopping a child
// process, and the built service started as an operator starts it.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The repository's root: the first folder up from this file with a package.json. The benchmarks
 * run as built (`npm run bench:*` compiles them with tsconfig.bench.json into dist/bench, next to
 * the service's own dist/src), or from source under tsx (bench/).
 */
export const ROOT = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('bench: no package.json above the benchmark');
    dir = up;
  }
  return dir;
})();

/** The p-th percentile (0–100) of `values`, nearest rank; NaN for none. */
export const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has ended. */
export async function stop(child: ChildProcess, graceMs = 3000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const ended = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await ended;
  clearTimeout(timer);
}

/** The operator's password and the API token of the service serveBench starts. */
export const BENCH_PASSWORD = 'bench password 0123';
export const BENCH_TOKEN = 'sd-bench-token-0123456789abcdefghijklmnop';

/** The service as an operator runs it (bin/service-deck.js over dist/), its admin session and its inference listener started. */
export interface BenchService {
  child: ChildProcess;
  adminUrl: string;
  apiPort: number;
  /** An admin call with the session; anything but 200 or 201 throws. */
  admin(method: string, url: string, body?: unknown): Promise<Response>;
}

/** Resolves with the first value `probe` gives within `limitMs` (a probe that throws counts as none). */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, limitMs: number): Promise<T> {
  const end = Date.now() + limitMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Starts the built service with `env` (beside PATH, HOME, BENCH_PASSWORD and BENCH_TOKEN) in `dir`,
 * logs in, and starts its inference listener on `apiPort`. Its stderr goes to this process's.
 */
export async function serveBench(dir: string, { uiPort, apiPort, env }: { uiPort: number; apiPort: number; env: NodeJS.ProcessEnv }): Promise<BenchService> {
  const password = BENCH_PASSWORD;
  if (!existsSync(path.join(ROOT, 'dist', 'src', 'cli.js'))) {
    console.error('the benchmark runs the built service: npm run build first');
    process.exit(2);
  }
  const child = spawn(process.execPath, [path.join(ROOT, 'bin', 'service-deck.js'), 'serve', '--state-dir', path.join(dir, 'state'), '--ui-port', String(uiPort)], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_ADMIN_PASSWORD: password, SERVICE_DECK_API_TOKEN: BENCH_TOKEN, SERVICE_DECK_CACHE_DIR: path.join(dir, 'cache'), ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  let cookie = '';
  let csrf = '';
  const admin = async (method: string, url: string, body?: unknown) => {
    const response = await fetch(`${adminUrl}${url}`, {
      method,
      headers: { 'x-service-deck': '1', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(cookie ? { cookie, 'x-csrf-token': csrf } : {}) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (response.status !== 200 && response.status !== 201) throw new Error(`${url}: ${response.status} ${await response.text()}`);
    return response;
  };
  const session = await until('the admin listener', () => admin('POST', '/api/v1/session', { password }), 30_000);
  cookie = (session.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  csrf = ((await session.json()) as { csrfToken: string }).csrfToken;
  await admin('POST', '/api/v1/endpoint/config', { port: apiPort });
  await admin('POST', '/api/v1/endpoint/start', {});
  return { child, adminUrl, apiPort, admin };
}
