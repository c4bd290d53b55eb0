// Spec 3.4, the TTS worker:
//
// | unloaded | first speech request | the designated GPU has at least 7 GiB free | loaded | worker stays ready for further requests |
// | loaded | exclusive image or video mode, incompatible GPU profile change, endpoint stop | | unloaded | foreign GPU processes are never ended |
//
// "A loaded chat profile may coexist with a loaded TTS worker while the 7 GiB condition holds."
// The condition and the unloads are the supervisor's (its memory check, fit.ts: a GPU device needs
// 7 GiB free; an image job unloads the TTS worker first; foreign processes are never signalled).
// The process life is the shared worker lifecycle (machines/worker/lifecycle.ts).
import type { TtsParams } from '../../src/store/profile.schema.js';
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { TtsLaunch } from './ttsWorker.types.js';

export const TTS_WORKER_LIMITS = { loadTimeLimitMs: 300_000, terminationGraceMs: 10_000 } as const;

/** What a start of the TTS worker runs: its profile snapshot's backend, device and server command. */
export function ttsLaunch(start: WorkerStart): TtsLaunch {
  const { params } = start.profile as { params: TtsParams };
  return { generation: start.generation, profileId: start.profileId, revision: start.revision, backend: params.backend, device: params.device, command: params.command };
}

export const ttsWorkerMachine = lifecycleMachine<TtsLaunch, 'tts'>({
  id: 'ttsWorker',
  kind: 'tts',
  name: 'text-to-speech worker',
  limits: TTS_WORKER_LIMITS,
  launch: ttsLaunch,
  rows: {
    start: 'unloaded | first speech request | the designated GPU has at least 7 GiB free (checked by the supervisor) | loaded: worker stays ready for further requests',
    cancel: 'loading | endpoint stop before the engine was ready | | unloaded: the start is aborted',
    unload: 'loaded | exclusive image or video mode, incompatible GPU profile change, endpoint stop | | unloaded: only our own worker is ended',
    error: 'loaded | the engine ended on its own | | unloaded: noticed at once, its request gets 502 worker_failed',
  },
});
