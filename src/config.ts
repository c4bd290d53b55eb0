// Configuration from the command line and the environment (CONTRACT section 1). Everything the
// service reads from `process.env` is read here, once, so the rest takes a plain object.
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
// The types file, not the machine's index: the CLI reads this module for every command, xstate for none.
import { SWITCH_MAX_WAIT_CAP_MS } from '../machines/supervisor/supervisor.types.js';

export type InspectMode = 'off' | 'log' | 'stately';

export interface PortRange {
  first: number;
  last: number;
}

/**
 * Where the inference port range in force comes from, strongest first: `serve --api-ports` (this run
 * only), the range that `service-deck update --api-ports` saved in `endpoint.json`,
 * `SERVICE_DECK_API_PORTS` (the container image's default), else the native 1024-65535.
 */
export type PortRangeSource = 'option' | 'saved' | 'env' | 'native';

/**
 * What both listeners accept of a connection (src/app.ts): how long a client may take to send a
 * request, how many connections may be open, which Host names are served, whether a proxy in
 * front says that the client came over TLS.
 */
export interface HttpConfig {
  /** The whole request, headers and body (Node's requestTimeout); an answer may take as long as it needs. */
  requestTimeoutMs: number;
  /** The request line and headers (Node's headersTimeout), also of a connection that sends nothing. */
  headersTimeoutMs: number;
  /** How long an idle keep-alive connection stays open between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections per listener; at the cap a waiting one makes room, else a further one is answered 503 with Retry-After and closed (src/routes/connections.ts). */
  maxConnections: number;
  /**
   * The share of the cap that waiting connections (for a request head, between requests, for the
   * body of a request that proved no credential) may hold: at the cap, past it, the oldest makes
   * room for a new one at once. At most half the cap.
   */
  maxPendingConnections: number;
  /** A connection that sends no byte within this is closed (the headers limit applies once a request has begun). */
  firstByteTimeoutMs: number;
  /** Host names served beside the loopback names and the address a connection arrived at (lower case, no port). */
  allowedHosts: string[];
  /** Trust `X-Forwarded-Proto: https` from a TLS proxy in front (the session cookies become Secure). */
  trustProxy: boolean;
}

export const DEFAULT_HTTP: HttpConfig = {
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 2048,
  maxPendingConnections: 128,
  firstByteTimeoutMs: 2_000,
  allowedHosts: [],
  trustProxy: false,
};

export interface Config {
  stateDir: string;
  cacheDir: string;
  uiHost: string;
  uiPort: number;
  /** Ports the inference listener may use (native 1024-65535; a container installation narrows it). */
  apiPorts: PortRange;
  /** Where `apiPorts` comes from; `saved` only once the service has read `endpoint.json` (withSavedPortRange). */
  apiPortsFrom: PortRangeSource;
  /**
   * The inference port of the first start (`--api-port`, `SERVICE_DECK_API_PORT`), used only while
   * `endpoint.json` does not exist yet; later starts keep the saved port. Undefined: 8120.
   */
  firstApiPort: number | undefined;
  inspect: InspectMode;
  inspectPort: number;
  /** How long a stop waits for running answers before it closes their connections. */
  drainLimitMs: number;
  /** Free GPU memory always kept back at a worker start (MiB): a default and per-UUID values. */
  gpuReserveMiB: { default: number; byGpu: Record<string, number> };
  /** RAM always kept back at a worker start (MiB). */
  ramReserveMiB: number;
  /** How often the GPUs are probed for foreign processes while a chat worker holds one. */
  gpuPollMs: number;
  /**
   * The queue's order for chats (`SERVICE_DECK_QUEUE_ORDER`: `swap-aware`, the default, or
   * `strict`) and how long a waiting switch may be overtaken by chats for the loaded profile
   * (`SERVICE_DECK_SWITCH_MAX_WAIT_MS`, 30000; the switch target's last measured load counts if
   * longer; at most SWITCH_MAX_WAIT_CAP_MS, 120000: a larger setting is refused).
   */
  scheduling: { order: 'swap-aware' | 'strict'; switchMaxWaitMs: number };
  /** How often the programs of loaded workers are looked at for a new build (spec 3.5, 9). */
  buildPollMs: number;
  /**
   * The Responses API's memory of recent responses (src/workers/chat/responseMemory.ts): at most
   * `memoryMiB` (`SERVICE_DECK_RESPONSES_MEMORY_MIB`, 64; 0 keeps none), each kept `ttlSeconds`
   * after its last use (`SERVICE_DECK_RESPONSES_TTL_S`, 3600; 1 to RESPONSES_TTL_CAP_S).
   */
  responses: { memoryMiB: number; ttlSeconds: number };
  firstPassword: string | undefined;
  firstToken: string | undefined;
  logLevel: string;
  /** `SERVICE_DECK_LOG_FORMAT`: stdout's lines as JSON, readable (pino-pretty), or `auto` (readable on a terminal). */
  logFormat: 'json' | 'pretty' | 'auto';
  /** Where prompt enhancer files come from (CONTRACT section 8), and the recipes file replacing the official ones. */
  enhancerHub: string;
  enhancerRecipes: string | undefined;
  /** The folders whose model files `GET /api/v1/model-files` lists (CONTRACT section 10): `SERVICE_DECK_MODEL_DIRS`, `:`-separated, default `<state>/models`. */
  modelDirs: string[];
  /** The hub models are listed and forecast from (`SERVICE_DECK_MODEL_HUB`, default https://huggingface.co). */
  modelHub: string;
  /** `SERVICE_DECK_HUB_TOKEN`: sent to the model hub's own origin only; never logged or shown. */
  hubToken: string | undefined;
  /** The built operator console (Vite's output) that the admin listener serves at `/`. */
  consoleDir: string;
  http: HttpConfig;
  production: boolean;
  env: NodeJS.ProcessEnv;
}

