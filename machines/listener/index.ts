export { listenerMachine, savedPortProblem } from './listener.machine.js';
export { listenerActors } from './listener.actors.js';
export type * from './listener.types.js';
