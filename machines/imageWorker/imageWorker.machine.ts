// Spec 3.3, the image worker: one image process per image.
//
// - "An image job needs both GPUs free. The chat model is unloaded before generation. After each
//   image the image worker process is terminated completely. The next text request reloads its
//   profile." (The GPUs and the unloads are the supervisor's: schedule.ts.)
// - "API image requests wait for a busy reservation; the GUI image test reports a conflict instead."
//
// The process life is the shared worker lifecycle (machines/worker/lifecycle.ts), read for an
// image: `loading` is the image process at work (loading its model and running its steps);
// `engine.ready` is its successful end with the image written, so `loaded` holds a finished image
// and no process; the supervisor's unload once the job has taken the image ends the start
// ("terminated completely": a process still at work gets SIGTERM, then SIGKILL). A process that
// fails is reported at once with its diagnosis; one that takes longer than the limit is stopped.
import type { ImageParams } from '../../src/store/profile.schema.js';
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { ImageLaunch } from './imageWorker.types.js';

export const IMAGE_WORKER_LIMITS = { loadTimeLimitMs: 60 * 60_000, terminationGraceMs: 10_000 } as const;

/** What a start of the image worker runs: its profile snapshot's model files and settings, on every GPU of the reservation. */
export function imageLaunch(start: WorkerStart): ImageLaunch {
  const { params } = start.profile as { params: ImageParams };
  return {
    generation: start.generation,
    profileId: start.profileId,
    revision: start.revision,
    model: params.model,
    files: { ...params.files },
    width: params.width,
    height: params.height,
    steps: params.steps,
    guidance: params.guidance,
    cfgScale: params.cfgScale,
    seed: params.seed,
    gpus: start.gpus,
  };
}

export const imageWorkerMachine = lifecycleMachine<ImageLaunch, 'image'>({
  id: 'imageWorker',
  kind: 'image',
  name: 'image worker',
  limits: IMAGE_WORKER_LIMITS,
  launch: imageLaunch,
  timeoutMessage: (seconds) => `The image worker did not finish its image within ${seconds} s (timeout); it was stopped.`,
  rows: {
    start: 'unloaded | image job (API or image test) | every GPU reserved, chat and TTS unloaded | running: one image process for this image',
    cancel: 'running | the client left, the endpoint stopped, or the image test was cancelled | | unloaded: the image process is ended (SIGTERM, then SIGKILL)',
    unload: 'image written | the job has its image | | unloaded: after each image the image worker process is terminated completely',
    error: 'image written | | | (no process is left to fail)',
  },
});
