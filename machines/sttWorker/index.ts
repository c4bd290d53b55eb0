export { sttWorkerMachine, sttLaunch, STT_WORKER_LIMITS } from './sttWorker.machine.js';
export type * from './sttWorker.types.js';
