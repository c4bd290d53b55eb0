// The state directory's file discipline (CONTRACT section 2): every write is atomic (temp file in
// the same folder, fsync, rename, fsync of the folder), files are 0600 and folders 0700, and a file
// that cannot be read or parsed stops the start with a message naming it. Nothing here ever
// replaces a damaged file with defaults.
import { statSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, rm, chmod } from 'node:fs/promises';
import path from 'node:path';

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
