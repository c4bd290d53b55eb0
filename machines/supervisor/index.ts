export { supervisorMachine } from './supervisor.machine.js';
export { emptyWorker, type Effect, type StepResult } from './effects.js';
export { checkInput } from './grants.js';
export { supervisorActors } from './supervisor.actors.js';
export { plan, admit, runningOn, runsAtOnce, releaseLeavesNothingToPlan, preloadsOn, unloadableFor, waitingOrder, exclusiveImageMode, overtakenSwitches, type Step } from './schedule.js';
export * from './fit.js';
export type * from './supervisor.types.js';
export type { JobSource } from '../queue/index.js';
export { WORKER_KINDS, DEFAULT_SCHEDULING, SWITCH_MAX_WAIT_CAP_MS, SWITCH_DEADLINE_MARGIN_MS, UNMEASURED_ANSWER_MS, ANSWER_WINDOW } from './supervisor.types.js';
