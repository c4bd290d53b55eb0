// A local model hub on loopback that answers like huggingface.co: files at
// `/<repo>/resolve/<revision>/<path>` answer 302 with `X-Linked-Size`, `X-Linked-Etag: "<sha256>"`
// and `Location: /cdn/<sha256>`, and `/cdn/<sha256>` serves the bytes with Range support (206 with
// Content-Range, 416 past the end). `options` bends it for one test at a time: a connection cut
// after K bytes, a wrong etag or size, slow chunks, no linked headers, an error status. It closes
// when the test ends. Like the real hub it also lists a repository's files
// (`/api/models/<owner>/<name>/tree/<revision>`, with `lfs.oid` the sha256) and keeps gated
// repositories that answer 401 without the right bearer token; `cdnOrigin` sends the bytes to
// another origin (the CDN of the real hub is another host), and every request's Host and
// Authorization are recorded, so that a test sees where a token went.
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Test } from 'tap';

export interface HubOptions {
  /** Cut the connection after this many body bytes of the next byte answer, then forget it (once). */
  cutAfter: number | null;
  /** `X-Linked-Etag` to send instead of `"<sha256>"` (a wrong one, a `W/` one). */
  etag: string | null;
  /** `X-Linked-Size` to send instead of the real size. */
  linkedSize: number | null;
  /** Leave out `X-Linked-Size` and `X-Linked-Etag` (a plain web server; Content-Length only). */
  linkedHeaders: boolean;
  /** Answer resolve requests with this status (404, 500, …) instead of the file. */
  status: number | null;
  /** Resolve answers 200 with the bytes itself instead of redirecting to the CDN. */
  redirect: boolean;
  /** The redirect's Location is absolute (`http://127.0.0.1:<port>/cdn/…`) instead of a path. */
  absoluteLocation: boolean;
  /** Honour Range; false answers 200 with the whole file to every request, as some mirrors do. */
  ranges: boolean;
  /** Bytes per written chunk, and the pause after each (slow serving, for cancel tests). */
  chunkBytes: number;
  chunkDelayMs: number;
  /** The byte answer has no Content-Length and never ends: after the file, zeros follow until the client leaves (a hub that lies). */
  endless: boolean;
  /** Redirect resolve requests to this Location instead of the hub's CDN (a `data:` URL, another host). */
  location: string | null;
  /**
   * While set, a byte answer sends its first chunk and then waits for this promise before each
   * further one: a download that is surely still running when the test acts on it, however slow
   * the machine (a cancel test resolves it once it has cancelled).
   */
  gate: Promise<void> | null;
  /** The CDN's origin in the redirect (e.g. `http://localhost:<port>`, another origin on the same server) instead of the hub's own path. */
  cdnOrigin: string | null;
}

export interface HubRequest {
  method: string;
  /** Path and query, as received. */
  url: string;
  /** The Range header, if any. */
  range: string | undefined;
  /** The Host header: which origin was asked. */
  host: string | undefined;
  /** The Authorization header, if any. */
  authorization: string | undefined;
}

export interface HubFileEntry {
  /** The resolve URL of the file on this hub. */
  url: string;
  size: number;
  sha256: string;
}

export interface Hub {
  /** `http://127.0.0.1:<port>`, the hub's root (SERVICE_DECK_ENHANCER_HUB). */
  url: string;
  /** Publishes `bytes` at `/<repo>/resolve/<revision>/<path>`. */
  put(repo: string, revision: string, path: string, bytes: Uint8Array): HubFileEntry;
  /** Mutable: tests change it between and during downloads. */
  options: HubOptions;
  /** Every request received, in order. */
  requests: HubRequest[];
  /** Body bytes written in byte answers so far. */
  sent: () => number;
  /** Makes a repository gated: its files and tree answer 401 without `Authorization: Bearer <token>`. */
  gate(repo: string, token: string): void;
}

