// The store of prompt enhancer files (CONTRACT section 8): one copy of each file per
// repository, revision and path, whichever tasks use it (store/enhancers.ts has the layout). Here
// the store is acted on:
// - where a file lands: inside `<state>/enhancers/files/`, in folders this code made (0700), never
//   through a symlink below that folder (the folder itself may be one, to put the store on another
//   disk);
// - whether a stored file is verified, so that an install reuses it without moving a byte: its
//   size and the hub's sha256 (when the hub gives one) equal what `files.json` recorded when it was
//   last hashed, and its stamp (inode, size, mtime) is unchanged since. Reading the file again
//   (20 GB) happens only when the stamp changed (a copy, a restore, a touch): it is kept when its
//   sha256 is still the one expected, fetched again otherwise;
// - what goes when an install is cancelled: its partial files, and its complete files that no
//   task's `installed.json` names (a file the other task uses stays);
// - at start, an install of the layout before the store (`<task>/<flattened path>`) is moved into
//   the store by rename (the same filesystem: nothing is copied), with the sha256 its
//   `installed.json` recorded; a second copy of a file already moved (both tasks had the model) is
//   removed when both records give the same sha256. What cannot be moved stays, and is read where
//   it is.
import { createHash } from 'node:crypto';
import { lstat, rename, rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { hashPrefix, HubError, type HubFile } from '../../adapters/hubDownload.js';
import {
  ENHANCER_TASKS,
  localName,
  readInstalledRecord,
  readStoreRecord,
  sameKey,
  SHA256_HEX,
  storeDir,
  storedPath,
  storeRecordFile,
  taskDir,
  type Recipes,
  type StoreKey,
  type StoredFile,
} from '../../store/enhancers.js';
import { ensurePrivateDir, fileStamp, makePrivateFolders, stampUnchanged, writeJsonAtomic } from '../../store/files.js';
import type { Logger } from '../observe/log.js';

/** What a verified file is: its size and sha256. */
export interface Verified {
  size: number;
  sha256: string;
}

const regularFile = async (file: string) => (await lstat(file).catch(() => null))?.isFile() === true;
const shown = (key: StoreKey) => `${key.repo}@${key.revision}:${key.path}`;

export class EnhancerStore {
  private constructor(
    readonly dir: string,
    private entries: StoredFile[],
  ) {}

  static async open(dir: string): Promise<EnhancerStore> {
    await ensurePrivateDir(storeDir(dir));
    return new EnhancerStore(dir, await readStoreRecord(dir));
  }

  /**
   * Where `key` lands, its folders made (0700). Refused (`unsafe_path`) when the key has no place
   * in the store, would leave it, or meets something other than a plain folder on the way.
   */
  async place(key: StoreKey): Promise<string> {
    const root = storeDir(this.dir);
    const file = storedPath(this.dir, key);
    const inside = file === null ? null : path.relative(root, file);
    if (file === null || inside === null || inside === '' || inside.startsWith('..') || path.isAbsolute(inside)) {
      throw new HubError('unsafe_path', `the recipe file ${JSON.stringify(key.path)} of ${key.repo} at ${JSON.stringify(key.revision)} would not land inside ${root}: refused`);
    }
    const blocked = await makePrivateFolders(root, path.dirname(inside));
    if (blocked !== null) throw new HubError('unsafe_path', `${blocked} is not a folder (a symlink or a file): the store is not written through it`);
    return file;
  }

  /**
   * The stored file of `key` at `file` when it is verified against what the hub says now (`hub`):
   * taken on its record when its stamp is unchanged, hashed again when the stamp changed. Null when
   * it is missing, of another size, or its bytes are not the expected ones: it is to be fetched.
   * `checking` is called before a file is read again.
   */
  async verified(key: StoreKey, file: string, hub: HubFile, signal: AbortSignal, checking: () => void): Promise<Verified | null> {
    const info = await lstat(file).catch(() => null);
    if (!info?.isFile() || info.size !== hub.size) return null;
    const entry = this.entries.find((e) => sameKey(e, key));
    const expected = hub.sha256 ?? entry?.sha256 ?? null;
    if (entry && entry.size === info.size && entry.sha256 === expected && entry.stamp === fileStamp(file)) return { size: entry.size, sha256: entry.sha256 };
    // Nothing to check it against (no record, a hub without sha256), or the hub's file is another one now.
    if (expected === null || (entry && entry.stamp === fileStamp(file) && entry.sha256 !== expected)) return null;
    checking();
    const hash = createHash('sha256');
    await hashPrefix(hash, file, info.size, signal);
    const sha256 = hash.digest('hex');
    if (sha256 !== expected) return null;
    await this.record(key, file, { size: info.size, sha256 });
    return { size: info.size, sha256 };
  }

  /** Records `file` as verified: its size and sha256, and its stamp now (not without a sha256 to record). */
  async record(key: StoreKey, file: string, verified: Verified): Promise<void> {
    const stamp = fileStamp(file);
    if (stamp === undefined || !SHA256_HEX.test(verified.sha256)) return;
    const entry: StoredFile = { repo: key.repo, revision: key.revision, path: key.path, ...verified, stamp, verified_at: new Date().toISOString() };
    await this.#write([...this.entries.filter((e) => !sameKey(e, key)), entry]);
  }

  get(key: StoreKey): StoredFile | undefined {
    return this.entries.find((e) => sameKey(e, key));
  }

  /** A stored file of this size and sha256 on its record, its stamp unchanged since it was verified (VerifiedCopies); null when none is. */
  verifiedCopy(file: { size: number; sha256: string }): string | null {
    for (const entry of this.entries) {
      if (entry.sha256 !== file.sha256 || entry.size !== file.size) continue;
      const stored = storedPath(this.dir, entry);
      if (stored !== null && stampUnchanged(stored, entry.stamp)) return stored;
    }
    return null;
  }

  /**
   * Removes what a cancelled install leaves of `keys`: every partial file, and every complete file
   * that no task's `installed.json` names (the other task's files stay).
   */
  async removeUnused(keys: StoreKey[]): Promise<void> {
    const named: StoreKey[] = [];
    for (const task of ENHANCER_TASKS) {
      const record = await readInstalledRecord(this.dir, task);
      for (const file of record?.files ?? []) named.push({ repo: record!.repo, revision: record!.revision, path: file.path });
    }
    const gone: StoreKey[] = [];
    for (const key of keys) {
      const file = storedPath(this.dir, key);
      if (file === null) continue;
      await rm(`${file}.part`, { force: true });
      if (!named.some((n) => sameKey(n, key))) {
        await rm(file, { force: true });
        gone.push(key);
      }
      await this.#removeEmptyFolders(path.dirname(file));
    }
    if (gone.length > 0) await this.#write(this.entries.filter((e) => !gone.some((key) => sameKey(e, key))));
  }

  /**
   * Moves the files of the layout before the store into it: for each task, the files its
   * `installed.json` names (with their recorded sha256), then those of its recipe in force (complete
   * files of an install that failed, and partial files, to be verified or resumed). Returns what it did.
   */
  async migrate(recipes: Recipes, log: Logger): Promise<{ moved: number; duplicates: number; kept: number }> {
    const counts = { moved: 0, duplicates: 0, kept: 0 };
    for (const task of ENHANCER_TASKS) {
      const record = await readInstalledRecord(this.dir, task);
      const candidates: Array<{ key: StoreKey; recorded: Verified | null }> = (record?.files ?? []).map((f) => ({
        key: { repo: record!.repo, revision: record!.revision, path: f.path },
        recorded: { size: f.size, sha256: f.sha256 },
      }));
      const recipe = recipes[task];
      for (const f of recipe.files) {
        if (!candidates.some((c) => localName(c.key.path) === localName(f.path))) candidates.push({ key: { repo: recipe.repo, revision: recipe.revision, path: f.path }, recorded: null });
      }
      for (const { key, recorded } of candidates) {
        try {
          const outcome = await this.#migrateOne(task, key, recorded);
          if (outcome) counts[outcome] += 1;
        } catch (error) {
          counts.kept += 1;
          log.warn({ err: error, task, file: shown(key) }, 'prompt enhancer file not moved into the store: it is read where it is');
        }
      }
    }
    if (counts.moved + counts.duplicates + counts.kept > 0) log.info(counts, 'prompt enhancer files of the layout before the store moved into it');
    return counts;
  }

  async #migrateOne(task: (typeof ENHANCER_TASKS)[number], key: StoreKey, recorded: Verified | null): Promise<'moved' | 'duplicates' | 'kept' | null> {
    const before = path.join(taskDir(this.dir, task), localName(key.path));
    const target = storedPath(this.dir, key);
    if (target === null) return null;
    let outcome: 'moved' | 'duplicates' | 'kept' | null = null;
    const info = await lstat(before).catch(() => null);
    if (info?.isFile() && (recorded === null || info.size === recorded.size)) {
      const there = await lstat(target).catch(() => null);
      const entry = this.get(key);
      if (there?.isFile() && recorded && entry?.sha256 === recorded.sha256 && there.size === entry.size) {
        // The same bytes are in the store already (the other task's copy): one is enough.
        await rm(before);
        outcome = 'duplicates';
      } else if (!there || (recorded && !entry)) {
        // No copy in the store, or one nobody vouches for where this one is recorded.
        await rename(before, await this.place(key));
        if (recorded) await this.record(key, target, recorded);
        outcome = 'moved';
      } else {
        outcome = 'kept';
      }
    }
    const partial = `${before}.part`;
    if ((await regularFile(partial)) && !(await regularFile(target)) && !(await regularFile(`${target}.part`))) {
      await rename(partial, `${await this.place(key)}.part`);
      outcome ??= 'moved';
    }
    return outcome;
  }

  async #write(entries: StoredFile[]): Promise<void> {
    await writeJsonAtomic(storeRecordFile(this.dir), { files: entries });
    this.entries = entries;
  }

  /** Removes the folders from `dir` up to the store's that have come to hold nothing. */
  async #removeEmptyFolders(dir: string): Promise<void> {
    const root = storeDir(this.dir);
    for (let at = dir; at.startsWith(`${root}${path.sep}`); at = path.dirname(at)) {
      if (!(await rmdir(at).then(() => true, () => false))) return;
    }
  }
}
