export { imageWorkerMachine, imageLaunch, IMAGE_WORKER_LIMITS } from './imageWorker.machine.js';
export { sdArgs, lastProgress, IMAGE_OUTPUT } from './args.js';
export type * from './imageWorker.types.js';
