export { audioPolicyMachine, AUDIO_POLICY_LIMITS, preloadFailure } from './audioPolicy.machine.js';
export type * from './audioPolicy.types.js';
