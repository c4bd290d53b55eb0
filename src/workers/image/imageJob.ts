// One image job, shared by the image routes and the operator's image test (spec 3.3, 4.3, 4.4):
// a private job folder (0700) with the reference images, the reservation of every GPU (the chat
// and TTS workers are unloaded first), the prompt enhancer first when the profile has its task on
// (4.7: loaded, asked, ended, all under the same reservation), one image process, and the PNG
// without its text and EXIF chunks. The folder is removed when the job ends, also after a failure or a client that left,
// once the image process is gone.
//
// Every wait for a process to end treats a lost one (it outlived SIGKILL) as ended, for the job:
// nothing more can be done for it, and the supervisor keeps its memory reserved until the GPU
// probe no longer shows it. Each wait is bounded by that worker's unload limit (its grace and
// kill limit), and the wait between the enhancer and the image also ends with the client.
import type { EnhancerStep } from '../../../machines/supervisor/index.js';
import { pngSize, stripPngMetadata } from '../../adapters/png.js';
import { errors } from '../../errors.js';
import type { Lease } from '../../system/scheduler.js';
import type { Service } from '../../service.js';
import type { EnhancerTask } from '../../store/enhancers.js';
import { EnhancerFailure, type Enhancement } from '../enhancer/enhancer.js';
import type { ImageProfile } from './image.js';
import { JobFolder } from '../jobFolder.js';
import { onLease } from '../lease.js';

/** An image job's prompt and, for an edit, the folder its reference images were uploaded into (the job takes it over). */
export interface ImageInput {
  prompt: string;
  references?: JobFolder;
}

export interface ImageResult {
  png: Buffer;
  width: number;
  height: number;
  /** The metadata chunks removed from sd-cli's PNG (for the tests and the log's count only). */
  removed: string[];
  /** The enhancer's rewrite the image was made from (4.7), or null when the enhancer was off or skipped. */
  enhanced: Enhancement | null;
}

export interface ImageJobOptions {
  source: 'api' | 'test';
  whenBusy: 'wait' | 'refuse';
  /** The client went away (the API), or the test was cancelled. */
  signal: AbortSignal;
  onQueued?: (position: number) => void;
  onGranted?: (lease: Lease) => void;
  /**
   * `profile` (default): the profile's enhancer choice applies; `skip`: the prompt is final (the
   * image test after the operator accepted a preview, or kept the original: exactly that job).
   */
  enhance?: 'profile' | 'skip';
}

/** The task an image job's enhancer has: editing with reference images, or text to image. */
export const enhancerTask = (references: number): EnhancerTask => (references > 0 ? 'i2i' : 't2i');

/** The parts of the service an image job uses: the state directory, the reservation, the enhancer and image workers, the installs. */
export type ImageJobParts = Pick<Service, 'config' | 'scheduler' | 'supervisor' | 'image' | 'enhancer' | 'enhancers'>;

/**
 * The enhancer step of a job for `profile` (4.7), or null when its task is off. A task that is on
 * but whose enhancer is not installed (its files gone since the blocker check) fails the job:
 * the original prompt is never used in its place.
 */
export async function enhancerStep(service: Pick<Service, 'enhancers'>, profile: ImageProfile, task: EnhancerTask, image: boolean): Promise<EnhancerStep | null> {
  const repo = profile.prompt_enhancer?.[task];
  if (!repo) return null;
  const installed = await service.enhancers.installed(task);
  if (!installed || installed.repo !== repo) throw errors.enhancerFailed(`The ${task} prompt enhancer ${repo} is not installed (its files are missing): install it under Enhancers, or switch the task off.`);
  if (task === 'i2i' && !installed.mmproj) throw errors.enhancerFailed(`The i2i prompt enhancer ${repo} has no projector (mmproj) to read the reference images.`);
  const device = profile.prompt_enhancer?.device ?? 'auto';
  return { task, model: installed.model, mmproj: task === 'i2i' ? installed.mmproj : null, context: installed.context, image, device };
}

/** An enhancer failure as the job answers it: 502 enhancer_failed, unless the job was aborted. */
function enhancerError(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return signal.reason;
  if (error instanceof EnhancerFailure) return errors.enhancerFailed(`The prompt enhancer failed: ${error.message}`);
  return error;
}

interface Reserved {
  lease: Lease;
  dir: string;
  references: string[];
  /** Aborts when the client leaves or the reservation is revoked. */
  signal: AbortSignal;
}

/**
 * What every image-reservation job shares: the private job folder (the one the reference images
 * were uploaded into, or a new one), the reservation of every GPU, the enhancer step first when
 * there is one (its answer, then its end, reported to the supervisor), then `work`; the folder is
 * removed once every process of the job is gone.
 */
