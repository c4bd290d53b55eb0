// Files from a model hub (CONTRACT section 8), laid out `<hub>/<repo>/resolve/<revision>/<path>`
// like huggingface.co. The resolve answer is read with `redirect: 'manual'`: on the real hub it is a
// redirect to a CDN carrying `X-Linked-Size` and `X-Linked-Etag` (the file's sha256), and the bytes
// come from its `Location`. A download goes to `<dest>.part` (0600), resumes it with `Range`, hashes
// the whole file and checks size and sha256 before it renames the partial to `dest`: a file at
// `dest` is always complete and checked. Node built-ins and undici (fetch and its Agent).
//
// A hub is trusted with nothing it could use against the disk or the network:
// - a file whose size the hub does not state is refused before a byte is written, and a body that
//   runs past the stated size is cut there: the download fails, and never writes more;
// - the caller's `checkRoom` is asked before the first byte and every ROOM_CHECK_BYTES after;
// - every failure but a cut connection or a cancel removes the partial file (those two keep it
//   for the resume: it holds at most the stated size, which the free space check allowed for);
// - the partial is opened with O_NOFOLLOW (a symlink put there is never written through), and
//   started anew with O_EXCL;
// - redirects go to http(s) only, and never inward: a hub that is not on loopback may not send
//   the download to a loopback address, nor to a private one unless the hub is itself private;
// - a host name is resolved once per probe or download, and the connection goes to the addresses
//   that were checked (undici's `connect.lookup` answers from them and never asks DNS again), so a
//   name that answers a public address to the check and an inward one to the connection (DNS
//   rebinding) cannot take the download inward.
import { createHash, type Hash } from 'node:crypto';
import { constants as fsConstants, createReadStream } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { lstat, open, rename, rm } from 'node:fs/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import type { Writable } from 'node:stream';
import { Agent, fetch, type Response } from 'undici';

export type HubErrorCode =
  | 'network'
  | 'http_status'
  | 'size_mismatch'
  | 'size_unknown'
  | 'sha256_mismatch'
  | 'disk_full'
  | 'cancelled'
  | 'redirect_refused'
  | 'unsafe_path';

/** Why a probe or a download failed; `code` is what the caller branches on, the message is for people. */
export class HubError extends Error {
  readonly code: HubErrorCode;
  constructor(code: HubErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'HubError';
    this.code = code;
  }
}

export interface HubFile {
  /** Bytes, as the hub states them (`X-Linked-Size`, else `Content-Length`); null when it says nothing. */
  size: number | null;
  /** Lower-case hex sha256 (`X-Linked-Etag`); null when the hub gives none. */
  sha256: string | null;
}

export interface DownloadOptions {
  /** `<hub>/<repo>/resolve/<revision>/<path>` */
  url: string;
  /** The final file; its folder must exist. The partial download is `${dest}.part`. */
  dest: string;
  /** Cancels: the download stops with HubError('cancelled') and `${dest}.part` stays (the caller removes it). */
  signal: AbortSignal;
  /** Called at most every 250 ms and once at the end; `done` counts the bytes in the partial file. */
  onProgress: (done: number, total: number | null) => void;
  /** Opens the partial file for writing (`'a'` appends, `'w'` starts it anew); tests inject failing writers. */
  openWrite?: (path: string, flags: 'a' | 'w') => Writable | Promise<Writable>;
  /**
   * Asked before the first byte is written and every ROOM_CHECK_BYTES after, with the bytes still
   * to come: rejects (a HubError `disk_full`) when the disk has too little room left.
   */
  checkRoom?: (bytesToCome: number) => Promise<void>;
  /** Bytes written between two room checks (default ROOM_CHECK_BYTES; tests ask more often). */
  roomCheckBytes?: number;
  /** How host names resolve, once per download: the redirect rule and the connections use that answer (tests give a stand-in for DNS). */
  resolveHost?: ResolveHost;
  /** The hub's token, sent to the hub's own origin only (tokenScope). */
  scope?: AskScope;
}

/** How often, in bytes written, the free space is checked again during a download. */
export const ROOM_CHECK_BYTES = 64 * 1024 * 1024;

const FILE_MODE = 0o600;
const PROGRESS_MS = 250;
const MAX_REDIRECTS = 10;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const SHA256 = /^[0-9a-f]{64}$/;