export const DEFAULT_HUB_OPTIONS: Readonly<HubOptions> = {
  cutAfter: null,
  etag: null,
  linkedSize: null,
  linkedHeaders: true,
  status: null,
  redirect: true,
  absoluteLocation: false,
  ranges: true,
  chunkBytes: 64 * 1024,
  chunkDelayMs: 0,
  endless: false,
  location: null,
  gate: null,
  cdnOrigin: null,
};

function waitDrain(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done).off('close', done);
      resolve();
    };
    res.on('drain', done).on('close', done);
  });
}

/** Writes `bytes` in chunks with backpressure, cutting the connection after `options.cutAfter`; endless: zeros after them. */
async function sendBody(res: ServerResponse, bytes: Buffer, options: HubOptions, counted: (n: number) => void): Promise<void> {
  const cut = options.cutAfter;
  options.cutAfter = null;
  let sent = 0;
  const zeros = Buffer.alloc(options.chunkBytes);
  while ((sent < bytes.length || options.endless) && !res.destroyed) {
    const end = Math.min(sent + options.chunkBytes, cut ?? Infinity);
    const chunk = sent < bytes.length ? bytes.subarray(sent, Math.min(bytes.length, end)) : zeros.subarray(0, end - sent);
    const ok = res.write(chunk);
    counted(chunk.length);
    sent += chunk.length;
    if (cut !== null && sent >= cut) {
      res.write('', () => res.socket?.destroy());
      return;
    }
    if (!ok) await waitDrain(res);
    if (options.chunkDelayMs > 0) await sleep(options.chunkDelayMs);
    if (options.gate) await options.gate;
  }
  res.end();
}

/** The bytes answer: whole (200), a range (206) or 416 past the end; HEAD gets the headers only. */
async function serveBytes(req: IncomingMessage, res: ServerResponse, bytes: Buffer, options: HubOptions, counted: (n: number) => void): Promise<void> {
  const match = options.ranges ? req.headers.range?.match(/^bytes=(\d+)-(\d*)$/) : undefined;
  let start = 0;
  let end = bytes.length - 1;
  if (match) {
    start = Number(match[1]);
    if (match[2]) end = Math.min(end, Number(match[2]));
    if (start >= bytes.length || start > end) {
      res.writeHead(416, { 'content-range': `bytes */${bytes.length}` }).end();
      return;
    }
    res.writeHead(206, { 'content-range': `bytes ${start}-${end}/${bytes.length}`, ...(options.endless ? {} : { 'content-length': end - start + 1 }), 'accept-ranges': 'bytes' });
  } else {
    res.writeHead(200, { ...(options.endless ? {} : { 'content-length': bytes.length }), 'accept-ranges': 'bytes', 'content-type': 'application/octet-stream' });
  }
  if (req.method === 'HEAD') res.end();
  else await sendBody(res, bytes.subarray(start, end + 1), options, counted);
}

