// Files from a model hub (CONTRACT section 8), laid out `<hub>/<repo>/resolve/<revision>/<path>`
// like huggingface.co. The resolve answer is read with `redirect: 'manual'`: on the real hub it is a
// redirect to a CDN carrying `X-Linked-Size` and `X-Linked-Etag` (the file's sha256), and the bytes
// come from its `Location`. A download goes to `<dest>.part` (0600), resumes it with `Range`, hashes
// the whole file and checks size and sha256 before it renames the partial to `dest`: a file at
// `dest` is always complete and checked. Only node built-ins and the global fetch.
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, rename, rm, stat } from 'node:fs/promises';
import type { Writable } from 'node:stream';

export type HubErrorCode = 'network' | 'http_status' | 'size_mismatch' | 'sha256_mismatch' | 'disk_full' | 'cancelled';

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
  /** Opens the partial file for writing (`'a'` appends, `'w'` truncates); tests inject failing writers. */
  openWrite?: (path: string, flags: 'a' | 'w') => Writable;
}

const FILE_MODE = 0o600;
const PROGRESS_MS = 250;
const MAX_REDIRECTS = 10;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);
const SHA256 = /^[0-9a-f]{64}$/;

/** A URL fit for a message: no query (CDN links carry signatures there). */
function shown(url: URL): string {
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

function networkError(error: unknown, url: URL): HubError {
  return new HubError('network', `network error talking to ${url.host}: ${causes(error)}`, { cause: error });
}

function statusError(response: Response, url: URL, asked: URL): HubError {
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

function byteCount(value: string | null | undefined): number | null {
  return value != null && /^\d+$/.test(value.trim()) ? Number(value.trim()) : null;
}

/** `Content-Range: bytes <start>-<end>/<total>` (on a 416 the range is `*`). */
function contentRange(value: string | null): { start: number | null; total: number | null } | null {
  const match = value?.match(/^bytes\s+(?:(\d+)-\d+|\*)\/(\d+|\*)$/);
  if (!match) return null;
  return { start: byteCount(match[1]), total: byteCount(match[2]) };
}

async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

interface Answer {
  response: Response;
  /** The URL that gave `response` (after redirects). */
  url: URL;
  /** What the first hop that carried them said: X-Linked-Size and X-Linked-Etag. */
  linked: HubFile;
}

/** One request, redirects followed by hand so that the resolve answer's linked headers are read. */
async function ask(url: string, method: 'GET' | 'HEAD', headers: Record<string, string>, signal?: AbortSignal): Promise<Answer> {
  const asked = new URL(url);
  const linked: HubFile = { size: null, sha256: null };
  let current = asked;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop += 1) {
    let response: Response;
    try {
      response = await fetch(current, { method, headers, redirect: 'manual', signal });
    } catch (error) {
      throw asHubError(error, signal, () => networkError(error, current));
    }
    linked.size ??= byteCount(response.headers.get('x-linked-size'));
    linked.sha256 ??= etagSha256(response.headers.get('x-linked-etag'));
    const location = response.headers.get('location');
    if (!REDIRECTS.has(response.status) || location === null) return { response, url: current, linked };
    await discard(response);
    current = new URL(location, current);
  }
  throw new HubError('http_status', `more than ${MAX_REDIRECTS} redirects resolving ${shown(asked)}`);
}

/**
 * What the hub says of a file before downloading it: `X-Linked-Size` and `X-Linked-Etag` of the
 * resolve answer (a redirect on the real hub, whose `Location` is followed), else the final answer's
 * `Content-Length` and no sha256. A HEAD request: no bytes are transferred.
 */
export async function probeHubFile(url: string, signal?: AbortSignal): Promise<HubFile> {
  const { response, url: answered, linked } = await ask(url, 'HEAD', { 'accept-encoding': 'identity' }, signal);
  await discard(response);
  if (!response.ok) throw statusError(response, answered, new URL(url));
  return { size: linked.size ?? byteCount(response.headers.get('content-length')), sha256: linked.sha256 };
}

async function partialSize(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
}

/** Feeds the first `bytes` of `file` (a partial kept from before) into `hash`. */
async function hashPrefix(hash: Hash, file: string, bytes: number, signal: AbortSignal): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(file, { start: 0, end: bytes - 1, signal })) hash.update(chunk as Buffer);
}

