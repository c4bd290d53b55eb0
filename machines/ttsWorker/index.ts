export { ttsWorkerMachine, ttsLaunch, TTS_WORKER_LIMITS } from './ttsWorker.machine.js';
export type * from './ttsWorker.types.js';
