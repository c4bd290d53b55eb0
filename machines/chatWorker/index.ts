export { chatWorkerMachine, chatLaunch, CHAT_WORKER_LIMITS } from './chatWorker.machine.js';
export { serverArgs, SERVER_DEFAULTS } from './args.js';
export type * from './chatWorker.types.js';