export const NATIVE_PORTS: PortRange = { first: 1024, last: 65535 };

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function parsePort(text: string, what: string): number {
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new ConfigError(`${what}: "${text}" is not a port number`);
  return port;
}

/**
 * The configuration with the range in force at a start: `saved` (the installer's range from
 * `endpoint.json`) replaces `SERVICE_DECK_API_PORTS` and the native range, never `--api-ports`.
 */
export function withSavedPortRange(config: Config, saved: PortRange | undefined): Config {
  if (!saved || config.apiPortsFrom === 'option') return config;
  return { ...config, apiPorts: { first: saved.first, last: saved.last }, apiPortsFrom: 'saved' };
}

export function parsePortRange(text: string): PortRange {
  const match = /^(\d+)-(\d+)$/.exec(text.trim());
  if (!match?.[1] || !match[2]) throw new ConfigError(`--api-ports: "${text}" is not a range such as 8120-8124`);
  const first = parsePort(match[1], '--api-ports');
  const last = parsePort(match[2], '--api-ports');
  if (first > last || first < NATIVE_PORTS.first) throw new ConfigError(`--api-ports: ${text} must be an ascending range within 1024-65535`);
  return { first, last };
}

function parseInspect(text: string | undefined): InspectMode {
  const mode = (text ?? 'off').trim() || 'off';
  if (mode === 'off' || mode === 'log' || mode === 'stately') return mode;
  throw new ConfigError(`SERVICE_DECK_INSPECT: "${mode}" is not one of off, log, stately`);
}

export interface CliOptions {
  stateDir?: string;
  uiHost?: string;
  uiPort?: string;
  apiPorts?: string;
  apiPort?: string;
}

function parseWhole(text: string, what: string, unit = 'MiB'): number {
  const value = Number(text.trim());
  if (!Number.isInteger(value) || value < 0) throw new ConfigError(`${what}: "${text}" is not a whole number of ${unit}`);
  return value;
}

/** `1024` or `1024,GPU-a=2048,GPU-b=512`: a default reserve and per-GPU values. */
export function parseGpuReserve(text: string): Config['gpuReserveMiB'] {
  const result: Config['gpuReserveMiB'] = { default: 1024, byGpu: {} };
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const [key, value] = part.includes('=') ? part.split('=', 2) : [undefined, part];
    if (key === undefined) result.default = parseWhole(value ?? '', 'SERVICE_DECK_GPU_RESERVE_MIB');
    else result.byGpu[key.trim()] = parseWhole(value ?? '', `SERVICE_DECK_GPU_RESERVE_MIB (${key.trim()})`);
  }
  return result;
}

