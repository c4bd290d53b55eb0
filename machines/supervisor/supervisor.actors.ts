// Placeholder actors of the supervisor. The system gives the real ones with
// `supervisorMachine.provide({ actors })`; tests give simulated ones. The listener and the queue are
// machines of their own, invoked as children with their systemIds.
import { fromCallback, fromPromise } from 'xstate';
import { chatWorkerMachine } from '../chatWorker/index.js';
import { enhancerWorkerMachine } from '../enhancerWorker/index.js';
import { imageWorkerMachine } from '../imageWorker/index.js';
import { listenerMachine } from '../listener/index.js';
import { sttWorkerMachine } from '../sttWorker/index.js';
import { ttsWorkerMachine } from '../ttsWorker/index.js';
import { queueMachine } from '../queue/index.js';
import type { CheckInput, StartFacts } from './fit.js';
import type { SupervisorEvent } from './supervisor.types.js';

const notProvided = (name: string) => new Error(`supervisor actor ${name} was not provided`);

export const supervisorActors = {
  /** The inference listener (spec 3.1); the system provides its real actors. */
  listener: listenerMachine,
  /** The FIFO queue (spec 3.7). */
  queue: queueMachine,
  /** The worker machines (spec 3.2 to 3.5, 4.7), the supervisor's children; the system gives each its real engine. */
  chatWorker: chatWorkerMachine,
  imageWorker: imageWorkerMachine,
  ttsWorker: ttsWorkerMachine,
  sttWorker: sttWorkerMachine,
  enhancerWorker: enhancerWorkerMachine,
  /**
   * Gathers what the memory check needs for one worker start: a fresh GPU probe, the RAM budget,
   * the reserves and the model's own metadata (and the build's fit when there is no fixed split).
   * The supervisor judges the facts itself (`decideStart`).
   */
  gatherStartFacts: fromPromise<StartFacts, CheckInput>(async () => {
    throw notProvided('gatherStartFacts');
  }),
  /** Probes the GPUs periodically while a chat worker holds one, sending `gpu.inventory`. */
  watchGpus: fromCallback<SupervisorEvent>(() => {
    throw notProvided('watchGpus');
  }),
};
