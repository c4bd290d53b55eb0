// Placeholder actors of the STT worker. The system provides the real engine process actor
// (src/workers/sttEngine.ts) with `sttWorkerMachine.provide({ actors })`; tests provide simulated ones.
import { fromCallback } from 'xstate';
import type { EngineCommand, SttLaunch, SttWorkerEvent } from './sttWorker.types.js';

export interface EngineInput {
  launch: SttLaunch;
}

export const sttWorkerActors = {
  /**
   * The engine process of one start: spawns it, sends `engine.spawned` (pid), `engine.ready` once
   * the model is loaded, and `engine.exited` (with a diagnosis) when it ends. Takes `engine.stop`
   * (SIGTERM) and `engine.kill` (SIGKILL); its cleanup kills what is left.
   */
  engine: fromCallback<EngineCommand, EngineInput, SttWorkerEvent>(() => {
    throw new Error('STT worker actor engine was not provided');
  }),
};