/** `SERVICE_DECK_LOG_FORMAT`: json, pretty or auto (the default). */
function parseLogFormat(value: string | undefined): Config['logFormat'] {
  const format = (value ?? '').trim().toLowerCase() || 'auto';
  if (format !== 'json' && format !== 'pretty' && format !== 'auto') throw new ConfigError(`SERVICE_DECK_LOG_FORMAT: "${value}" is not one of json, pretty, auto`);
  return format;
}

/** `SERVICE_DECK_ALLOWED_HOSTS`: host names, comma separated; a port or an IPv6 address's brackets are kept out. */
export function parseAllowedHosts(text: string): string[] {
  return text
    .split(',')
    .map((name) => name.trim().toLowerCase().replace(/\.$/, ''))
    .filter(Boolean)
    .map((name) => {
      if (!/^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)$/.test(name)) throw new ConfigError(`SERVICE_DECK_ALLOWED_HOSTS: "${name}" is not a host name (no scheme, no port)`);
      return name;
    });
}

function parseFlag(text: string | undefined, what: string): boolean {
  const value = (text ?? '').trim().toLowerCase();
  if (['', '0', 'false', 'no'].includes(value)) return false;
  if (['1', 'true', 'yes'].includes(value)) return true;
  throw new ConfigError(`${what}: "${text}" is not one of 1, 0, true, false`);
}

/**
 * The default connection cap: DEFAULT_HTTP's, or less where the process may open fewer files
 * (`Max open files` in /proc/self/limits, its soft limit): both listeners' connections, the
 * workers' connections and the state files must fit under it, so each listener takes at most a
 * third of it. A connection refused for want of a descriptor would be reset, not answered.
 */
export function defaultMaxConnections(limits = readProcLimits()): number {
  const soft = /^Max open files\s+(\d+|unlimited)/m.exec(limits)?.[1];
  if (!soft || soft === 'unlimited') return DEFAULT_HTTP.maxConnections;
  return Math.max(64, Math.min(DEFAULT_HTTP.maxConnections, Math.floor(Number(soft) / 3)));
}

function readProcLimits(): string {
  try {
    return readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return '';
  }
}

function httpConfig(env: NodeJS.ProcessEnv): HttpConfig {
  const ms = (name: string, fallback: number) => {
    const text = env[name];
    return text === undefined || text.trim() === '' ? fallback : Math.max(100, parseWhole(text, name, 'milliseconds'));
  };
  const requestTimeoutMs = ms('SERVICE_DECK_REQUEST_TIMEOUT_MS', DEFAULT_HTTP.requestTimeoutMs);
  const maxText = env.SERVICE_DECK_MAX_CONNECTIONS;
  const pendingText = env.SERVICE_DECK_MAX_PENDING_CONNECTIONS;
  const requestHeadMs = Math.min(requestTimeoutMs, ms('SERVICE_DECK_HEADERS_TIMEOUT_MS', DEFAULT_HTTP.headersTimeoutMs));
  const maxConnections = maxText ? Math.max(1, parseWhole(maxText, 'SERVICE_DECK_MAX_CONNECTIONS', 'connections')) : defaultMaxConnections();
  const maxPending = pendingText ? Math.max(1, parseWhole(pendingText, 'SERVICE_DECK_MAX_PENDING_CONNECTIONS', 'connections')) : DEFAULT_HTTP.maxPendingConnections;
  return {
    requestTimeoutMs,
    // Node refuses a headers limit above the whole request's.
    headersTimeoutMs: requestHeadMs,
    keepAliveTimeoutMs: ms('SERVICE_DECK_KEEP_ALIVE_TIMEOUT_MS', DEFAULT_HTTP.keepAliveTimeoutMs),
    maxConnections,
    // At most half the cap: a share as large as the cap would let young waiting connections refuse everyone.
    maxPendingConnections: Math.max(1, Math.min(maxPending, Math.floor(maxConnections / 2))),
    // Never longer than the headers limit, which Node applies to a connection that has begun a request.
    firstByteTimeoutMs: Math.min(requestHeadMs, ms('SERVICE_DECK_FIRST_BYTE_TIMEOUT_MS', DEFAULT_HTTP.firstByteTimeoutMs)),
    allowedHosts: parseAllowedHosts(env.SERVICE_DECK_ALLOWED_HOSTS ?? ''),
    trustProxy: parseFlag(env.SERVICE_DECK_TRUST_PROXY, 'SERVICE_DECK_TRUST_PROXY'),
  };
}

