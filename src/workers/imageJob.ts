// One image job, shared by the image routes and the operator's image test (spec 3.3, 4.3, 4.4):
// a private job folder (0700) with the reference images, the reservation of every GPU (the chat
// and TTS workers are unloaded first), one image process, and the PNG without its text and EXIF
// chunks. The folder is removed when the job ends, also after a failure or a client that left,
// once the image process is gone.
import { randomUUID } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { imageKind, pngSize, stripPngMetadata, type ImageKind } from '../adapters/png.js';
import { errors } from '../errors.js';
import type { Lease } from '../system/scheduler.js';
import type { Service } from './service.js';
import type { ImageProfile } from './image.js';
import { onLease } from './job.js';

/** How long the job folder waits, beyond the image worker's SIGKILL grace, for an ended job's process to be gone. */
const GONE_MARGIN_MS = 20_000;

const EXTENSIONS: Record<ImageKind, string> = { png: 'png', jpeg: 'jpg', webp: 'webp' };

export interface ImageResult {
  png: Buffer;
  width: number;
  height: number;
  /** The metadata chunks removed from sd-cli's PNG (for the tests and the log's count only). */
  removed: string[];
}

export interface ImageJobOptions {
  source: 'api' | 'test';
  whenBusy: 'wait' | 'refuse';
  /** The client went away (the API), or the test was cancelled. */
  signal: AbortSignal;
  onQueued?: (position: number) => void;
  onGranted?: (lease: Lease) => void;
}

export async function runImageJob(service: Service, profile: ImageProfile, input: { prompt: string; references: Buffer[] }, options: ImageJobOptions): Promise<ImageResult> {
  const dir = path.join(service.config.stateDir, 'jobs', `image-${randomUUID()}`);
  await mkdir(dir, { mode: 0o700 });
  let lease: Lease | undefined;
  try {
    const references: string[] = [];
    for (const [index, bytes] of input.references.entries()) {
      const file = path.join(dir, `reference-${index + 1}.${EXTENSIONS[imageKind(bytes) ?? 'png']}`);
      await writeFile(file, bytes, { mode: 0o600 });
      references.push(file);
    }
    lease = await service.scheduler.reserve(
      { kind: 'image', source: options.source, profileId: profile.id, revision: profile.revision, slots: 1, device: 'gpu', whenBusy: options.whenBusy, profile },
      { signal: options.signal, ...(options.onQueued ? { onQueued: options.onQueued } : {}) },
    );
    options.onGranted?.(lease);
    const granted = lease;
    const png = await onLease(granted, options.signal, 'image worker', (both) => service.image.generate(granted, profile, { dir, prompt: input.prompt, references }, both));
    let stripped;
    try {
      stripped = stripPngMetadata(png);
    } catch (error) {
      throw errors.workerFailed(`The image worker wrote a file that is not a valid PNG: ${(error as Error).message}`);
    }
    const { width, height } = pngSize(stripped.png);
    return { png: stripped.png, width, height, removed: stripped.removed };
  } finally {
    // The image process must be gone before its folder is: it may still be ending (a client that left).
    if (lease) {
      let timer: NodeJS.Timeout | undefined;
      const limit = new Promise((resolve) => (timer = setTimeout(resolve, service.image.terminationGraceMs() + GONE_MARGIN_MS)));
      await Promise.race([service.image.gone(lease.generation), limit]);
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  }
}