/** A URL fit for a message: no query (CDN links carry signatures there). */
export function shown(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

function causes(error: unknown): string {
  const parts: string[] = [];
  for (let e = error; e instanceof Error && parts.length < 4; e = e.cause) parts.push(e.message);
  return parts.length > 0 ? parts.join(': ') : String(error);
}

/** Any failure outside HubError becomes one: cancelled when the signal fired, else `otherwise`. */
function asHubError(error: unknown, signal: AbortSignal | undefined, otherwise: () => unknown): unknown {
  if (error instanceof HubError) return error;
  if (signal?.aborted) return new HubError('cancelled', 'download cancelled', { cause: error });
  return otherwise();
}

export function networkError(error: unknown, url: URL): HubError {
  return new HubError('network', `network error talking to ${url.host}: ${causes(error)}`, { cause: error });
}

export function statusError(response: Response, url: URL, asked: URL): HubError {
  const via = url.href === asked.href ? '' : ` (resolving ${shown(asked)})`;
  return new HubError('http_status', `${shown(url)} answered ${response.status} ${response.statusText}${via}`.trimEnd());
}

/** `X-Linked-Etag`, possibly `W/` prefixed and quoted, as a sha256; anything else is not one. */
export function etagSha256(etag: string | null): string | null {
  const value = etag
    ?.trim()
    .replace(/^W\//i, '')
    .replace(/^"(.*)"$/, '$1')
    .toLowerCase();
  return value !== undefined && SHA256.test(value) ? value : null;
}

export function byteCount(value: string | null | undefined): number | null {
  return value != null && /^\d+$/.test(value.trim()) ? Number(value.trim()) : null;
}

/** `Content-Range: bytes <start>-<end>/<total>` (on a 416 the range is `*`). */
export function contentRange(value: string | null): { start: number | null; total: number | null } | null {
  const match = value?.match(/^bytes\s+(?:(\d+)-\d+|\*)\/(\d+|\*)$/);
  if (!match) return null;
  return { start: byteCount(match[1]), total: byteCount(match[2]) };
}

export async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

export interface Answer {
  response: Response;
  /** The URL that gave `response` (after redirects). */
  url: URL;
  /** What the first hop that carried them said: X-Linked-Size and X-Linked-Etag. */
  linked: HubFile;
}

/** Where an address is: this machine, a private network (or link-local, CGNAT, multicast), or anywhere. */
export type Reach = 'loopback' | 'private' | 'public';

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addSubnet('0.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addAddress('::', 'ipv6');
const PRIVATE = new BlockList();
for (const [net, bits] of [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['169.254.0.0', 16], ['100.64.0.0', 10], ['198.18.0.0', 15], ['224.0.0.0', 3]] as const) {
  PRIVATE.addSubnet(net, bits, 'ipv4');
}
for (const [net, bits] of [['fc00::', 7], ['fe80::', 10], ['ff00::', 8]] as const) PRIVATE.addSubnet(net, bits, 'ipv6');

/** The reach of one IP address (an IPv4-mapped IPv6 address as its IPv4). */
export function reachOf(address: string): Reach {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const ip = mapped ?? address;
  const family = isIP(ip) === 6 ? 'ipv6' : 'ipv4';
  if (LOOPBACK.check(ip, family)) return 'loopback';
  if (PRIVATE.check(ip, family)) return 'private';
  return 'public';
}

const RANK: Record<Reach, number> = { loopback: 0, private: 1, public: 2 };

/** How a host name resolves: every address it has now (tests give a stand-in for DNS). */
export type ResolveHost = (host: string) => Promise<string[]>;

export const systemResolve: ResolveHost = async (host) => (await lookup(host, { all: true })).map((a) => a.address);

/** Where a host is: the addresses it resolved to (the only ones a connection to it may use) and the innermost reach among them. */
interface Place {
  addresses: string[];
  reach: Reach;
}

/** A URL's host name or address, without an IPv6 address's brackets. */
const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1');

/** The loopback addresses a `localhost` name stands for (RFC 6761), asked of no resolver. */
const LOCALHOST = ['127.0.0.1', '::1'];

/** Resolves a host once: an address is itself, a `localhost` name is loopback. */
async function placeOf(host: string, resolveHost: ResolveHost): Promise<Place> {
  const local = host === 'localhost' || host.endsWith('.localhost');
  const addresses = isIP(host) ? [host] : local ? LOCALHOST : await resolveHost(host);
  if (addresses.length === 0) throw new Error(`${host} has no address`);
  let reach: Reach = 'public';
  for (const address of addresses) if (RANK[reachOf(address)] < RANK[reach]) reach = reachOf(address);
  return { addresses, reach };
}

/**
 * Why the hub's redirect from `hub` to `to` is not followed, or null when it may be: only http(s);
 * the same host always; else never further in than the hub itself (a hub on loopback may send
 * anywhere, a private one to private or public addresses, a public one only to public ones).
 * `place` says where a URL's host is.
 */
async function judgeRedirect(hub: URL, to: URL, place: (url: URL) => Promise<Place>): Promise<string | null> {
  if (to.protocol !== 'http:' && to.protocol !== 'https:') return `a redirect to a ${to.protocol} URL is not followed (http and https only)`;
  if (to.hostname === hub.hostname) return null;
  const from = (await place(hub)).reach;
  if (from === 'loopback') return null;
  let target: Reach;
  try {
    target = (await place(to)).reach;
  } catch (error) {
    return `the redirect's host ${to.hostname} does not resolve: ${(error as Error).message}`;
  }
  if (RANK[target] < RANK[from]) return `a redirect from ${from === 'public' ? 'a public' : 'a private'} hub to a ${target} address (${to.host}) is not followed`;
  return null;
}

/** The redirect rule (judgeRedirect) with the host names resolved by `resolveHost`. */
export function redirectProblem(hub: URL, to: URL, resolveHost: ResolveHost = systemResolve): Promise<string | null> {
  return judgeRedirect(hub, to, (url) => placeOf(hostOf(url), resolveHost));
}

const lookupFailure = (message: string) => Object.assign(new Error(message), { code: 'ENOTFOUND' });

/**
 * One probe's or one download's view of the network: each host name is resolved once, and that
 * answer is both what the redirect rule judges and where the connections go (the agent's
 * `connect.lookup` answers from it, never from DNS again). `close()` ends its connections.
 */
export class PinnedHosts {
  readonly #places = new Map<string, Promise<Place>>();
  readonly agent: Agent;

  constructor(private readonly resolveHost: ResolveHost) {
    this.agent = new Agent({ connect: { lookup: this.#lookup } });
  }

  #place(host: string): Promise<Place> {
    let place = this.#places.get(host);
    if (place === undefined) {
      place = placeOf(host, this.resolveHost);
      this.#places.set(host, place);
    }
    return place;
  }

  /** Where a URL's host is, resolved at most once. */
  readonly place = (url: URL): Promise<Place> => this.#place(hostOf(url));

  readonly #lookup: LookupFunction = (hostname, options, callback) => {
    this.#place(hostname).then(
      ({ addresses }) => {
        const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : options.family;
        const fitting = family === 4 || family === 6 ? addresses.filter((address) => isIP(address) === family) : addresses;
        const first = fitting[0];
        if (first === undefined) callback(lookupFailure(`${hostname} has no IPv${family} address among those checked`), '');
        else if (options.all) callback(null, fitting.map((address) => ({ address, family: isIP(address) })));
        else callback(null, first, isIP(first));
      },
      (error: unknown) => callback(lookupFailure(`${hostname} does not resolve: ${(error as Error).message}`), ''),
    );
  };

  async close(): Promise<void> {
    await this.agent.destroy().catch(() => undefined);
  }
}

/** Beyond a request's own headers: the hub it was made for (redirects are judged from it), and headers only the hub's own origin gets (its token). */
export interface AskScope {
  /** Default: the URL asked. */
  hub?: URL;
  /** Sent to the hub's origin only, never to a host a redirect names (`Authorization: Bearer <token>`). */
  originHeaders?: Record<string, string>;
}

/** The scope that sends `token` as `Authorization: Bearer` to the hub's own origin, and nowhere else; none without a token. */
export function tokenScope(token: string | undefined): AskScope {
  return token ? { originHeaders: { authorization: `Bearer ${token}` } } : {};
}

/** One request, redirects followed by hand so that the resolve answer's linked headers are read. */
export async function ask(url: string, method: 'GET' | 'HEAD', headers: Record<string, string>, pinned: PinnedHosts, signal?: AbortSignal, scope: AskScope = {}): Promise<Answer> {
  const asked = new URL(url);
  const hub = scope.hub ?? asked;
  const linked: HubFile = { size: null, sha256: null };
  let current = asked;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop += 1) {
    let response: Response;
    const sent = current.origin === hub.origin && scope.originHeaders ? { ...headers, ...scope.originHeaders } : headers;
    try {
      response = await fetch(current, { method, headers: sent, redirect: 'manual', signal, dispatcher: pinned.agent });
    } catch (error) {
      throw asHubError(error, signal, () => networkError(error, current));
    }
    linked.size ??= byteCount(response.headers.get('x-linked-size'));
    linked.sha256 ??= etagSha256(response.headers.get('x-linked-etag'));
    const location = response.headers.get('location');
    if (!REDIRECTS.has(response.status) || location === null) return { response, url: current, linked };
    await discard(response);
    const next = new URL(location, current);
    const problem = await judgeRedirect(hub, next, pinned.place);
    if (problem) throw new HubError('redirect_refused', `${shown(asked)}: ${problem}`);
    current = next;
  }
  throw new HubError('http_status', `more than ${MAX_REDIRECTS} redirects resolving ${shown(asked)}`);
}

/**
 * What the hub says of a file before downloading it: `X-Linked-Size` and `X-Linked-Etag` of the
 * resolve answer (a redirect on the real hub, whose `Location` is followed), else the final answer's
 * `Content-Length` and no sha256. A HEAD request: no bytes are transferred. `scope` carries the
 * hub's token (tokenScope): to the hub's origin, never past a redirect to another.
 */
export async function probeHubFile(url: string, signal?: AbortSignal, resolveHost: ResolveHost = systemResolve, scope: AskScope = {}): Promise<HubFile> {
  const pinned = new PinnedHosts(resolveHost);
  try {
    const { response, url: answered, linked } = await ask(url, 'HEAD', { 'accept-encoding': 'identity' }, pinned, signal, scope);
    await discard(response);
    if (!response.ok) throw statusError(response, answered, new URL(url));
    return { size: linked.size ?? byteCount(response.headers.get('content-length')), sha256: linked.sha256 };
  } finally {
    await pinned.close();
  }
}

/** The bytes of a partial kept from before; anything there that is not a regular file (a symlink) is removed, not followed. */
async function partialSize(file: string): Promise<number> {
  try {
    const info = await lstat(file);
    if (info.isFile()) return info.size;
    await rm(file, { force: true });
    return 0;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
}

/** Feeds the first `bytes` of `file` (a partial kept from before, or a stored file checked again) into `hash`. */
export async function hashPrefix(hash: Hash, file: string, bytes: number, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(file, { start: 0, end: bytes - 1, signal })) hash.update(chunk as Buffer);
}

/**
 * The partial file, 0600, never through a symlink (O_NOFOLLOW): appended to, or made anew with
 * O_EXCL after whatever was there is removed. `flush` fsyncs it on close, so that a rename never
 * publishes bytes still only in memory.
 */
async function openPrivate(file: string, flags: 'a' | 'w'): Promise<Writable> {
  const { O_WRONLY, O_APPEND, O_CREAT, O_EXCL, O_NOFOLLOW } = fsConstants;
  if (flags === 'w') await rm(file, { force: true });
  const handle = await open(file, flags === 'a' ? O_WRONLY | O_APPEND | O_NOFOLLOW : O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, FILE_MODE).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP' || (error as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new HubError('unsafe_path', `${file} was replaced while the download ran (a symlink or another file): it is not written through`, { cause: error });
    }
    throw error;
  });
  await handle.chmod(FILE_MODE);
  return handle.createWriteStream({ flush: true });
}