/** Starts a hub on 127.0.0.1 (or `host`) with a free port; it is closed at the end of the test. */
export async function startHub(t: Test, host = '127.0.0.1'): Promise<Hub> {
  const files = new Map<string, { bytes: Buffer; sha256: string }>();
  const gated = new Map<string, string>();
  /** Per `<repo>\0<revision>`: the paths published there, in order. */
  const trees = new Map<string, string[]>();
  const blobs = new Map<string, Buffer>();
  const options: HubOptions = { ...DEFAULT_HUB_OPTIONS };
  const requests: HubRequest[] = [];
  let root = '';
  let sent = 0;
  const counted = (n: number) => void (sent += n);

  const server = createServer((req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', range: req.headers.range, host: req.headers.host, authorization: req.headers.authorization });
    const pathname = decodeURIComponent(new URL(req.url ?? '/', 'http://hub').pathname);
    const repoOf = pathname.match(/^\/(?:api\/models\/)?([^/]+\/[^/]+)\/(?:resolve|tree)\//)?.[1];
    const token = repoOf === undefined ? undefined : gated.get(repoOf);
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      return void res.writeHead(401, { 'x-error-code': 'GatedRepo' }).end('Access to this repository is restricted.');
    }
    const tree = pathname.match(/^\/api\/models\/([^/]+\/[^/]+)\/tree\/([^/]+)$/);
    if (tree) {
      const paths = trees.get(`${tree[1]}\0${tree[2]}`);
      if (!paths) return void res.writeHead(404, { 'x-error-code': 'RevisionNotFound' }).end('no such revision');
      const list = paths.map((path) => {
        const file = files.get(`/${tree[1]}/resolve/${tree[2]}/${path}`)!;
        const lfs = path.endsWith('.gguf') || path.endsWith('.bin');
        return { type: 'file', oid: file.sha256.slice(0, 40), size: file.bytes.length, path, ...(lfs ? { lfs: { oid: file.sha256, size: file.bytes.length, pointerSize: 134 } } : {}) };
      });
      const dirs = [...new Set(paths.filter((p) => p.includes('/')).map((p) => p.slice(0, p.lastIndexOf('/'))))].map((path) => ({ type: 'directory', oid: '0'.repeat(40), size: 0, path }));
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify([...dirs, ...list]));
    }
    const blob = pathname.match(/^\/cdn\/([0-9a-f]{64})$/);
    if (blob) {
      const bytes = blobs.get(blob[1] ?? '');
      if (!bytes) return void res.writeHead(404).end('no such blob');
      return void serveBytes(req, res, bytes, options, counted);
    }
    const file = files.get(pathname);
    if (!file || options.status !== null) {
      const status = options.status ?? 404;
      return void res.writeHead(status, { 'x-error-code': status === 404 ? 'EntryNotFound' : 'ServerError' }).end(`status ${status}`);
    }
    const headers: Record<string, string | number> = {};
    if (options.linkedHeaders) {
      headers['x-linked-size'] = options.linkedSize ?? file.bytes.length;
      headers['x-linked-etag'] = options.etag ?? `"${file.sha256}"`;
    }
    if (!options.redirect) {
      for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
      return void serveBytes(req, res, file.bytes, options, counted);
    }
    headers.location = options.location ?? `${options.cdnOrigin ?? (options.absoluteLocation ? root : '')}/cdn/${file.sha256}`;
    res.writeHead(302, headers).end();
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const address = server.address();
  root = `http://${host}:${typeof address === 'object' && address ? address.port : 0}`;
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );

  return {
    url: root,
    options,
    requests,
    sent: () => sent,
    gate(repo, token) {
      gated.set(repo, token);
    },
    put(repo, revision, path, bytes) {
      const buffer = Buffer.from(bytes);
      const sha256 = createHash('sha256').update(buffer).digest('hex');
      const key = `/${repo}/resolve/${revision}/${path}`;
      if (!files.has(key)) trees.set(`${repo}\0${revision}`, [...(trees.get(`${repo}\0${revision}`) ?? []), path]);
      files.set(key, { bytes: buffer, sha256 });
      blobs.set(sha256, buffer);
      return { url: `${root}/${repo}/resolve/${revision}/${path}`, size: buffer.length, sha256 };
    },
  };
}

/**
 * Writes `recipes.json` into `dir` for prompt enhancers of `repo` (SERVICE_DECK_ENHANCER_RECIPES):
 * t2i takes `tiny-Q4.gguf`, i2i that model and `mmproj/tiny-mmproj.gguf`, both at 2048 tokens.
 */
export async function writeTinyRecipes(dir: string, repo: string): Promise<string> {
  const file = path.join(dir, 'recipes.json');
  const model = { path: 'tiny-Q4.gguf', role: 'model' };
  await writeFile(
    file,
    JSON.stringify({
      t2i: { repo, revision: 'main', files: [model], context: 2048 },
      i2i: { repo, revision: 'main', files: [model, { path: 'mmproj/tiny-mmproj.gguf', role: 'mmproj' }], context: 2048 },
    }),
  );
  return file;
}
