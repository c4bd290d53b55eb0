// The `build(t)` helper: a real service on loopback with a private state directory, a captured
// log, a logged-in admin session and a bearer token; everything closes when the test ends.
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Test } from 'tap';
import { loadConfig, type Config } from '../../src/config.js';
import { createLogger } from '../../src/system/observe/log.js';
import { LogTail } from '../../src/system/observe/logTail.js';
import { startService, type Service, type StartOptions } from '../../src/compose.js';
import type { ChatLimits } from '../../src/workers/chat/chatRequest.js';

export const PASSWORD = 'correct horse battery';
export const TOKEN = 'sd-test-token-0123456789abcdefghijklmnop';

/** Where freePort looks first: ports from here up to the kernel's ephemeral range. */
const FIRST_PORT = 20_000;

/**
 * The lowest port the kernel hands out on its own (for listen(0) and for every outgoing
 * connection's source port), from /proc; 32768, Linux's default, when it cannot be read.
 */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 1024 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Whether a listener can open on `port` of 127.0.0.1 now (it is closed again at once). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** Ports this process handed out already: never twice. */
const handedOut = new Set<number>();

/**
 * A port free on 127.0.0.1 for a listener the test starts next. It is taken below the kernel's
 * ephemeral range, at random: there the kernel never gives it to anyone else between this check
 * and the listen (an ephemeral port can go to any outgoing connection of a parallel test in that
 * moment, which once made a restart test fail with EADDRINUSE). Only when nothing there is free
 * does the kernel choose one.
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let attempt = 0; attempt < 50 && low - FIRST_PORT > 1_000; attempt += 1) {
    const port = FIRST_PORT + randomInt(low - FIRST_PORT);
    if (handedOut.has(port) || !(await bindable(port))) continue;
    handedOut.add(port);
    return port;
  }
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/**
 * How a request ended when it was expected to fail on the network: the code of its error
 * (`ECONNREFUSED` when no listener is open, `UND_ERR_SOCKET` when the server closed the
 * connection, `AbortError` when the client aborted), or `answered <status>` when it got an answer.
 * A test compares it with the one outcome it expects.
 */
export async function failureOf(request: Promise<Response>): Promise<string> {
  try {
    return `answered ${(await request).status}`;
  } catch (error) {
    if (error instanceof Error && error.name === 'AbortError') return 'AbortError';
    const code = (error as { cause?: { code?: unknown } }).cause?.code ?? (error as { code?: unknown }).code;
    return typeof code === 'string' ? code : String(error);
  }
}

