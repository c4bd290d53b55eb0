export { queueMachine, QUEUE_LIMITS } from './queue.machine.js';
export { expiryTimer } from './queue.actors.js';
export type * from './queue.types.js';
