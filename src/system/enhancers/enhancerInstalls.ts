// Installing the prompt enhancers (CONTRACT section 8): one install at a time, file by file from
// the hub with progress (bytes done and total, for the status and the console), into the store
// shared by both tasks (enhancerStore.ts beside it): a file already there and verified moves no byte
// and counts as done from the start; the others are resumed from a partial file, checked against
// the hub's size and sha256, after a check of the free disk space for the bytes still to fetch
// (systeminformation's view of the filesystem holding the store). Cancel stops the download and
// removes the partial files, and the complete files that the other task does not use. Where an
// install stands is kept in `install.json`: a restart in the middle leaves `failed` with
// "interrupted by a restart", and installing again resumes from the partial file. Only
// `installed.json`, written last, makes a task installed. A file a model pull already holds,
// verified (the same size and sha256), is hard-linked into the store instead of downloaded again;
// the hub's token, when the service has one for this hub, goes to the hub's origin only.
import { rm, stat } from 'node:fs/promises';
import { EventEmitter } from 'eventemitter3';
import { downloadHubFile, HubError, probeHubFile, tokenScope, type AskScope, type HubFile } from '../../adapters/hubDownload.js';
import {
  ENHANCER_TASKS,
  installFile,
  installedFile,
  readInstalled,
  storeDir,
  storedPath,
  taskDir,
  type EnhancerTask,
  type Recipe,
  type Recipes,
  type StoreKey,
} from '../../store/enhancers.js';
import { ensurePrivateDir, linkOrCopy, readJsonFile, writeJsonAtomic, type VerifiedCopies } from '../../store/files.js';
import { EnhancerStore, type Verified } from './enhancerStore.js';
import type { Logger } from '../observe/log.js';
import type { InstallPlan, InstallView } from '../observe/console.types.js';

/**
 * Free bytes on the filesystem that holds `dir` itself (statfs of the folder: a state directory on
 * its own mount is read there, not on the mount above it), or null when it cannot be read. Asked
 * before an install and again and again during it.
 */
export type FreeSpace = (dir: string) => Promise<number | null>;

/** Room kept free beyond the download itself (the state directory still has to be written). */
export const DISK_MARGIN_BYTES = 512 * 1024 * 1024;

/** The installed enhancer of a task, as the enhancer worker starts it. */
export interface InstalledEnhancer {
  repo: string;
  model: string;
  mmproj: string | null;
  context: number;
}

/** The context of an installed enhancer whose recipe has since been replaced by another. */
const DEFAULT_CONTEXT = 8192;

export type InstallStart = { ok: true } | { ok: false; code: 'install_running'; message: string };

function urlOf(hub: string, recipe: Recipe, file: string): string {
  const encoded = file.split('/').map(encodeURIComponent).join('/');
  return `${hub.replace(/\/+$/, '')}/${recipe.repo}/resolve/${encodeURIComponent(recipe.revision)}/${encoded}`;
}