export async function tempDir(t: Test, prefix = 'sd-test-'): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export interface Built {
  service: Service;
  config: Config;
  stateDir: string;
  logLines: string[];
  /** Requests against the admin listener with `X-Service-Deck: 1`, the session cookie and CSRF token. */
  admin(method: string, url: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  /** Requests against the inference listener with the bearer token. */
  api(method: string, url: string, body?: unknown, headers?: Record<string, string>): Promise<Response>;
  adminUrl: string;
  apiUrl(): string;
  login(): Promise<void>;
  /** The admin session's cookie (`name=value`) and CSRF token, for the tests that look for them. */
  session(): { cookie: string; csrf: string };
  startEndpoint(): Promise<void>;
}

export interface BuildOptions {
  env?: NodeJS.ProcessEnv;
  stateDir?: string;
  login?: boolean;
  /** Shorter chat worker limits for the tests of those limits. */
  chatLimits?: ChatLimits;
  /** How soon a failed warm preload is tried again (spec 3.6). */
  audioRetryMs?: number;
  /** How long one image may take, and the grace before SIGKILL. */
  imageLimits?: { loadTimeLimitMs?: number; terminationGraceMs?: number };
  /** The prompt enhancer's grace before SIGKILL, and how long its process may outlive SIGKILL before it is lost. */
  enhancerLimits?: StartOptions['enhancerLimits'];
  /** Shorter coalescing and keep-alive for the console's events stream. */
  consoleTiming?: StartOptions['consoleTiming'];
}

export async function build(t: Test, options: BuildOptions = {}): Promise<Built> {
  const stateDir = options.stateDir ?? (await tempDir(t));
  const logLines: string[] = [];
  const tail = new LogTail();
  const log = createLogger({ level: 'debug', destination: { write: (line: string) => void logLines.push(line) }, tail });
  const apiPort = await freePort();
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
    SERVICE_DECK_API_TOKEN: TOKEN,
    SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache'),
    ...options.env,
  };
  const config = loadConfig({ stateDir }, env);
  const { service } = await startService(config, {
    log,
    tail,
    adminPort: 0,
    ...(options.chatLimits ? { chatLimits: options.chatLimits } : {}),
    ...(options.audioRetryMs === undefined ? {} : { audioRetryMs: options.audioRetryMs }),
    ...(options.imageLimits ? { imageLimits: options.imageLimits } : {}),
    ...(options.enhancerLimits ? { enhancerLimits: options.enhancerLimits } : {}),
    ...(options.consoleTiming ? { consoleTiming: options.consoleTiming } : {}),
  });
  t.teardown(() => service.shutdown());
  const adminUrl = `http://127.0.0.1:${service.adminAddress()?.port}`;
  let cookie = '';
  let csrf = '';

  const request = async (base: string, method: string, url: string, body: unknown, headers: Record<string, string>) => {
    const init: RequestInit = { method, headers: { ...headers } };
    if (body !== undefined) {
      (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
      init.body = typeof body === 'string' || body instanceof Uint8Array ? (body as string) : JSON.stringify(body);
    }
    return fetch(`${base}${url}`, init).catch((error: unknown) => {
      // A connection that failed (refused, reset) says which request it was and what the service
      // logged just before, the cause kept for failureOf(); an abort stays as it is.
      if (!(error instanceof TypeError) || error.cause === undefined) throw error;
      const cause = error.cause as { code?: string; message?: string };
      const recent = logLines.slice(-6).map((line) => `  ${line.trim().slice(0, 400)}`);
      throw new Error(`${method} ${url}: ${cause.code ?? cause.message ?? error.message}; the service's last log lines:\n${recent.join('\n')}`, { cause });
    });
  };

  const built: Built = {
    service,
    config,
    stateDir,
    logLines,
    adminUrl,
    apiUrl: () => `http://127.0.0.1:${service.inferenceAddress()?.port ?? apiPort}`,
    admin: (method, url, body, headers = {}) =>
      request(adminUrl, method, url, body, {
        'x-service-deck': '1',
        ...(cookie ? { cookie } : {}),
        ...(csrf ? { 'x-csrf-token': csrf } : {}),
        ...headers,
      }),
    api: (method, url, body, headers = {}) =>
      request(built.apiUrl(), method, url, body, { authorization: `Bearer ${TOKEN}`, ...headers }),
    async login() {
      const response = await request(adminUrl, 'POST', '/api/v1/session', { password: PASSWORD }, { 'x-service-deck': '1' });
      if (response.status !== 200) throw new Error(`login failed: ${response.status} ${await response.text()}`);
      cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
      csrf = ((await response.json()) as { csrfToken: string }).csrfToken;
    },
    session: () => ({ cookie, csrf }),
    async startEndpoint() {
      let response = await built.admin('POST', '/api/v1/endpoint/config', { port: apiPort });
      if (response.status !== 200) throw new Error(`config failed: ${response.status} ${await response.text()}`);
      response = await built.admin('POST', '/api/v1/endpoint/start', {});
      if (response.status !== 200) throw new Error(`start failed: ${response.status} ${await response.text()}`);
    },
  };
  if (options.login !== false) await built.login();
  return built;
}

/**
 * The service on `llamaServer` with the endpoint started and one chat profile `name` created and
 * published (`params` beside the model); `responses` also turns the Responses API on.
 */
export async function servedChat(
  t: Test,
  options: { llamaServer: string; name: string; params: Record<string, unknown>; env?: Record<string, string>; responses?: boolean },
): Promise<Built> {
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: options.llamaServer, SERVICE_DECK_GPUS: 'none', ...options.env } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: options.name, category: 'chat', params: options.params });
  t.equal(created.status, 201, `profile ${options.name} created`);
  const { id } = (await created.json()) as { id: string };
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, `profile ${options.name} published`);
  if (options.responses) t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'the Responses API turned on');
  return b;
}
