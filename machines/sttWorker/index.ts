export { sttWorkerMachine, STT_WORKER_LIMITS } from './sttWorker.machine.js';
export { sttWorkerActors, type EngineInput } from './sttWorker.actors.js';
export type * from './sttWorker.types.js';