/** The queue order and the swap bound (see Config.scheduling). */
function parseScheduling(env: NodeJS.ProcessEnv): Config['scheduling'] {
  const order = (env.SERVICE_DECK_QUEUE_ORDER ?? '').trim() || 'swap-aware';
  if (order !== 'swap-aware' && order !== 'strict') throw new ConfigError(`SERVICE_DECK_QUEUE_ORDER: "${order}" is not one of swap-aware, strict`);
  const bound = (env.SERVICE_DECK_SWITCH_MAX_WAIT_MS ?? '').trim();
  const switchMaxWaitMs = bound === '' ? 30_000 : parseWhole(bound, 'SERVICE_DECK_SWITCH_MAX_WAIT_MS', 'milliseconds');
  // Refused rather than lowered in silence: the operator asked for a wait the service will not give.
  if (switchMaxWaitMs > SWITCH_MAX_WAIT_CAP_MS) {
    throw new ConfigError(`SERVICE_DECK_SWITCH_MAX_WAIT_MS: ${switchMaxWaitMs} is above ${SWITCH_MAX_WAIT_CAP_MS}, the longest a waiting model switch may be overtaken (milliseconds)`);
  }
  return { order, switchMaxWaitMs };
}

/** The longest a response may be kept after its last use: OpenAI's own retention, 30 days. */
export const RESPONSES_TTL_CAP_S = 30 * 24 * 3600;
/** The most memory the responses may take: 64 GiB (MiB). */
export const RESPONSES_MEMORY_CAP_MIB = 65_536;

/** The Responses API's memory (see Config.responses); a setting out of its range is refused, not lowered. */
function parseResponses(env: NodeJS.ProcessEnv): Config['responses'] {
  const memory = (env.SERVICE_DECK_RESPONSES_MEMORY_MIB ?? '').trim();
  const ttl = (env.SERVICE_DECK_RESPONSES_TTL_S ?? '').trim();
  const memoryMiB = memory === '' ? 64 : parseWhole(memory, 'SERVICE_DECK_RESPONSES_MEMORY_MIB');
  const ttlSeconds = ttl === '' ? 3600 : parseWhole(ttl, 'SERVICE_DECK_RESPONSES_TTL_S', 'seconds');
  if (memoryMiB > RESPONSES_MEMORY_CAP_MIB) throw new ConfigError(`SERVICE_DECK_RESPONSES_MEMORY_MIB: ${memoryMiB} is above ${RESPONSES_MEMORY_CAP_MIB} MiB (0 keeps no responses)`);
  if (ttlSeconds < 1 || ttlSeconds > RESPONSES_TTL_CAP_S) throw new ConfigError(`SERVICE_DECK_RESPONSES_TTL_S: ${ttlSeconds} is not between 1 and ${RESPONSES_TTL_CAP_S} seconds (30 days)`);
  return { memoryMiB, ttlSeconds };
}

/**
 * The model folders: absolute paths separated by `:`, each once; none given is `<state>/models`.
 * `<state>/models`, where pulls land, is always one of them (last when others are named), so that a
 * pulled file is listed and can become a profile whatever the variable says.
 */
function parseModelDirs(text: string | undefined, stateDir: string): string[] {
  const dirs = (text ?? '').split(':').map((dir) => dir.trim()).filter((dir) => dir !== '');
  for (const dir of dirs) if (!path.isAbsolute(dir)) throw new ConfigError(`SERVICE_DECK_MODEL_DIRS: "${dir}" is not an absolute path`);
  return [...new Set([...dirs.map((dir) => path.resolve(dir)), path.join(path.resolve(stateDir), 'models')])];
}