/** The partial file, 0600; `flush` fsyncs it on close, so that a rename never publishes bytes still only in memory. */
function openPrivate(file: string, flags: 'a' | 'w'): Writable {
  return createWriteStream(file, { flags, mode: FILE_MODE, flush: true });
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

/**
 * Streams `body` into `writer` with backpressure, hashing and counting as it goes. On a failure of
 * the connection or a cancel the writer is ended, not destroyed, so that the partial file keeps
 * every byte received (the next attempt resumes after them).
 */
async function stream(
  body: ReadableStream<Uint8Array>,
  writer: Writable,
  hash: Hash,
  count: (bytes: number) => void,
  fail: (error: unknown) => unknown,
  file: string,
): Promise<void> {
  let writeError: unknown;
  writer.on('error', (error) => (writeError ??= error));
  try {
    // A reader loop, not `for await`: the same code type-checks against the DOM's ReadableStream
    // (the console's type check reads the server's types too).
    const reader = body.getReader();
    for (;;) {
      const { value: chunk, done } = await reader.read();
      if (done) break;
      if (writeError !== undefined) {
        await reader.cancel().catch(() => undefined);
        break;
      }
      hash.update(chunk);
      if (!writer.write(chunk)) await drained(writer).catch((error: unknown) => (writeError ??= error));
      count(chunk.byteLength);
    }
  } catch (error) {
    await closed(writer).catch(() => undefined);
    throw fail(error);
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

async function plan(url: string, partial: string, kept: number, signal: AbortSignal): Promise<Plan> {
  for (;;) {
    const headers: Record<string, string> = { 'accept-encoding': 'identity' };
    if (kept > 0) headers.range = `bytes=${kept}-`;
    const answer = await ask(url, 'GET', headers, signal);
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

/** Throttles `onProgress` to one call per PROGRESS_MS; `end` always calls. */
function progress(onProgress: DownloadOptions['onProgress'], total: number | null) {
  let last = -Infinity;
  return {
    tick(done: number) {
      const now = performance.now();
      if (now - last < PROGRESS_MS) return;
      last = now;
      onProgress(done, total);
    },
    end(done: number) {
      onProgress(done, total);
    },
  };
}

/**
 * Downloads one hub file to `dest` through `${dest}.part`, resuming a partial left by a cut
 * connection, a restart or an earlier run. Size and sha256 are checked when the hub gave them; a
 * mismatch deletes the partial. Resolves with the size the hub stated (null when it stated none),
 * the file's length in `bytes`, and `sha256` as computed over the whole file: always set, equal to
 * the hub's when it gave one. Rejects with a HubError; `network`, `cancelled` and `disk_full` keep
 * the partial. Other file-system errors pass through as they are.
 */
export async function downloadHubFile(options: DownloadOptions): Promise<HubFile & { bytes: number }> {
  const { url, dest, signal } = options;
  const partial = `${dest}.part`;
  try {
    const found = await partialSize(partial);
    // Hashed before asking, so that a CDN never waits on an idle connection while a big partial is read.
    let hash = createHash('sha256');
    await hashPrefix(hash, partial, found, signal);
    const { answer, kept, total, complete } = await plan(url, partial, found, signal);
    if (kept !== found) hash = createHash('sha256');
    const report = progress(options.onProgress, total);
    let done = kept;
    if (!complete) {
      const writer = (options.openWrite ?? openPrivate)(partial, kept > 0 ? 'a' : 'w');
      report.tick(done);
      const count = (bytes: number) => report.tick((done += bytes));
      const lost = (error: unknown) => asHubError(error, signal, () => networkError(error, answer.url));
      await stream(answer.response.body as ReadableStream<Uint8Array>, writer, hash, count, lost, partial);
    }
    const sha256 = hash.digest('hex');
    const where = shown(new URL(url));
    const mismatch =
      total !== null && total !== done
        ? new HubError('size_mismatch', `${where}: expected ${total} bytes, got ${done}`)
        : answer.linked.sha256 !== null && answer.linked.sha256 !== sha256
          ? new HubError('sha256_mismatch', `${where}: expected sha256 ${answer.linked.sha256}, got ${sha256}`)
          : undefined;
    if (mismatch) {
      await rm(partial, { force: true });
      throw mismatch;
    }
    await chmod(partial, FILE_MODE);
    await rename(partial, dest);
    report.end(done);
    return { size: total, sha256, bytes: done };
  } catch (error) {
    throw asHubError(error, signal, () => error);
  }
}
