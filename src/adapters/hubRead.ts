// Reading a model hub without downloading (CONTRACT section 10): a repository's file list from the
// tree API (`<hub>/api/models/<owner>/<name>/tree/<revision>`), and a file's first bytes with HTTP
// range requests, so that a GGUF header can be read before the weights are fetched. Every request
// goes the way of the hub download (hubDownload.ts): redirects followed by hand under the same rule
// (http(s) only, never further in than the hub), every host resolved once per read and connected to
// at the address that was checked. The hub's token, when there is one, goes to the hub's own origin
// only: a redirect to another host (the CDN) never carries it, and no message names it.
import type { ByteSource } from './gguf.js';
import { ask, byteCount, contentRange, discard, HubError, networkError, PinnedHosts, shown, statusError, systemResolve, tokenScope, type ResolveHost } from './hubDownload.js';

/** How one read reaches the hub. */
export interface HubAccess {
  /** The hub's root, e.g. https://huggingface.co. */
  hub: string;
  /** Sent as `Authorization: Bearer <token>` to the hub's origin, and nowhere else. */
  token?: string | undefined;
  signal?: AbortSignal | undefined;
  /** How host names resolve (tests give a stand-in for DNS). */
  resolveHost?: ResolveHost | undefined;
}

/** One file of a repository as the tree API lists it. */
export interface HubTreeFile {
  path: string;
  size: number;
  /** `lfs.oid`, the file's sha256, when the hub stores it with LFS; else null. */
  sha256: string | null;
}

/** The most bytes a tree listing may take (the real hub's pages are tens of KiB). */
const MAX_TREE_BYTES = 16 * 1024 * 1024;
/** The most pages of a tree listing followed (`Link: <...>; rel="next"`). */
const MAX_TREE_PAGES = 50;
const SHA256 = /^[0-9a-f]{64}$/;