/** Makes the partial 0600 through a descriptor opened without following a symlink (a partial kept from before may be 0644). */
async function tighten(file: string): Promise<void> {
  const handle = await open(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    await handle.chmod(FILE_MODE);
  } finally {
    await handle.close();
  }
}

/** Resolves once `writer` drained; rejects when it fails or closes first. */
function drained(writer: Writable): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: Error) => {
      writer.off('drain', done).off('error', done).off('close', closed);
      if (error) reject(error);
      else resolve();
    };
    const closed = () => done(new Error('the file was closed while writing'));
    writer.on('drain', done).on('error', done).on('close', closed);
  });
}

/** Ends `writer` so that every byte it accepted is in the file; rejects with its write error. */
function closed(writer: Writable): Promise<void> {
  return new Promise((resolve, reject) => {
    if (writer.errored) return reject(writer.errored);
    if (writer.closed) return resolve();
    writer.once('error', reject).once('close', () => (writer.errored ? reject(writer.errored) : resolve()));
    writer.end();
  });
}

function writeFailure(error: unknown, file: string): unknown {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HubError('disk_full', `no space left writing ${file}: ${causes(error)}`, { cause: error });
  return error;
}

/** What `stream` writes at most, and how it asks for room on the way. */
interface Bounds {
  /** Bytes the body may still bring: one more ends the download with `size_mismatch`. */
  room: number;
  /** The stated size, for the message. */
  total: number;
  checkRoom?: (bytesToCome: number) => Promise<void>;
  /** Bytes written between two room checks. */
  every: number;
}

