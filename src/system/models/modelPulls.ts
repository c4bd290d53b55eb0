// Model pulls (CONTRACT section 10): a hub's model file downloaded into
// `<state>/models/<owner>/<name>/<path>` (folders 0700, files 0600), whatever SERVICE_DECK_MODEL_DIRS
// lists first, through the one hub downloader (src/adapters/hubDownload.ts: size and sha256
// checked before the file takes its name, a partial file resumed with Range, redirects judged,
// the hub's token to the hub's own origin only). Here the pulls are run:
// - before a pull is accepted the hub states the file's size and sha256 (a HEAD of its resolve
//   URL), and the free disk, less what is still to come of every other pull, must hold what is
//   still to come of this one and DISK_MARGIN_BYTES: otherwise nothing is written, not a folder;
// - at most MAX_TRANSFERS pulls transfer at once; the others wait in the order they came
//   (`waiting`, their bytes on disk in `bytes_done`);
// - one pull per repository, revision and path: pulling it again restarts it under its id and
//   resumes its partial file; a done file whose stamp is unchanged is done again at once, no byte
//   moved. Two revisions of one path share its place: one pulled replaces the other's entry;
// - a cut connection is tried again after RETRY_DELAYS_MS, each attempt resuming with Range; the
//   count starts over after an attempt that brought bytes, and the last one failing fails the pull;
// - `pulls.json` keeps the pulls (atomic writes): at start a pull that was downloading resumes by
//   itself from its partial file (`start()`, once the listeners are up; `stop()` keeps the
//   partials). The ended ones are kept, newest first, MAX_ENDED of them;
// - one copy of a file with the prompt enhancers: a file their store holds verified with the same
//   size and sha256 is hard-linked into place (copied across filesystems) instead of downloaded,
//   and `verifiedCopy()` gives their installs a done pull's file whose stamp is unchanged;
// - pulls take no GPU reservation: they run beside the requests.
import { createHash, randomBytes } from 'node:crypto';
import { lstat, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventEmitter } from 'eventemitter3';
import { z } from 'zod';
import { downloadHubFile, hashPrefix, HubError, probeHubFile, tokenScope, type AskScope, type HubFile, type ResolveHost } from '../../adapters/hubDownload.js';
import { resolveUrl } from '../../adapters/hubRead.js';
import { SHA256_HEX } from '../../store/enhancers.js';
import { ensurePrivateDir, fileStamp, linkOrCopy, makePrivateFolders, readJsonFile, stampUnchanged, WriteQueue, writeJsonAtomic, type VerifiedCopies } from '../../store/files.js';
import { DISK_MARGIN_BYTES, type FreeSpace } from '../enhancers/enhancerInstalls.js';
import type { Logger } from '../observe/log.js';
import { formatOf } from './modelFiles.js';
import type { PullState, PullView } from '../observe/console.types.js';

// The pull's view is declared with the console's other views; its importers keep finding it here.
export type { PullState, PullView };

/** A file of a hub repository at a revision. */
export interface PullRequest {
  repo: string;
  revision: string;
  path: string;
}

export type PullStart = { ok: true; pull: PullView } | { ok: false; code: 'invalid_value' | 'pull_running' | 'insufficient_storage'; message: string };
export type PullCancel = { ok: true; pull: PullView } | { ok: false; code: 'pull_not_found' | 'pull_ended'; message: string };

/** Pulls that transfer at once; the others wait. */
export const MAX_TRANSFERS = 2;
/** The waits before the attempts after a cut connection. */
export const RETRY_DELAYS_MS: readonly number[] = [1_000, 2_000, 4_000, 8_000, 16_000];
/** Ended pulls kept in the record. */
export const MAX_ENDED = 50;
/** The span the rate is averaged over. */
const RATE_WINDOW_MS = 5_000;