/** Reads a body as text, at most `max` bytes: a longer one is refused, never kept. */
async function boundedText(body: ReadableStream<Uint8Array> | null, max: number, what: string): Promise<string> {
  if (body === null) return '';
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel().catch(() => undefined);
      throw new HubError('size_mismatch', `${what} is larger than ${max} bytes: refused`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The `rel="next"` target of a Link header, resolved against `base`. */
function nextLink(link: string | null, base: URL): URL | null {
  const match = link?.match(/<([^>]+)>\s*;\s*rel="?next"?/);
  return match?.[1] ? new URL(match[1], base) : null;
}

/** The URL of a repository's tree at `revision` (every segment escaped). */
export function treeUrl(hub: string, repo: string, revision: string): URL {
  const base = hub.endsWith('/') ? hub : `${hub}/`;
  const repoPath = repo.split('/').map(encodeURIComponent).join('/');
  return new URL(`api/models/${repoPath}/tree/${encodeURIComponent(revision)}?recursive=true`, base);
}

/** The URL of a file at `revision`: `<hub>/<repo>/resolve/<revision>/<path>` (every segment escaped). */
export function resolveUrl(hub: string, repo: string, revision: string, file: string): URL {
  const base = hub.endsWith('/') ? hub : `${hub}/`;
  const escaped = (value: string) => value.split('/').map(encodeURIComponent).join('/');
  return new URL(`${escaped(repo)}/resolve/${encodeURIComponent(revision)}/${escaped(file)}`, base);
}

/** A repository's files (directories left out), following the listing's pages on the hub's own origin. */
export async function listHubTree(access: HubAccess, repo: string, revision: string): Promise<HubTreeFile[]> {
  const hub = new URL(access.hub);
  const pinned = new PinnedHosts(access.resolveHost ?? systemResolve);
  const files: HubTreeFile[] = [];
  try {
    let page: URL | null = treeUrl(access.hub, repo, revision);
    for (let count = 0; page !== null; count += 1) {
      if (count >= MAX_TREE_PAGES) throw new HubError('http_status', `${shown(treeUrl(access.hub, repo, revision))}: more than ${MAX_TREE_PAGES} pages`);
      const { response, url } = await ask(page.href, 'GET', { accept: 'application/json' }, pinned, access.signal, { hub, ...tokenScope(access.token) });
      if (!response.ok) {
        await discard(response);
        throw statusError(response, url, page);
      }
      const text = await boundedText(response.body as ReadableStream<Uint8Array> | null, MAX_TREE_BYTES, `the tree of ${repo}`).catch((error: unknown) => {
        throw error instanceof HubError ? error : networkError(error, url);
      });
      let entries: unknown;
      try {
        entries = JSON.parse(text);
      } catch {
        throw new HubError('http_status', `${shown(url)} answered something that is not JSON`);
      }
      if (!Array.isArray(entries)) throw new HubError('http_status', `${shown(url)} answered JSON that is not a list of files`);
      for (const entry of entries as Array<Record<string, unknown>>) {
        if (entry?.type !== 'file' || typeof entry.path !== 'string') continue;
        const lfs = entry.lfs as Record<string, unknown> | undefined;
        const size = typeof lfs?.size === 'number' ? lfs.size : entry.size;
        const oid = typeof lfs?.oid === 'string' ? lfs.oid.toLowerCase() : null;
        files.push({ path: entry.path, size: typeof size === 'number' && Number.isSafeInteger(size) && size >= 0 ? size : 0, sha256: oid !== null && SHA256.test(oid) ? oid : null });
      }
      const next = nextLink(response.headers.get('link'), url);
      // Pages are followed on the hub's own origin only.
      page = next !== null && next.origin === hub.origin ? next : null;
    }
    return files;
  } finally {
    await pinned.close();
  }
}

/** A hub file opened for range reads: its size, a ByteSource over it, and the bytes received so far. */
export interface HubRangeFile extends ByteSource {
  size: number;
  /** Body bytes received from the hub so far. */
  received(): number;
  close(): Promise<void>;
}

/**
 * Opens `<hub>/<repo>/resolve/<revision>/<path>` for range reads: one HEAD request for its size
 * (`X-Linked-Size` of the resolve answer, else the final answer's `Content-Length`) and where the
 * bytes are (the redirect's target, asked directly from then on); each read is then one request
 * `Range: bytes=<position>-<end>`, of which no more than the asked bytes are taken (a 200 answer,
 * from a server that ignores Range, is taken only from the start and cut after them).
 */
export async function openHubRange(access: HubAccess, url: URL): Promise<HubRangeFile> {
  const hub = new URL(access.hub);
  const pinned = new PinnedHosts(access.resolveHost ?? systemResolve);
  try {
    const head = await ask(url.href, 'HEAD', { 'accept-encoding': 'identity' }, pinned, access.signal, { hub, ...tokenScope(access.token) });
    await discard(head.response);
    if (!head.response.ok) throw statusError(head.response, head.url, url);
    const size = head.linked.size ?? byteCount(head.response.headers.get('content-length'));
    if (size === null) throw new HubError('size_unknown', `${shown(url)}: the hub states no size (neither X-Linked-Size nor Content-Length)`);
    const where = head.url;
    let received = 0;
    return {
      size,
      received: () => received,
      close: () => pinned.close(),
      async read(buffer, offset, length, position) {
        if (length <= 0 || position >= size) return { bytesRead: 0 };
        const end = Math.min(position + length, size) - 1;
        const { response, url: answered } = await ask(where.href, 'GET', { 'accept-encoding': 'identity', range: `bytes=${position}-${end}` }, pinned, access.signal, { hub, ...tokenScope(access.token) });
        if (response.status === 206) {
          const range = contentRange(response.headers.get('content-range'));
          if (range?.start !== position) {
            await discard(response);
            throw new HubError('http_status', `${shown(answered)} answered 206 with ${response.headers.get('content-range') ?? 'no Content-Range'} to Range bytes=${position}-${end}`);
          }
        } else if (!(response.status === 200 && position === 0)) {
          await discard(response);
          if (response.ok) throw new HubError('http_status', `${shown(answered)} does not answer range requests (${response.status} to Range bytes=${position}-${end})`);
          throw statusError(response, answered, url);
        }
        if (response.body === null) return { bytesRead: 0 };
        const reader = (response.body as ReadableStream<Uint8Array>).getReader();
        const want = end - position + 1;
        let filled = 0;
        try {
          while (filled < want) {
            const { value, done } = await reader.read();
            if (done) break;
            const take = Math.min(value.byteLength, want - filled);
            buffer.set(value.subarray(0, take), offset + filled);
            filled += take;
            received += value.byteLength;
          }
        } catch (error) {
          throw error instanceof HubError ? error : access.signal?.aborted ? new HubError('cancelled', 'cancelled', { cause: error }) : networkError(error, answered);
        } finally {
          await reader.cancel().catch(() => undefined);
        }
        return { bytesRead: filled };
      },
    };
  } catch (error) {
    await pinned.close();
    throw error;
  }
}
