// Spec 3.5, the STT worker: one speech-to-text engine process on the CPU.
//
// | unloaded | first transcription request | | loaded (CPU) | one STT job at a time; worker stays loaded for further recordings |
// | loaded | endpoint stop, a new build, or an error | | unloaded | |
//
// One STT job at a time is the supervisor's rule (it grants the next job only when the running
// one released). The process life is the shared worker lifecycle (machines/worker/lifecycle.ts).
import type { SttParams } from '../../src/store/profile.schema.js';
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { SttLaunch } from './sttWorker.types.js';

export const STT_WORKER_LIMITS = { loadTimeLimitMs: 120_000, terminationGraceMs: 5_000 } as const;

/** What a start of the STT worker runs: its profile snapshot's engine, model and threads. */
export function sttLaunch(start: WorkerStart): SttLaunch {
  const { params } = start.profile as { params: SttParams };
  return { generation: start.generation, profileId: start.profileId, revision: start.revision, backend: params.backend, model: params.model, threads: params.threads };
}

export const sttWorkerMachine = lifecycleMachine<SttLaunch, 'stt'>({
  id: 'sttWorker',
  kind: 'stt',
  name: 'speech-to-text worker',
  limits: STT_WORKER_LIMITS,
  launch: sttLaunch,
  rows: {
    start: 'unloaded | first transcription request | | loaded (CPU): the engine starts on the CPU and loads its model',
    cancel: 'loading | endpoint stop before the engine was ready | | unloaded: the start is aborted',
    unload: 'loaded | endpoint stop, a new build (or the per-request policy) | | unloaded',
    error: 'loaded | an error | | unloaded: the engine ended on its own; noticed at once',
  },
});
