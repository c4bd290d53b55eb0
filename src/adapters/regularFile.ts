// Reading files whose path an operator typed (a profile's model and its other files): such a path
// may name a FIFO, a socket or a device. Opening a FIFO blocks until a writer comes, and
// the blocked open holds one of libuv's four threads, which every fs call, scrypt (login) and
// zlib share: four FIFO profiles hung chat, TTS, login and the profile delete. So a path is
// stat'ed first (stat never opens it), only a regular file is opened, and then with O_NONBLOCK
// (a FIFO swapped in after the stat still cannot block the open) and checked again on the handle.
// Probes also share a few lanes: however many profiles are checked at once, and even when a stat
// hangs on a dead network mount, they hold at most PROBE_LANES of those threads.
import { constants, type Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';

/** What a file is, in the words a blocker uses. */
export function fileKind(stats: Stats): string {
  if (stats.isFile()) return 'regular file';
  if (stats.isDirectory()) return 'directory';
  if (stats.isFIFO()) return 'FIFO';
  if (stats.isSocket()) return 'socket';
  if (stats.isCharacterDevice()) return 'character device';
  if (stats.isBlockDevice()) return 'block device';
  return 'special file';
}

/** A path that exists but is not a regular file (`kind` names what it is). */
export class NotRegularFile extends Error {
  override name = 'NotRegularFile';
  constructor(
    readonly file: string,
    readonly kind: string,
  ) {
    super(`${file} is a ${kind}, not a regular file`);
  }
}

/** A stat stamp: a file that did not change keeps it (content, mode and owner). */
export const statStamp = (s: Stats): string => `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.mode}:${s.uid}:${s.gid}`;

/**
 * Opens a regular file for reading. Anything else rejects with NotRegularFile and is never
 * opened; a missing or unreadable file rejects with the fs error.
 */
export async function openRegular(file: string): Promise<{ handle: FileHandle; stats: Stats }> {
  const before = await stat(file);
  if (!before.isFile()) throw new NotRegularFile(file, fileKind(before));
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw new NotRegularFile(file, fileKind(stats));
    return { handle, stats };
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/** How many of libuv's threads file probes may hold at once (it has four by default). */
export const PROBE_LANES = 2;

let lanesBusy = 0;
const waiting: Array<() => void> = [];

/** Runs one probe when a lane is free; probes beyond PROBE_LANES wait in order. */
export async function onProbeLane<T>(probe: () => Promise<T>): Promise<T> {
  if (lanesBusy < PROBE_LANES) lanesBusy++;
  else await new Promise<void>((resolve) => waiting.push(resolve));
  try {
    return await probe();
  } finally {
    // The lane goes straight to the next probe in line, else it is free.
    const next = waiting.shift();
    if (next) next();
    else lanesBusy--;
  }
}