/**
 * Streams `body` into `writer` with backpressure, hashing and counting as it goes, never more than
 * `bounds.room` bytes, asking for disk room every ROOM_CHECK_BYTES. On a failure of the connection
 * or a cancel the writer is ended, not destroyed, so that the partial file keeps every byte
 * received (the next attempt resumes after them).
 */
async function stream(
  body: ReadableStream<Uint8Array>,
  writer: Writable,
  hash: Hash,
  count: (bytes: number) => void,
  fail: (error: unknown) => unknown,
  file: string,
  bounds: Bounds,
): Promise<void> {
  let writeError: unknown;
  let written = 0;
  let checkedAt = 0;
  writer.on('error', (error) => (writeError ??= error));
  // A reader loop, not `for await`: the same code type-checks against the DOM's ReadableStream
  // (the console's type check reads the server's types too).
  const reader = body.getReader();
  try {
    for (;;) {
      const { value: chunk, done } = await reader.read();
      if (done) break;
      if (writeError !== undefined) {
        await reader.cancel().catch(() => undefined);
        break;
      }
      if (written + chunk.byteLength > bounds.room) {
        await reader.cancel().catch(() => undefined);
        throw new HubError('size_mismatch', `the hub sent more than the ${bounds.total} bytes it stated for ${file.replace(/\.part$/, '')}: the download was stopped there`);
      }
      if (bounds.checkRoom && written - checkedAt >= bounds.every) {
        checkedAt = written;
        await bounds.checkRoom(bounds.room - written);
      }
      hash.update(chunk);
      if (!writer.write(chunk)) await drained(writer).catch((error: unknown) => (writeError ??= error));
      written += chunk.byteLength;
      count(chunk.byteLength);
    }
  } catch (error) {
    await reader.cancel().catch(() => undefined);
    await closed(writer).catch(() => undefined);
    throw error instanceof HubError ? error : fail(error);
  }
  if (writeError !== undefined) throw writeFailure(writeError, file);
  await closed(writer).catch((error: unknown) => {
    throw writeFailure(error, file);
  });
}

