// The state directory's file discipline (CONTRACT section 2): every write is atomic (temp file in
// the same folder, fsync, rename, fsync of the folder), files are 0600 and folders 0700, and a file
// that cannot be read or parsed stops the start with a message naming it. Nothing here ever
// replaces a damaged file with defaults. Downloaded files (the prompt enhancer store, pulled
// models) land in folders made here, never through a symlink below their root, and a verified file
// one of them holds is shared with the other as a hard link (linkOrCopy), not downloaded twice.
import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { link, lstat, mkdir, open, readFile, rename, rm, chmod } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';

export const FILE_MODE = 0o600;
export const DIR_MODE = 0o700;

/** A state file that exists but cannot be used; the message names the file and what is wrong. */
export class StateFileError extends Error {
  readonly file: string;
  constructor(file: string, problem: string, options?: { cause?: unknown }) {
    super(`state file ${file}: ${problem}`, options);
    this.name = 'StateFileError';
    this.file = file;
  }
}

/** Creates a private folder (0700), and tightens the mode of one that already exists. */
export async function ensurePrivateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: DIR_MODE });
  await chmod(dir, DIR_MODE);
}

/**
 * Makes the folders of `relative` below `root`, one by one (0700), each checked to be a plain
 * folder: never a symlink or a file below `root` (root itself may be one, to put it on another
 * disk). Returns the first path that is not a plain folder (nothing is written through it), or
 * null once every folder is there.
 */
export async function makePrivateFolders(root: string, relative: string): Promise<string | null> {
  let at = root;
  for (const segment of relative.split(path.sep).filter((s) => s !== '' && s !== '.')) {
    at = path.join(at, segment);
    await mkdir(at, { mode: DIR_MODE }).catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    });
    if (!(await lstat(at)).isDirectory()) return at;
    await chmod(at, DIR_MODE);
  }
  return null;
}

/**
 * Where another part of the service holds a complete file of this size and sha256 that it
 * verified, its stamp unchanged since; null when it holds none. (The prompt enhancer store and the
 * model pulls ask each other before they download.)
 */
export type VerifiedCopies = (file: { size: number; sha256: string }) => string | null;

/** Why a hard link cannot be made where a copy can: another filesystem, or one without hard links. */
const NO_LINK = new Set(['EXDEV', 'EPERM', 'EMLINK', 'ENOTSUP', 'EOPNOTSUPP']);

/**
 * Puts the regular file `from` at `to` through a temp name beside `to` and a rename, so `to` is
 * never half there: a hard link (the same bytes, no room taken, nothing read), or a copy (0600)
 * where no link can be made (another filesystem), `beforeCopy` asked first with the bytes it takes
 * (it rejects when the disk has no room). Returns which; a failure or an abort leaves no temp file.
 */
export async function linkOrCopy(from: string, to: string, options: { signal?: AbortSignal; beforeCopy?: (bytes: number) => Promise<void> } = {}): Promise<'linked' | 'copied'> {
  const info = await lstat(from);
  if (!info.isFile()) throw new Error(`${from} is not a regular file: it is not linked`);
  const temp = path.join(path.dirname(to), `.${path.basename(to)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    let how: 'linked' | 'copied' = 'linked';
    await link(from, temp).catch(async (error: unknown) => {
      if (!NO_LINK.has((error as NodeJS.ErrnoException).code ?? '')) throw error;
      how = 'copied';
      await options.beforeCopy?.(info.size);
      const copy = createWriteStream(temp, { flags: 'wx', mode: FILE_MODE, flush: true });
      await pipeline(createReadStream(from), copy, options.signal ? { signal: options.signal } : {});
    });
    await rename(temp, to);
    return how;
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Writes `data` to `file` atomically with mode 0600: temp file, fsync, rename, fsync the folder. */
export async function writeFileAtomic(file: string, data: string | Buffer): Promise<void> {
  const dir = path.dirname(file);
  const temp = path.join(dir, `.${path.basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
  const handle = await open(temp, 'wx', FILE_MODE);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  try {
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await fsyncDir(dir);
}

export async function writeJsonAtomic(file: string, value: unknown): Promise<void> {
  await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`);
}

/**
 * Reads a JSON state file. Returns `undefined` only when the file does not exist; any other
 * problem (unreadable, empty, half-written, not JSON) throws a StateFileError naming the file.
 */
export async function readJsonFile(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StateFileError(file, `cannot be read (${(error as Error).message})`, { cause: error });
  }
  if (text.trim() === '') throw new StateFileError(file, 'is empty (a half-written file?)');
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new StateFileError(file, `is not valid JSON (half-written or edited by hand?): ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/**
 * Size, modification time and inode: enough to notice that another process replaced a file.
 * Undefined when the file is missing.
 */
export function fileStamp(file: string): string | undefined {
  try {
    // Synchronous: the state directory is local, and this runs on every API request (the token
    // check), where a thread-pool round trip costs more than the stat itself.
    const s = statSync(file);
    return `${s.ino}:${s.size}:${s.mtimeMs}`;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Whether `file` still has the stamp it was verified with; a file that is gone or cannot be looked at has not. */
export function stampUnchanged(file: string, stamp: string | null): boolean {
  try {
    return stamp !== null && fileStamp(file) === stamp;
  } catch {
    return false;
  }
}

/** Runs async writers one after another, so that two updates of one file never interleave. */
export class WriteQueue {
  #tail: Promise<unknown> = Promise.resolve();

  /** Resolves once every write queued so far has finished (successfully or not). */
  async idle(): Promise<void> {
    let tail;
    do {
      tail = this.#tail;
      await tail;
    } while (tail !== this.#tail);
  }

  run<T>(work: () => Promise<T>): Promise<T> {
    const next = this.#tail.then(work, work);
    this.#tail = next.catch(() => undefined);
    return next;
  }
}