const keysOf = (recipe: Recipe): StoreKey[] => recipe.files.map((f) => ({ repo: recipe.repo, revision: recipe.revision, path: f.path }));
const sizeOf = async (file: string) => (await stat(file).catch(() => null))?.size ?? 0;
const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(1)} GiB`;

export class EnhancerInstalls extends EventEmitter<{ change: [] }> {
  readonly #views = new Map<EnhancerTask, InstallView>();
  #running: { task: EnhancerTask; controller: AbortController; done: Promise<void> } | null = null;
  /** The writes of `install.json`, one after the other. */
  #persisted: Promise<void> = Promise.resolve();

  private constructor(
    readonly dir: string,
    readonly recipes: Recipes,
    readonly hub: string,
    private readonly room: FreeSpace,
    private readonly log: Logger,
    private readonly store: EnhancerStore,
    private readonly scope: AskScope,
    private readonly shared: VerifiedCopies | undefined,
  ) {
    super();
  }

  /**
   * Moves an install of the layout before the store into it, then reads where each task stands; an
   * install a restart cut off becomes `failed`, resumable.
   */
  static async open(options: {
    dir: string;
    recipes: Recipes;
    hub: string;
    room: FreeSpace;
    log: Logger;
    /** Sent as `Authorization: Bearer` to the hub's origin only (gated repositories). */
    token?: string | undefined;
    /** Verified files held elsewhere (the model pulls), linked instead of downloaded. */
    shared?: VerifiedCopies;
  }): Promise<EnhancerInstalls> {
    await ensurePrivateDir(options.dir);
    const store = await EnhancerStore.open(options.dir);
    await store.migrate(options.recipes, options.log);
    const installs = new EnhancerInstalls(options.dir, options.recipes, options.hub, options.room, options.log, store, tokenScope(options.token), options.shared);
    for (const task of ENHANCER_TASKS) {
      const recipe = options.recipes[task];
      const view: InstallView = { repo: recipe.repo, state: 'not_installed', bytes_done: 0, bytes_total: null, error: null, file: null };
      const installed = await readInstalled(options.dir, task);
      if (installed && installed.repo === recipe.repo && installed.revision === recipe.revision) {
        const total = installed.files.reduce((sum, f) => sum + f.size, 0);
        Object.assign(view, { state: 'installed', bytes_done: total, bytes_total: total });
      } else {
        const saved = (await readJsonFile(installFile(options.dir, task)).catch(() => undefined)) as Partial<InstallView> | undefined;
        if (saved?.repo === recipe.repo && (saved.state === 'installing' || saved.state === 'failed')) {
          const done = await installs.#bytesOnDisk(recipe);
          const interrupted = saved.state === 'installing';
          Object.assign(view, {
            state: 'failed',
            bytes_done: done,
            bytes_total: saved.bytes_total ?? null,
            error: interrupted ? `interrupted by a restart at ${gib(done)}: install again to resume from there` : (saved.error ?? 'failed'),
          });
        } else if (saved?.repo === recipe.repo && saved.state === 'cancelled') {
          view.state = 'cancelled';
        }
      }
      installs.#views.set(task, view);
    }
    return installs;
  }

  /** A verified file of the store with this size and sha256 (VerifiedCopies: a model pull links it instead of downloading). */
  verifiedCopy(file: { size: number; sha256: string }): string | null {
    return this.store.verifiedCopy(file);
  }

  view(): Record<EnhancerTask, InstallView> {
    return { t2i: { ...this.#views.get('t2i')! }, i2i: { ...this.#views.get('i2i')! } };
  }

  /**
   * What a task has installed, as the enhancer runs it: the repository, the files (absolute paths;
   * every one checked present with its size) and the context its recipe gives; null when nothing is.
   */
  async installed(task: EnhancerTask): Promise<InstalledEnhancer | null> {
    const installed = await readInstalled(this.dir, task);
    if (!installed) return null;
    const at = (role: 'model' | 'mmproj') => installed.files.find((f) => f.role === role)?.at ?? null;
    const model = at('model');
    const recipe = this.recipes[task];
    const context = recipe.repo === installed.repo ? recipe.context : DEFAULT_CONTEXT;
    return model ? { repo: installed.repo, model, mmproj: at('mmproj'), context } : null;
  }

  /** What installing `task` would download now, and whether it fits the free disk (see InstallPlan). */
  async plan(task: EnhancerTask, signal?: AbortSignal): Promise<InstallPlan> {
    const recipe = this.recipes[task];
    const files: InstallPlan['files'] = [];
    let hubError: string | null = null;
    for (const file of recipe.files) {
      const probe = await probeHubFile(urlOf(this.hub, recipe, file.path), signal, undefined, this.scope).catch((error: unknown) => {
        if (!(error instanceof HubError) || error.code === 'cancelled' || signal?.aborted) throw error;
        hubError ??= `${file.path}: ${error.message}`;
        return { size: null };
      });
      const stored = storedPath(this.dir, { repo: recipe.repo, revision: recipe.revision, path: file.path });
      const complete = stored === null ? 0 : await sizeOf(stored);
      const onDisk = probe.size !== null && complete === probe.size ? complete : stored === null ? 0 : Math.min(await sizeOf(`${stored}.part`), probe.size ?? Infinity);
      files.push({ path: file.path, bytes: probe.size, bytes_on_disk: onDisk });
    }
    const unsized = files.filter((f) => f.bytes === null).map((f) => f.path);
    const total = unsized.length > 0 ? null : files.reduce((sum, f) => sum + (f.bytes ?? 0), 0);
    const onDisk = files.reduce((sum, f) => sum + f.bytes_on_disk, 0);
    const toDownload = total === null ? null : total - onDisk;
    const free = await this.room(storeDir(this.dir));
    const fits = toDownload === null || free === null ? null : free >= toDownload + DISK_MARGIN_BYTES;
    const reason =
      hubError !== null
        ? `the hub could not be asked what the install would download (${hubError})`
        : total === null
        ? `the hub states no size for ${unsized.join(', ')}: the install would be refused, since its download could not be bounded`
        : free === null
          ? 'the free disk space could not be read'
          : fits
            ? null
            : `not enough free disk space in ${storeDir(this.dir)}: ${gib(toDownload! + DISK_MARGIN_BYTES)} needed (${gib(toDownload!)} to download and ${gib(DISK_MARGIN_BYTES)} to spare), ${gib(free)} free`;
    return { task, repo: recipe.repo, revision: recipe.revision, files, bytes_total: total, bytes_on_disk: onDisk, bytes_to_download: toDownload, free_bytes: free, margin_bytes: DISK_MARGIN_BYTES, fits, reason, hub_error: hubError };
  }

  /** Starts an install; it runs on its own (follow it in `view()` and the `change` event). */
  install(task: EnhancerTask): InstallStart {
    if (this.#running) return { ok: false, code: 'install_running', message: `The ${this.#running.task} enhancer is being installed: wait for it or cancel it.` };
    const controller = new AbortController();
    const done = this.#run(task, controller.signal).finally(() => {
      this.#running = null;
    });
    this.#running = { task, controller, done };
    return { ok: true };
  }

  /** Cancels the running install and removes its partial files; false when none runs. */
  async cancel(): Promise<boolean> {
    const running = this.#running;
    if (!running) return false;
    running.controller.abort(new HubError('cancelled', 'the install was cancelled'));
    await running.done;
    return true;
  }

  /** Stops a running install at shutdown: its partial file stays, to be resumed. */
  async stop(): Promise<void> {
    const running = this.#running;
    if (!running) return;
    running.controller.abort(new Error('the service is stopping'));
    await running.done;
  }

  /** Settles when the running install (if any) has ended (tests). */
  settled(): Promise<void> {
    return this.#running?.done ?? Promise.resolve();
  }

  #set(task: EnhancerTask, change: Partial<InstallView>, persist = true): void {
    const view = { ...this.#views.get(task)!, ...change };
    this.#views.set(task, view);
    this.emit('change');
    if (!persist) return;
    this.#persisted = this.#persisted
      .then(() => writeJsonAtomic(installFile(this.dir, task), view))
      .catch((error: unknown) => this.log.warn({ err: error, task }, 'enhancer install state not saved'));
  }

  /** Bytes of the recipe's files in the store: complete files, and partial ones. */
  async #bytesOnDisk(recipe: Recipe): Promise<number> {
    let done = 0;
    for (const key of keysOf(recipe)) {
      const file = storedPath(this.dir, key);
      if (file !== null) done += (await sizeOf(file)) || (await sizeOf(`${file}.part`));
    }
    return done;
  }

  /**
   * The file linked into the store from a verified copy held elsewhere (a model pull of the same
   * size and sha256), recorded as verified; null when there is none, or it could not be linked
   * (then it is downloaded). A copy, where no link can be made, first asks for room.
   */
  async #fromShared(key: StoreKey, dest: string, hub: HubFile, signal: AbortSignal): Promise<Verified | null> {
    if (hub.size === null || hub.sha256 === null || !this.shared) return null;
    const verified = { size: hub.size, sha256: hub.sha256 };
    const copy = this.shared(verified);
    if (copy === null) return null;
    const folder = storeDir(this.dir);
    const beforeCopy = async (bytes: number) => {
      const free = await this.room(folder);
      if (free !== null && free < bytes + DISK_MARGIN_BYTES) throw new HubError('disk_full', `not enough free disk space in ${folder} to copy ${copy}: ${gib(bytes + DISK_MARGIN_BYTES)} needed, ${gib(free)} free`);
    };
    try {
      const how = await linkOrCopy(copy, dest, { signal, beforeCopy });
      await this.store.record(key, dest, verified);
      this.log.info({ file: `${key.repo}/${key.path}`, from: copy, how }, 'prompt enhancer file taken from a model pull: nothing downloaded');
      return verified;
    } catch (error) {
      if (signal.aborted) throw error;
      this.log.warn({ err: error, file: `${key.repo}/${key.path}`, from: copy }, 'prompt enhancer file not taken from a model pull: it is downloaded');
      return null;
    }
  }

  async #run(task: EnhancerTask, signal: AbortSignal): Promise<void> {
    const recipe = this.recipes[task];
    const folder = storeDir(this.dir);
    this.#set(task, { repo: recipe.repo, state: 'installing', error: null, file: null, bytes_total: null });
    this.log.info({ task, repo: recipe.repo, revision: recipe.revision }, 'prompt enhancer install started');
    const started = Date.now();
    try {
      await ensurePrivateDir(taskDir(this.dir, task));
      await rm(installedFile(this.dir, task), { force: true });
      // What the hub says of each file: the total, and the sizes the download is checked against.
      const probes: HubFile[] = [];
      for (const file of recipe.files) probes.push(await probeHubFile(urlOf(this.hub, recipe, file.path), signal, undefined, this.scope));
      // Without a stated size a download cannot be bounded: nothing is fetched.
      const unsized = recipe.files.filter((_, i) => probes[i]?.size === null).map((f) => f.path);
      if (unsized.length > 0) throw new HubError('size_unknown', `the hub states no size for ${unsized.join(', ')} (neither X-Linked-Size nor Content-Length): the install is refused, since its download could not be bounded`);
      const total = probes.reduce((sum, p) => sum + (p.size ?? 0), 0);
      // Each file is in the store and verified (nothing to fetch: the other task's install, or an
      // earlier attempt, brought it), or to be fetched, resuming its partial file.
      const plan: Array<{ file: Recipe['files'][number]; key: StoreKey; dest: string; kept: Verified | null }> = [];
      let already = 0;
      for (const [i, file] of recipe.files.entries()) {
        const key = { repo: recipe.repo, revision: recipe.revision, path: file.path };
        const dest = await this.store.place(key);
        const kept = (await this.store.verified(key, dest, probes[i]!, signal, () => this.#set(task, { file: file.path }, false))) ?? (await this.#fromShared(key, dest, probes[i]!, signal));
        if (kept) await rm(`${dest}.part`, { force: true });
        already += kept ? kept.size : await sizeOf(`${dest}.part`);
        plan.push({ file, key, dest, kept });
      }
      this.#set(task, { bytes_total: total, bytes_done: already, file: null });
      const free = await this.room(folder);
      const needed = total - already + DISK_MARGIN_BYTES;
      if (free !== null && free < needed) {
        throw new HubError('disk_full', `not enough free disk space in ${folder}: ${gib(needed)} needed (${gib(total - already)} to download and ${gib(DISK_MARGIN_BYTES)} to spare), ${gib(free)} free`);
      }
      // During the download the disk may fill from elsewhere: it stops while DISK_MARGIN_BYTES are still free.
      const checkRoom = async (toCome: number) => {
        const now = await this.room(folder);
        if (now !== null && now < toCome + DISK_MARGIN_BYTES) {
          throw new HubError('disk_full', `the disk holding ${folder} is filling up during the install: ${gib(toCome)} still to download and ${gib(DISK_MARGIN_BYTES)} to spare, ${gib(now)} free; the partial download was removed`);
        }
      };
      const record: Array<{ path: string; role: 'model' | 'mmproj'; size: number; sha256: string }> = [];
      let before = 0;
      let fetched = 0;
      for (const { file, key, dest, kept } of plan) {
        if (kept) {
          before += kept.size;
          record.push({ path: file.path, role: file.role, ...kept });
          continue;
        }
        this.#set(task, { file: file.path }, false);
        const got = await downloadHubFile({
          url: urlOf(this.hub, recipe, file.path),
          dest,
          signal,
          scope: this.scope,
          checkRoom,
          onProgress: (done) => this.#set(task, { bytes_done: before + done }, false),
        });
        const sha256 = got.sha256 ?? '';
        await this.store.record(key, dest, { size: got.bytes, sha256 });
        before += got.bytes;
        fetched += got.bytes;
        record.push({ path: file.path, role: file.role, size: got.bytes, sha256 });
      }
      await writeJsonAtomic(installedFile(this.dir, task), { repo: recipe.repo, revision: recipe.revision, files: record, installed_at: new Date().toISOString() });
      this.#set(task, { state: 'installed', bytes_done: before, bytes_total: before, file: null, error: null });
      const seconds = (Date.now() - started) / 1000;
      this.log.info(
        { task, repo: recipe.repo, bytes: before, bytes_fetched: fetched, bytes_shared: before - fetched, seconds, mib_per_s: Math.round((fetched / 2 ** 20 / Math.max(seconds, 0.001)) * 10) / 10 },
        'prompt enhancer installed',
      );
    } catch (error) {
      // Only cancel() aborts with a HubError; a stop aborts with a plain Error and keeps the partial files.
      const cancelled = signal.aborted && signal.reason instanceof HubError && signal.reason.code === 'cancelled';
      if (cancelled) {
        // Cancel: nothing of this install stays (partial files, complete files no other task uses, records).
        await this.#persisted;
        await this.store.removeUnused(keysOf(recipe));
        const records = taskDir(this.dir, task);
        await rm(records, { recursive: true, force: true });
        await ensurePrivateDir(records);
        this.#set(task, { state: 'cancelled', bytes_done: 0, file: null, error: null });
        this.log.info({ task }, 'prompt enhancer install cancelled');
        return;
      }
      const message = signal.aborted && !(signal.reason instanceof HubError) ? 'interrupted: the service stopped; install again to resume' : (error as Error).message;
      this.#set(task, { state: 'failed', file: null, error: message, bytes_done: await this.#bytesOnDisk(recipe) });
      this.log.warn({ task, repo: recipe.repo, code: error instanceof HubError ? error.code : undefined, error: message }, 'prompt enhancer install failed');
    } finally {
      await this.#persisted;
    }
  }
}