/** The record of a pull: its view without what only a running pull has, with what the hub stated and the done file's stamp. */
const pullRecordSchema = z.object({
  id: z.string().regex(/^pull-[0-9a-f]{12}$/),
  repo: z.string(),
  revision: z.string().min(1),
  path: z.string(),
  state: z.enum(['downloading', 'done', 'failed', 'cancelled']),
  bytes_done: z.number().int().nonnegative(),
  bytes_total: z.number().int().nonnegative(),
  error: z.string().nullable(),
  file: z.string().nullable(),
  sha256: z.string().regex(SHA256_HEX).nullable(),
  /** The sha256 the hub stated when the pull last started; null when it gave none (then the size alone is checked). */
  expected_sha256: z.string().regex(SHA256_HEX).nullable(),
  /** The done file's stamp (fileStamp) when it was verified: unchanged, it is not hashed again. */
  stamp: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
type Pull = z.output<typeof pullRecordSchema>;

/** What a running pull has beside its record. */
interface Run {
  controller: AbortController;
  done: Promise<void>;
  /** Not yet given a transfer slot. */
  waiting: boolean;
  /** (time, bytes on disk) of the last RATE_WINDOW_MS of progress. */
  samples: Array<[number, number]>;
}

/** A file's verified size and sha256 (null: the hub gave none, the size alone was checked). */
interface Verified {
  size: number;
  sha256: string | null;
}

export interface ModelPullsOptions {
  /** `<state>/models`: where pulls land, and `pulls.json`. */
  dir: string;
  hub: string;
  /** Sent as `Authorization: Bearer` to the hub's origin only. */
  token: string | undefined;
  /** Free bytes of the filesystem holding `dir`. */
  room: FreeSpace;
  log: Logger;
  /** Verified files held elsewhere (the prompt enhancer store), linked instead of downloaded. */
  shared?: VerifiedCopies;
  /** Tests give a stand-in for DNS. */
  resolveHost?: ResolveHost;
  /** The waits before the attempts after a cut connection (default RETRY_DELAYS_MS; tests shorten them). */
  retryDelaysMs?: readonly number[];
}

/** Whether a path in a repository names a model file the service runs: a GGUF, or a whisper.cpp `ggml-*.bin`. */
export function pullable(repoPath: string): boolean {
  const format = formatOf(repoPath.split('/').pop() ?? '');
  return format === 'gguf' || format === 'whisper';
}

const plainSegment = (s: string) => s !== '' && s !== '.' && s !== '..' && !s.includes('\\') && !s.includes('\0');
const sameKey = (a: PullRequest, b: PullRequest) => a.repo === b.repo && a.revision === b.revision && a.path === b.path;
const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(1)} GiB`;
const now = () => new Date().toISOString();
const shown = (key: PullRequest) => `${key.repo}/${key.path} at ${key.revision}`;

/** The bytes of a regular file at `file`; 0 when there is none. */
async function bytesAt(file: string): Promise<number> {
  const info = await lstat(file).catch(() => null);
  return info?.isFile() ? info.size : 0;
}

/** Resolves when `promise` does; rejects with the signal's reason once it is aborted. */
function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** At most `size` holders at once, granted in the order they asked. */
class Slots {
  #free: number;
  readonly #queue: Array<() => void> = [];

  constructor(size: number) {
    this.#free = size;
  }

  /** Asks for a slot now: `granted` resolves in turn; `release()` gives it back, or leaves the queue. */
  take(): { granted: Promise<void>; release(): void } {
    let held = false;
    let released = false;
    let grant = () => {};
    const granted = new Promise<void>((resolve) => {
      grant = () => {
        held = true;
        resolve();
      };
    });
    if (this.#free > 0) {
      this.#free -= 1;
      grant();
    } else {
      this.#queue.push(grant);
    }
    return {
      granted,
      release: () => {
        if (released) return;
        released = true;
        if (!held) {
          this.#queue.splice(this.#queue.indexOf(grant), 1);
          return;
        }
        const next = this.#queue.shift();
        if (next) next();
        else this.#free += 1;
      },
    };
  }
}

export class ModelPulls extends EventEmitter<{ change: [] }> {
  /** Newest first. */
  #pulls: Pull[] = [];
  readonly #runs = new Map<string, Run>();
  /** Places whose pull is being asked of the hub, before it is an entry. */
  readonly #starting = new Set<string>();
  readonly #slots = new Slots(MAX_TRANSFERS);
  readonly #writes = new WriteQueue();
  /** The disk room checks and the entries they admit, one after the other. */
  readonly #reservations = new WriteQueue();
  readonly #scope: AskScope;
  readonly #retryDelays: readonly number[];
  #stopped = false;

  private constructor(private readonly options: ModelPullsOptions) {
    super();
    this.#scope = tokenScope(options.token);
    this.#retryDelays = options.retryDelaysMs ?? RETRY_DELAYS_MS;
  }

  get dir(): string {
    return this.options.dir;
  }

  get #recordFile(): string {
    return path.join(this.dir, 'pulls.json');
  }

  /** Reads `pulls.json`; a pull that was downloading waits for `start()` to resume it. */
  static async open(options: ModelPullsOptions): Promise<ModelPulls> {
    await ensurePrivateDir(options.dir);
    const pulls = new ModelPulls(options);
    await pulls.#load();
    return pulls;
  }

  async #load(): Promise<void> {
    const json = await readJsonFile(this.#recordFile).catch((error: unknown) => {
      this.options.log.warn({ err: error }, 'the model pulls record cannot be read: the pulls it listed are forgotten, their files stay');
      return undefined;
    });
    const entries = z.object({ pulls: z.array(z.unknown()) }).safeParse(json);
    for (const entry of entries.success ? entries.data.pulls : []) {
      const parsed = pullRecordSchema.safeParse(entry);
      if (!parsed.success) continue;
      const pull = parsed.data;
      const dest = this.#destination(pull);
      if (dest === null || this.#pulls.some((p) => p.id === pull.id || this.#destination(p) === dest)) continue;
      if (pull.state === 'downloading') pull.bytes_done = Math.min(await bytesAt(`${dest}.part`), pull.bytes_total);
      this.#pulls.push(pull);
    }
  }

  /** Resumes the pulls that were downloading when the service stopped, oldest first. */
  start(): void {
    for (const pull of [...this.#pulls].reverse()) {
      if (pull.state !== 'downloading' || this.#runs.has(pull.id)) continue;
      this.options.log.info({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path, bytes_done: pull.bytes_done, bytes_total: pull.bytes_total }, 'model pull resumed after a restart');
      this.#launch(pull);
    }
  }

  /** Stops every running pull at shutdown: partial files stay, and the record says downloading, to be resumed at the next start. */
  async stop(): Promise<void> {
    this.#stopped = true;
    const runs = [...this.#runs.values()];
    for (const run of runs) run.controller.abort(new Error('the service is stopping'));
    await Promise.all(runs.map((run) => run.done));
    await this.#writes.idle();
  }

  /** Settles once every pull running now has ended (tests). */
  async settled(): Promise<void> {
    await Promise.all([...this.#runs.values()].map((run) => run.done));
    await this.#writes.idle();
  }

  /** Every pull, newest first. */
  list(): PullView[] {
    return this.#pulls.map((pull) => this.#view(pull));
  }

  /** A done pull's file of this size and sha256, its stamp unchanged since it was verified (VerifiedCopies); null when none is. */
  verifiedCopy(file: { size: number; sha256: string }): string | null {
    const pull = this.#pulls.find((p) => p.state === 'done' && p.sha256 === file.sha256 && p.bytes_total === file.size && p.file !== null && stampUnchanged(p.file, p.stamp));
    return pull?.file ?? null;
  }

  /**
   * Starts pulling a file, or pulls it again: asks the hub its size and sha256 (a HubError when the
   * hub cannot be asked, refuses, or states no size) and reserves the disk room; then it runs on
   * its own (follow it in `list()` and the `change` event).
   */
  async pull(request: PullRequest, signal?: AbortSignal): Promise<PullStart> {
    const dest = this.#destination(request);
    if (dest === null) return { ok: false, code: 'invalid_value', message: `${request.path} is not a model file with a place under ${this.dir} (a .gguf, or a whisper ggml-*.bin, named by plain segments)` };
    if (this.#busy(dest)) return { ok: false, code: 'pull_running', message: `${request.repo}/${request.path} is being pulled: wait for it or cancel it.` };
    this.#starting.add(dest);
    try {
      const url = resolveUrl(this.options.hub, request.repo, request.revision, request.path).href;
      const hub = await probeHubFile(url, signal, this.options.resolveHost, this.#scope);
      if (hub.size === null) {
        throw new HubError('size_unknown', `the hub states no size for ${shown(request)} (neither X-Linked-Size nor Content-Length): the pull is refused, since its download could not be bounded`);
      }
      const size = hub.size;
      const pull = this.#pulls.find((p) => sameKey(p, request)) ?? this.#create(request);
      // A done file at that place, its stamp unchanged since it was verified and still the hub's size and sha256: done again at once.
      const onRecord = this.#pulls.find((p) => p.state === 'done' && p.file === dest && p.bytes_total === size && (hub.sha256 === null || p.sha256 === hub.sha256) && stampUnchanged(dest, p.stamp));
      if (onRecord) {
        this.#first(pull, dest);
        this.#change(pull, { state: 'done', bytes_done: size, bytes_total: size, error: null, file: dest, sha256: onRecord.sha256, expected_sha256: hub.sha256, stamp: onRecord.stamp }, true);
        this.options.log.info({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path, bytes: size, bytes_fetched: 0, from: 'disk' }, 'model pull done: the file was there, verified');
        return { ok: true, pull: this.#view(pull) };
      }
      // The partial file is resumed when it is of the same bytes: the pull that left it expected the same sha256.
      const owner = this.#pulls.find((p) => p.state !== 'done' && this.#destination(p) === dest);
      const resumable = owner !== undefined && owner.expected_sha256 === hub.sha256 && (hub.sha256 !== null || sameKey(owner, request));
      const onDisk = resumable ? Math.min(await bytesAt(`${dest}.part`), size) : 0;
      // A verified copy is linked: it takes no room (a copy across filesystems asks for its own).
      const linkable = hub.sha256 !== null && (this.options.shared?.({ size, sha256: hub.sha256 }) ?? null) !== null;
      // One reservation at a time: the room a pull was granted counts for the next one asked meanwhile.
      return await this.#reservations.run(async (): Promise<PullStart> => {
        const problem = await this.#roomProblem(pull.id, linkable ? 0 : size - onDisk, request);
        if (problem !== null) return { ok: false, code: 'insufficient_storage', message: problem };
        if (!resumable) await rm(`${dest}.part`, { force: true });
        this.#first(pull, dest);
        this.#change(pull, { state: 'downloading', bytes_done: onDisk, bytes_total: size, error: null, file: null, sha256: null, expected_sha256: hub.sha256, stamp: null }, true);
        this.options.log.info({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path, bytes_total: size, bytes_on_disk: onDisk }, 'model pull started');
        this.#launch(pull);
        return { ok: true, pull: this.#view(pull) };
      });
    } finally {
      this.#starting.delete(dest);
    }
  }

  /** Cancels a downloading pull: it stops, and its partial file is removed (a file already verified at its place stays). */
  async cancel(id: string): Promise<PullCancel> {
    const pull = this.#pulls.find((p) => p.id === id);
    if (!pull) return { ok: false, code: 'pull_not_found', message: `No model pull with id ${id}.` };
    if (pull.state !== 'downloading') return { ok: false, code: 'pull_ended', message: `The pull of ${pull.repo}/${pull.path} has ended (${pull.state}): there is nothing to cancel.` };
    const run = this.#runs.get(id);
    if (run) {
      run.controller.abort(new HubError('cancelled', 'the pull was cancelled'));
      await run.done;
    } else {
      await this.#cancelled(pull);
    }
    return { ok: true, pull: this.#view(pull) };
  }

  /** Where a pull's file lands: `<dir>/<owner>/<name>/<path>`; null for a key that has no place there (not plain, not a model file). */
  #destination(key: PullRequest): string | null {
    const repo = key.repo.split('/');
    const inRepo = key.path.split('/');
    if (repo.length !== 2 || ![...repo, ...inRepo].every(plainSegment) || !pullable(key.path) || key.revision === '') return null;
    const file = path.join(this.dir, ...repo, ...inRepo);
    const inside = path.relative(this.dir, file);
    return inside.startsWith('..') || path.isAbsolute(inside) ? null : file;
  }

  #busy(dest: string): boolean {
    return this.#starting.has(dest) || this.#pulls.some((p) => p.state === 'downloading' && this.#destination(p) === dest);
  }

  #create(request: PullRequest): Pull {
    const at = now();
    return {
      id: `pull-${randomBytes(6).toString('hex')}`,
      repo: request.repo,
      revision: request.revision,
      path: request.path,
      state: 'downloading',
      bytes_done: 0,
      bytes_total: 0,
      error: null,
      file: null,
      sha256: null,
      expected_sha256: null,
      stamp: null,
      created_at: at,
      updated_at: at,
    };
  }

  /** Puts `pull` first (it is the newest), in place of the entries of other revisions at its place (it replaces their file). */
  #first(pull: Pull, dest: string): void {
    this.#pulls = [pull, ...this.#pulls.filter((p) => p !== pull && this.#destination(p) !== dest)];
  }

  /** Bytes still to come of every downloading pull but `except`. */
  #toCome(except: string): number {
    return this.#pulls.filter((p) => p.state === 'downloading' && p.id !== except).reduce((sum, p) => sum + Math.max(0, p.bytes_total - p.bytes_done), 0);
  }

  /** Why `bytes` more, beside what the other pulls still bring and DISK_MARGIN_BYTES, do not fit the free disk; null when they do (or the free space is unknown). */
  async #roomProblem(id: string, bytes: number, key: PullRequest): Promise<string | null> {
    const free = await this.options.room(this.dir);
    const others = this.#toCome(id);
    if (free === null || free >= bytes + others + DISK_MARGIN_BYTES) return null;
    const beside = others > 0 ? ` beside ${gib(others)} still to come of other pulls` : '';
    return `not enough free disk space in ${this.dir} for ${shown(key)}: ${gib(bytes + DISK_MARGIN_BYTES)} needed (${gib(bytes)} to download and ${gib(DISK_MARGIN_BYTES)} to spare)${beside}, ${gib(free)} free`;
  }

  #view(pull: Pull): PullView {
    const run = this.#runs.get(pull.id);
    return {
      id: pull.id,
      repo: pull.repo,
      revision: pull.revision,
      path: pull.path,
      state: pull.state,
      bytes_done: pull.bytes_done,
      bytes_total: pull.bytes_total,
      error: pull.error,
      file: pull.file,
      rate_bytes_per_s: run && !run.waiting ? rateOf(run.samples) : null,
      waiting: pull.state === 'downloading' && (run?.waiting ?? true),
      sha256: pull.sha256,
      created_at: pull.created_at,
      updated_at: pull.updated_at,
    };
  }

  #change(pull: Pull, patch: Partial<Pull>, persist = false): void {
    Object.assign(pull, patch, { updated_at: now() });
    this.emit('change');
    if (persist) this.#save();
  }

  /** Writes `pulls.json` as it is when the write runs; the ended pulls beyond MAX_ENDED are let go first. */
  #save(): void {
    const dropped = new Set(this.#pulls.filter((p) => p.state !== 'downloading').slice(MAX_ENDED));
    this.#pulls = this.#pulls.filter((p) => !dropped.has(p));
    this.#writes.run(() => writeJsonAtomic(this.#recordFile, { pulls: this.#pulls })).catch((error: unknown) => this.options.log.warn({ err: error }, 'model pulls not saved'));
  }

  #launch(pull: Pull): void {
    if (this.#stopped) return;
    const run: Run = { controller: new AbortController(), done: Promise.resolve(), waiting: true, samples: [] };
    // The slot is asked for now, so that pulls transfer in the order they came.
    const slot = this.#slots.take();
    this.#runs.set(pull.id, run);
    run.done = this.#run(pull, run, slot.granted).finally(() => {
      slot.release();
      this.#runs.delete(pull.id);
      this.emit('change');
    });
  }

  /** A pull from its place being checked to its end: the file there already, a verified copy linked, or the download. */
  async #run(pull: Pull, run: Run, granted: Promise<void>): Promise<void> {
    const { signal } = run.controller;
    const dest = this.#destination(pull)!;
    const started = performance.now();
    try {
      const blocked = await makePrivateFolders(this.dir, path.relative(this.dir, path.dirname(dest)));
      if (blocked !== null) throw new HubError('unsafe_path', `${blocked} is not a folder (a symlink or a file): the pull is not written through it`);
      const expected: HubFile & { size: number } = { size: pull.bytes_total, sha256: pull.expected_sha256 };
      let from: 'disk' | 'shared' | 'hub' = 'disk';
      let got = await this.#there(dest, expected, signal);
      if (!got) {
        from = 'shared';
        got = await this.#linked(pull, dest, expected, signal);
      }
      let fetched = 0;
      if (!got) {
        from = 'hub';
        await unlessAborted(granted, signal);
        run.waiting = false;
        this.#change(pull, {});
        const kept = await bytesAt(`${dest}.part`);
        got = await this.#download(pull, run, dest, signal);
        fetched = got.size - kept;
      }
      await rm(`${dest}.part`, { force: true });
      this.#change(pull, { state: 'done', bytes_done: got.size, bytes_total: got.size, error: null, file: dest, sha256: got.sha256, stamp: fileStamp(dest) ?? null }, true);
      const seconds = (performance.now() - started) / 1000;
      const mibPerS = Math.round((fetched / 2 ** 20 / Math.max(seconds, 0.001)) * 10) / 10;
      this.options.log.info({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path, bytes: got.size, bytes_fetched: fetched, from, seconds: Math.round(seconds * 10) / 10, mib_per_s: mibPerS }, 'model pull done');
    } catch (error) {
      if (signal.aborted && signal.reason instanceof HubError && signal.reason.code === 'cancelled') {
        await this.#cancelled(pull);
        return;
      }
      // The service stops: the pull stays downloading on record, and resumes at the next start.
      if (signal.aborted) return;
      const message = error instanceof Error ? error.message : String(error);
      this.#change(pull, { state: 'failed', error: message, bytes_done: Math.min(await bytesAt(`${dest}.part`), pull.bytes_total) }, true);
      this.options.log.warn({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path, code: error instanceof HubError ? error.code : undefined, error: message }, 'model pull failed');
    }
  }

  async #cancelled(pull: Pull): Promise<void> {
    const dest = this.#destination(pull);
    if (dest !== null) await rm(`${dest}.part`, { force: true });
    this.#change(pull, { state: 'cancelled', bytes_done: 0, error: null }, true);
    this.options.log.info({ pull: pull.id, repo: pull.repo, revision: pull.revision, path: pull.path }, 'model pull cancelled');
  }

  /** The file at `dest` when it already is the expected one (hashed: a copy put there, a file left by an earlier pull); null otherwise. */
  async #there(dest: string, expected: HubFile & { size: number }, signal: AbortSignal): Promise<Verified | null> {
    const info = await lstat(dest).catch(() => null);
    if (!info?.isFile() || info.size !== expected.size || expected.sha256 === null) return null;
    const hash = createHash('sha256');
    await hashPrefix(hash, dest, info.size, signal);
    return hash.digest('hex') === expected.sha256 ? { size: info.size, sha256: expected.sha256 } : null;
  }

  /** A verified copy held elsewhere (the prompt enhancer store) linked to `dest`; null when there is none, or it could not be linked (then it is downloaded). */
  async #linked(pull: Pull, dest: string, expected: HubFile & { size: number }, signal: AbortSignal): Promise<Verified | null> {
    if (expected.sha256 === null || !this.options.shared) return null;
    const verified = { size: expected.size, sha256: expected.sha256 };
    const copy = this.options.shared(verified);
    if (copy === null) return null;
    const beforeCopy = async (bytes: number) => {
      const problem = await this.#roomProblem(pull.id, bytes, pull);
      if (problem !== null) throw new HubError('disk_full', problem);
    };
    try {
      const how = await linkOrCopy(copy, dest, { signal, beforeCopy });
      this.options.log.info({ pull: pull.id, from: copy, how }, 'model pull taken from the prompt enhancer store: nothing downloaded');
      return verified;
    } catch (error) {
      if (signal.aborted) throw error;
      this.options.log.warn({ err: error, pull: pull.id, from: copy }, 'model pull not taken from the prompt enhancer store: it is downloaded');
      return null;
    }
  }

  /** Downloads the file, trying again after a cut connection (RETRY_DELAYS_MS); each attempt resumes the partial file. */
  async #download(pull: Pull, run: Run, dest: string, signal: AbortSignal): Promise<Verified> {
    const url = resolveUrl(this.options.hub, pull.repo, pull.revision, pull.path).href;
    const checkRoom = async (toCome: number) => {
      const problem = await this.#roomProblem(pull.id, toCome, pull);
      if (problem !== null) throw new HubError('disk_full', `the disk is filling up during the pull: ${problem}; the partial download was removed`);
    };
    const onProgress = (done: number) => {
      const at = performance.now();
      run.samples = [...run.samples.filter(([t]) => at - t <= RATE_WINDOW_MS), [at, done]];
      this.#change(pull, { bytes_done: done });
    };
    let failures = 0;
    for (;;) {
      const before = await bytesAt(`${dest}.part`);
      try {
        const got = await downloadHubFile({ url, dest, signal, scope: this.#scope, checkRoom, onProgress, ...(this.options.resolveHost ? { resolveHost: this.options.resolveHost } : {}) });
        return { size: got.bytes, sha256: got.sha256 };
      } catch (error) {
        if (signal.aborted || !(error instanceof HubError) || error.code !== 'network') throw error;
        const kept = await bytesAt(`${dest}.part`);
        // An attempt that brought bytes was no failure to give up on: the count starts over.
        if (kept > before) failures = 0;
        const delay = this.#retryDelays[failures];
        if (delay === undefined) {
          const tried = failures > 0 ? `tried again ${failures} times, and each lost the connection: ` : '';
          throw new HubError('network', `${error.message} (${tried}pull it again to resume from ${gib(kept)})`, { cause: error });
        }
        failures += 1;
        run.samples = [];
        this.#change(pull, { bytes_done: kept });
        this.options.log.info({ pull: pull.id, attempt: failures, attempts: this.#retryDelays.length, delay_ms: delay, bytes_done: kept, error: error.message }, 'model pull lost its connection: it resumes');
        await sleep(delay, undefined, { signal });
      }
    }
  }
}

/** Bytes per second between the first and the last sample; null before two samples a moment apart. */
function rateOf(samples: Array<[number, number]>): number | null {
  const first = samples[0];
  const last = samples.at(-1);
  if (!first || !last || last[0] - first[0] < 200) return null;
  return Math.round(((last[1] - first[1]) * 1000) / (last[0] - first[0]));
}