/** The answer to use: `kept` bytes of the partial stay (0: start over); `complete` after a 416 that says the partial is the file. */
interface Plan {
  answer: Answer;
  kept: number;
  total: number | null;
  complete: boolean;
}

async function plan(url: string, partial: string, kept: number, signal: AbortSignal, pinned: PinnedHosts, scope: AskScope): Promise<Plan> {
  for (;;) {
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (kept > 0) headers.range = `bytes=${kept}-`;
    const answer = await ask(url, 'GET', headers, pinned, signal, scope);
    const { response, linked } = answer;
    if (response.status === 416 && kept > 0) {
      await discard(response);
      const total = linked.size ?? contentRange(response.headers.get('content-range'))?.total ?? null;
      if (total === kept) return { answer, kept, total, complete: true };
      // The partial is longer than the file, so it is no piece of it: start over (once).
      await rm(partial, { force: true });
      kept = 0;
      continue;
    }
    if (!response.ok || response.body === null) {
      await discard(response);
      throw statusError(response, answer.url, new URL(url));
    }
    if (response.status === 206) {
      const range = contentRange(response.headers.get('content-range'));
      if (range?.start !== kept) {
        await discard(response);
        const got = response.headers.get('content-range') ?? 'no Content-Range';
        throw new HubError('http_status', `${shown(answer.url)} answered 206 with ${got} to Range bytes=${kept}-`);
      }
      return { answer, kept, total: linked.size ?? range.total, complete: false };
    }
    // A 200 is the whole file, whatever was asked: the partial is started over.
    return { answer, kept: 0, total: linked.size ?? byteCount(response.headers.get('content-length')), complete: false };
  }
}