async function onImageReservation<T>(
  service: ImageJobParts,
  profile: ImageProfile,
  input: ImageInput,
  options: ImageJobOptions,
  step: EnhancerStep | null,
  work: (reserved: Reserved, enhanced: Enhancement | null) => Promise<T>,
): Promise<T> {
  const folder = input.references ?? (await JobFolder.create(service.config.stateDir));
  const { dir } = folder;
  const references = [...folder.references];
  let lease: Lease | undefined;
  /** The image start the job runs on, once known: the grant's own, or its image step's. */
  let imageGeneration: number | null = null;
  try {
    lease = await service.scheduler.reserve(
      { kind: 'image', source: options.source, profileId: profile.id, revision: profile.revision, slots: 1, device: 'gpu', whenBusy: options.whenBusy, profile, enhancer: step },
      { signal: options.signal, ...(options.onQueued ? { onQueued: options.onQueued } : {}) },
    );
    options.onGranted?.(lease);
    const granted = lease;
    if (!granted.enhancer) imageGeneration = granted.generation;
    return await onLease(granted, options.signal, 'image worker', async (signal) => {
      let enhanced: Enhancement | null = null;
      let onImage = granted;
      if (step && granted.enhancer) {
        enhanced = await service.enhancer.enhance(granted.enhancer.generation, step.task, { prompt: input.prompt, references }, signal).catch((error: unknown) => {
          throw enhancerError(error, signal);
        });
        // The enhancer ends before anything else starts: the supervisor unloads it, then the image
        // step is granted (at once when the job holds the GPUs; with an enhancer on the CPU, once
        // chat and TTS have made way).
        service.supervisor.send({ type: 'enhancer.done', jobId: granted.jobId });
        if (step.image) {
          const image = await granted.imageStep(signal);
          imageGeneration = image.generation;
          onImage = { ...granted, ...image };
        }
        // Its process must be gone (or lost) before the image's starts; a client that leaves meanwhile ends the job.
        await service.enhancer.gone(granted.enhancer.generation, signal);
      }
      return work({ lease: onImage, dir, references, signal }, enhanced);
    });
  } finally {
    // The job's processes must be gone (or lost) before its folder is: one may still be ending (a client that left).
    if (lease) {
      const enhancerGone = lease.enhancer ? service.enhancer.gone(lease.enhancer.generation) : undefined;
      const imageGone = imageGeneration === null ? undefined : service.image.gone(imageGeneration);
      await Promise.all([imageGone, enhancerGone]);
    }
    await folder.remove();
  }
}

export async function runImageJob(service: ImageJobParts, profile: ImageProfile, input: ImageInput, options: ImageJobOptions): Promise<ImageResult> {
  const step = options.enhance === 'skip' ? null : await enhancerStep(service, profile, enhancerTask(input.references?.references.length ?? 0), true);
  return onImageReservation(service, profile, input, options, step, async ({ lease, dir, references, signal }, enhanced) => {
    const prompt = enhanced?.prompt ?? input.prompt;
    const png = await service.image.generate(lease, { dir, prompt, references }, signal);
    let stripped;
    try {
      stripped = stripPngMetadata(png);
    } catch (error) {
      throw errors.workerFailed(`The image worker wrote a file that is not a valid PNG: ${(error as Error).message}`);
    }
    const { width, height } = pngSize(stripped.png);
    return { png: stripped.png, width, height, removed: stripped.removed, enhanced };
  });
}

/**
 * The console's preview (4.7): the enhancer alone, under the image reservation (a busy one is a
 * conflict at once, as for the image test), for the task the input implies, even while the
 * profile has that task off (the operator tries it before switching it on).
 */
export async function runEnhancerPreview(service: ImageJobParts, profile: ImageProfile, input: ImageInput, signal: AbortSignal): Promise<Enhancement> {
  const task = enhancerTask(input.references?.references.length ?? 0);
  const installed = await service.enhancers.installed(task);
  const chosen = profile.prompt_enhancer?.[task] ?? installed?.repo;
  if (!chosen) throw errors.conflict('enhancer_not_installed', `The ${task} prompt enhancer is not installed: install it under Enhancers first.`);
  const device = profile.prompt_enhancer?.device ?? 'auto';
  const step = await enhancerStep(service, { ...profile, prompt_enhancer: { t2i: null, i2i: null, device, [task]: chosen } }, task, false);
  const options: ImageJobOptions = { source: 'test', whenBusy: 'refuse', signal };
  return onImageReservation(service, profile, input, options, step, async (_reserved, enhanced) => {
    if (!enhanced) throw errors.enhancerFailed('The prompt enhancer did not run.');
    return enhanced;
  });
}
