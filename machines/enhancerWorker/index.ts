export { enhancerWorkerMachine, enhancerLaunch, ENHANCER_WORKER_LIMITS } from './enhancerWorker.machine.js';
export { enhancerArgs } from './args.js';
export type * from './enhancerWorker.types.js';
