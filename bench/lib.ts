// What the benchmarks share: the repository's root, percentiles of a sample, waiting on a state,
// stopping a child process, and the built service started as an operator starts it.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { access } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../test/helpers/build.js';

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

/** Resolves with the first value `probe` gives within `limitMs` (a probe that throws counts as none), polling every 100 ms. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, limitMs: number): Promise<T> {
  const end = Date.now() + limitMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The built service running as its own process, its endpoint started, and the operator logged in. */
export interface Served {
  child: ChildProcess;
  pid: number;
  adminUrl: string;
  apiPort: number;
  /** One admin API call with the session; anything but 200 or 201 throws. */
  admin: (method: string, url: string, body?: unknown) => Promise<Response>;
  /** Creates a profile and publishes it. */
  publish: (profile: Record<string, unknown>) => Promise<void>;
}

/**
 * `service-deck serve` over dist/ (as an operator runs it, so that its resident memory and open
 * descriptors are its own) with `stateDir`, the admin `password` and `env` beside PATH and HOME;
 * its endpoint started on `ports.apiPort` (else a free port), its admin listener on `ports.uiPort`
 * (else a free port). `bench` names the benchmark in the message that asks for a build first (the
 * run exits 2 then). `onChild` gets the process as soon as it is spawned, so that the caller can
 * stop it whatever happens next.
 */
export async function serveBuilt(
  bench: string,
  stateDir: string,
  password: string,
  env: NodeJS.ProcessEnv,
  onChild: (child: ChildProcess) => void,
  ports: { uiPort?: number; apiPort?: number } = {},
): Promise<Served> {
  await access(path.join(ROOT, 'dist', 'src', 'cli.js')).catch(() => {
    console.error(`${bench} runs the built service: npm run build first`);
    process.exit(2);
  });
  const uiPort = ports.uiPort ?? (await freePort());
  const apiPort = ports.apiPort ?? (await freePort());
  const child = spawn(process.execPath, [path.join(ROOT, 'bin', 'service-deck.js'), 'serve', '--state-dir', stateDir, '--ui-port', String(uiPort)], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_ADMIN_PASSWORD: password, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  onChild(child);
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
  const publish = async (profile: Record<string, unknown>) => {
    const created = await admin('POST', '/api/v1/profiles', profile);
    await admin('POST', '/api/v1/endpoint/profile', { id: ((await created.json()) as { id: string }).id, enabled: true });
  };
  return { child, pid: child.pid!, adminUrl, apiPort, admin, publish };
}

/**
 * The built service with `env` (beside PATH, HOME, BENCH_PASSWORD and BENCH_TOKEN), its state and
 * cache in `dir`, logged in, its inference listener on `apiPort`. Its stderr goes to this process's.
 */
export async function serveBench(dir: string, { uiPort, apiPort, env }: { uiPort: number; apiPort: number; env: NodeJS.ProcessEnv }): Promise<Served> {
  const benchEnv = { SERVICE_DECK_API_TOKEN: BENCH_TOKEN, SERVICE_DECK_CACHE_DIR: path.join(dir, 'cache'), ...env };
  return serveBuilt('the benchmark', path.join(dir, 'state'), BENCH_PASSWORD, benchEnv, () => undefined, { uiPort, apiPort });
}

/** What serveBench gives: the served service. */
export type BenchService = Served;
