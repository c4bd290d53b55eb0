// A job's private folder (CONTRACT section 2: `jobs/<id>/`, 0700): an image job's reference images
// (0600, in the client's order), or a transcription's recording. An upload is written here as it
// arrives: only a few chunks are ever in memory, however many uploads are held open, and an image
// whose first bytes are not a PNG, JPEG or WebP is refused before anything of it is written. A
// folder for an upload first reserves disk room for what the upload declares, counts every chunk
// it writes against that room (growing it past the declared length, or refusing with 507), gives
// back what it did not write once the upload is whole, and holds the reservation until it is
// removed (src/workers/uploadRoom.ts). Whoever creates a folder removes it, on every error too (the
// image job removes it once its processes are gone).
import { randomUUID } from 'node:crypto';
import { mkdir, open, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { imageKind, type ImageKind } from '../adapters/png.js';
import type { UploadReservation, UploadRoom } from './uploadRoom.js';

const EXTENSIONS: Record<ImageKind, string> = { png: 'png', jpeg: 'jpg', webp: 'webp' };

/** How many first bytes tell the three kinds apart (WebP needs the most: RIFF....WEBP). */
const HEAD_BYTES = 12;

export class JobFolder {
  /** The reference images written so far, in order. */
  readonly references: string[] = [];

  private constructor(
    readonly dir: string,
    private readonly room: UploadReservation | undefined,
  ) {}

  /**
   * A new private folder under `<state>/jobs/`, named by the job's kind. With `upload`, it first
   * reserves disk room for what the upload declares (`declared`, its request's Content-Length; at
   * most `maxBytes`, the most it may write), a 507 when there is none.
   */
  static async create(stateDir: string, kind: 'image' | 'transcription' = 'image', upload?: { room: UploadRoom; maxBytes: number; declared: number | undefined }): Promise<JobFolder> {
    const room = upload ? await upload.room.reserve(upload.maxBytes, upload.declared) : undefined;
    const dir = path.join(stateDir, 'jobs', `${kind}-${randomUUID()}`);
    try {
      await mkdir(dir, { mode: 0o700 });
    } catch (error) {
      room?.release();
      throw error;
    }
    return new JobFolder(dir, room);
  }

  /** Writes `chunk` to `handle`, counted against the upload's room first. */
  async #put(handle: FileHandle, chunk: Buffer): Promise<void> {
    await this.room?.take(chunk.length);
    await handle.write(chunk);
  }

  /** The upload is whole: the room it held and did not write goes back. */
  settle(): void {
    this.room?.settle();
  }

  /** Writes `name` (0600) from `source` as it arrives; its path. */
  async write(name: string, source: AsyncIterable<Buffer>): Promise<string> {
    const file = path.join(this.dir, name);
    const handle = await open(file, 'wx', 0o600);
    try {
      for await (const chunk of source) await this.#put(handle, chunk);
    } finally {
      await handle.close();
    }
    return file;
  }

  /**
   * Writes the next reference image from `source` as it arrives; `refused(index)` is thrown when
   * its first bytes are not a PNG, JPEG or WebP (nothing of it is kept).
   */
  async addReference(source: AsyncIterable<Buffer>, refused: (index: number) => Error): Promise<void> {
    const index = this.references.length + 1;
    const chunks = source[Symbol.asyncIterator]();
    const head: Buffer[] = [];
    let headBytes = 0;
    let done = false;
    while (headBytes < HEAD_BYTES) {
      const next = await chunks.next();
      if (next.done) {
        done = true;
        break;
      }
      head.push(next.value);
      headBytes += next.value.length;
    }
    const kind = imageKind(Buffer.concat(head));
    // Refused before the rest of it is read.
    if (!kind) throw refused(index);
    const file = path.join(this.dir, `reference-${index}.${EXTENSIONS[kind]}`);
    const handle = await open(file, 'wx', 0o600);
    try {
      for (const chunk of head) await this.#put(handle, chunk);
      if (!done) for (let next = await chunks.next(); !next.done; next = await chunks.next()) await this.#put(handle, next.value);
    } finally {
      await handle.close();
    }
    this.references.push(file);
  }

  /** Removes the folder; its reservation goes back whether or not the removal succeeded. */
  async remove(): Promise<void> {
    try {
      await rm(this.dir, { recursive: true, force: true });
    } finally {
      this.room?.release();
    }
  }
}