/** A hub's root URL: http or https, no credentials in it. */
function parseHub(text: string, name: string): string {
  let url: URL;
  try {
    url = new URL(text.trim());
  } catch {
    throw new ConfigError(`${name}: "${text}" is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError(`${name}: only http and https hubs are supported`);
  if (url.username !== '' || url.password !== '') throw new ConfigError(`${name}: put no credentials in the URL (SERVICE_DECK_HUB_TOKEN is the token)`);
  return url.href.replace(/\/$/, '');
}

/** The checkout or installed package this module belongs to (src/ runs under tsx, dist/src/ built). */
function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json')) && path.dirname(dir) !== dir) dir = path.dirname(dir);
  return dir;
}

/** The first start's inference port: a port within the allowed range. */
function parseFirstApiPort(text: string | undefined, range: PortRange): number | undefined {
  if (text === undefined || text.trim() === '') return undefined;
  const port = parsePort(text.trim(), '--api-port');
  if (port < range.first || port > range.last) throw new ConfigError(`--api-port: ${port} is outside the allowed ports ${range.first}-${range.last}`);
  return port;
}

export function loadConfig(options: CliOptions, env: NodeJS.ProcessEnv = process.env): Config {
  const home = os.homedir();
  const stateDir = path.resolve(options.stateDir ?? env.SERVICE_DECK_STATE_DIR ?? path.join(home, '.local', 'state', 'service-deck'));
  const cacheDir = path.resolve(env.SERVICE_DECK_CACHE_DIR ?? path.join(env.XDG_CACHE_HOME ?? path.join(home, '.cache'), 'service-deck'));
  const apiPortsText = options.apiPorts ?? env.SERVICE_DECK_API_PORTS;
  const apiPorts = apiPortsText ? parsePortRange(apiPortsText) : NATIVE_PORTS;
  const apiPortsFrom: PortRangeSource = options.apiPorts ? 'option' : apiPortsText ? 'env' : 'native';
  const drain = Number(env.SERVICE_DECK_DRAIN_LIMIT_MS ?? 30_000);
  if (!Number.isFinite(drain) || drain < 0) throw new ConfigError('SERVICE_DECK_DRAIN_LIMIT_MS must be a number of milliseconds');
  return {
    stateDir,
    cacheDir,
    uiHost: options.uiHost ?? env.SERVICE_DECK_UI_HOST ?? '127.0.0.1',
    uiPort: parsePort(options.uiPort ?? env.SERVICE_DECK_UI_PORT ?? '8110', '--ui-port'),
    apiPorts,
    apiPortsFrom,
    firstApiPort: parseFirstApiPort(options.apiPort ?? env.SERVICE_DECK_API_PORT, apiPorts),
    inspect: parseInspect(env.SERVICE_DECK_INSPECT),
    inspectPort: parsePort(env.SERVICE_DECK_INSPECT_PORT ?? '8130', 'SERVICE_DECK_INSPECT_PORT'),
    drainLimitMs: drain,
    gpuReserveMiB: parseGpuReserve(env.SERVICE_DECK_GPU_RESERVE_MIB ?? '1024'),
    ramReserveMiB: parseWhole(env.SERVICE_DECK_RAM_RESERVE_MIB ?? '1024', 'SERVICE_DECK_RAM_RESERVE_MIB'),
    gpuPollMs: Math.max(100, parseWhole(env.SERVICE_DECK_GPU_POLL_MS ?? '2000', 'SERVICE_DECK_GPU_POLL_MS', 'milliseconds')),
    scheduling: parseScheduling(env),
    buildPollMs: Math.max(100, parseWhole(env.SERVICE_DECK_BUILD_POLL_MS ?? '5000', 'SERVICE_DECK_BUILD_POLL_MS', 'milliseconds')),
    responses: parseResponses(env),
    firstPassword: env.SERVICE_DECK_ADMIN_PASSWORD,
    firstToken: env.SERVICE_DECK_API_TOKEN,
    logLevel: env.SERVICE_DECK_LOG_LEVEL ?? 'info',
    logFormat: parseLogFormat(env.SERVICE_DECK_LOG_FORMAT),
    enhancerHub: env.SERVICE_DECK_ENHANCER_HUB ?? 'https://huggingface.co',
    enhancerRecipes: env.SERVICE_DECK_ENHANCER_RECIPES,
    modelDirs: parseModelDirs(env.SERVICE_DECK_MODEL_DIRS, stateDir),
    modelHub: parseHub(env.SERVICE_DECK_MODEL_HUB ?? 'https://huggingface.co', 'SERVICE_DECK_MODEL_HUB'),
    hubToken: env.SERVICE_DECK_HUB_TOKEN?.trim() || undefined,
    consoleDir: path.resolve(env.SERVICE_DECK_CONSOLE_DIR ?? path.join(packageRoot(), 'dist', 'console')),
    http: httpConfig(env),
    production: env.NODE_ENV === 'production',
    env,
  };
}