/**
 * Throttles `onProgress` to one call per PROGRESS_MS; a count held back by the throttle is sent when
 * its window ends, so that bytes received just before the body stalls are still shown. `end` always
 * calls; `stop` drops what is held back (the download ended otherwise).
 */
function progress(onProgress: DownloadOptions['onProgress'], total: number | null) {
  let last = -Infinity;
  let held: number | null = null;
  let timer: NodeJS.Timeout | undefined;
  const send = (done: number) => {
    last = performance.now();
    held = null;
    onProgress(done, total);
  };
  const stop = () => {
    clearTimeout(timer);
    timer = undefined;
    held = null;
  };
  return {
    tick(done: number) {
      const since = performance.now() - last;
      if (since >= PROGRESS_MS) {
        stop();
        send(done);
        return;
      }
      held = done;
      timer ??= setTimeout(() => {
        timer = undefined;
        if (held !== null) send(held);
      }, PROGRESS_MS - since).unref();
    },
    end(done: number) {
      stop();
      onProgress(done, total);
    },
    stop,
  };
}

/**
 * Downloads one hub file to `dest` through `${dest}.part`, resuming a partial left by a cut
 * connection, a restart or an earlier run. The hub must state the size (else `size_unknown`, before
 * a byte is written); the body is cut at it. Size and sha256 are checked. Resolves with the size the
 * hub stated, the file's length in `bytes`, and `sha256` as computed over the whole file, equal to
 * the hub's when it gave one. Rejects with a HubError; only `network` and `cancelled` keep the
 * partial (for the resume), every other failure removes it. Other file-system errors pass through
 * as they are. The hub's token (`scope`) goes to the hub's origin only, never to the CDN a
 * redirect names.
 */
export async function downloadHubFile(options: DownloadOptions): Promise<HubFile & { bytes: number }> {
  const { url, dest, signal } = options;
  const partial = `${dest}.part`;
  const pinned = new PinnedHosts(options.resolveHost ?? systemResolve);
  let report: ReturnType<typeof progress> | undefined;
  try {
    const found = await partialSize(partial);
    // Hashed before asking, so that a CDN never waits on an idle connection while a big partial is read.
    let hash = createHash('sha256');
    await hashPrefix(hash, partial, found, signal);
    const { answer, kept, total, complete } = await plan(url, partial, found, signal, pinned, options.scope ?? {});
    if (total === null) {
      await discard(answer.response);
      throw new HubError('size_unknown', `${shown(new URL(url))}: the hub states no size (neither X-Linked-Size nor Content-Length), so the download could not be bounded: refused`);
    }
    if (kept !== found) hash = createHash('sha256');
    const reporter = progress(options.onProgress, total);
    report = reporter;
    let done = kept;
    if (!complete) {
      await options.checkRoom?.(total - kept);
      const writer = await (options.openWrite ?? openPrivate)(partial, kept > 0 ? 'a' : 'w');
      reporter.tick(done);
      const count = (bytes: number) => reporter.tick((done += bytes));
      const lost = (error: unknown) => asHubError(error, signal, () => networkError(error, answer.url));
      const bounds: Bounds = { room: total - kept, total, every: options.roomCheckBytes ?? ROOM_CHECK_BYTES, ...(options.checkRoom ? { checkRoom: options.checkRoom } : {}) };
      await stream(answer.response.body as ReadableStream<Uint8Array>, writer, hash, count, lost, partial, bounds);
    }
    const sha256 = hash.digest('hex');
    const where = shown(new URL(url));
    const mismatch =
      total !== null && total !== done
        ? new HubError('size_mismatch', `${where}: expected ${total} bytes, got ${done}`)
        : answer.linked.sha256 !== null && answer.linked.sha256 !== sha256
          ? new HubError('sha256_mismatch', `${where}: expected sha256 ${answer.linked.sha256}, got ${sha256}`)
          : undefined;
    if (mismatch) throw mismatch;
    await tighten(partial);
    await rename(partial, dest);
    reporter.end(done);
    return { size: total, sha256, bytes: done };
  } catch (error) {
    const failure = asHubError(error, signal, () => error);
    const resumable = failure instanceof HubError && (failure.code === 'network' || failure.code === 'cancelled');
    if (!resumable) await rm(partial, { force: true }).catch(() => undefined);
    throw failure;
  } finally {
    report?.stop();
    await pinned.close();
  }
}
