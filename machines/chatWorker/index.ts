export { chatWorkerMachine, CHAT_WORKER_LIMITS } from './chatWorker.machine.js';
export { chatWorkerActors, type ServerInput } from './chatWorker.actors.js';
export { serverArgs, SERVER_DEFAULTS } from './args.js';
export type * from './chatWorker.types.js';
