// A job's private folder (CONTRACT section 2: `jobs/<id>/`, 0700): an image job's reference images
// (0600, in the client's order), or a transcription's recording. An upload is written here as it
// arrives: only a few chunks are ever in memory, however many uploads are held open, and an image
// whose first bytes are not a PNG, JPEG or WebP is refused before anything of it is written. A
// folder for an upload first reserves disk room for the most it may hold (src/workers/uploadRoom.ts),
// until it is removed. Whoever creates a folder removes it, on every error too (the image job
// removes it once its processes are gone).
import { randomUUID } from 'node:crypto';
import { mkdir, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { imageKind, type ImageKind } from '../adapters/png.js';
import type { UploadRoom } from './uploadRoom.js';

const EXTENSIONS: Record<ImageKind, string> = { png: 'png', jpeg: 'jpg', webp: 'webp' };

/** How many first bytes tell the three kinds apart (WebP needs the most: RIFF....WEBP). */
const HEAD_BYTES = 12;

export class JobFolder {
  /** The reference images written so far, in order. */
  readonly references: string[] = [];

  private constructor(
    readonly dir: string,
    readonly release: () => void,
  ) {}

  /**
   * A new private folder under `<state>/jobs/`, named by the job's kind. With `upload`, it first
   * reserves disk room for the most the upload may write (a 507 when there is none).
   */
  static async create(stateDir: string, kind: 'image' | 'transcription' = 'image', upload?: { room: UploadRoom; maxBytes: number }): Promise<JobFolder> {
    const release = upload ? await upload.room.reserve(upload.maxBytes) : () => {};
    const dir = path.join(stateDir, 'jobs', `${kind}-${randomUUID()}`);
    try {
      await mkdir(dir, { mode: 0o700 });
    } catch (error) {
      release();
      throw error;
    }
    return new JobFolder(dir, release);
  }

  /** Writes `name` (0600) from `source` as it arrives; its path. */
  async write(name: string, source: AsyncIterable<Buffer>): Promise<string> {
    const file = path.join(this.dir, name);
    const handle = await open(file, 'wx', 0o600);
    try {
      for await (const chunk of source) await handle.write(chunk);
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
      for (const chunk of head) await handle.write(chunk);
      if (!done) for (let next = await chunks.next(); !next.done; next = await chunks.next()) await handle.write(next.value);
    } finally {
      await handle.close();
    }
    this.references.push(file);
  }

  async remove(): Promise<void> {
    await rm(this.dir, { recursive: true, force: true });
    this.release();
  }
}
