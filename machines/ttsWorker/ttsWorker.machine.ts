// Spec 3.4, the TTS worker:
//
// | unloaded | first speech request | the designated GPU has at least 7 GiB free | loaded | worker stays ready for further requests |
// | loaded | exclusive image or video mode, incompatible GPU profile change, endpoint stop | | unloaded | foreign GPU processes are never ended |
//
// "A loaded chat profile may coexist with a loaded TTS worker while the 7 GiB condition holds."
// The condition and the unloads are the supervisor's (its memory check, fit.ts: a GPU device needs
// 7 GiB free; an image job unloads the TTS worker first; foreign processes are never signalled).
// The process life is the shared worker lifecycle (machines/worker/lifecycle.ts).
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { TtsLaunch } from './ttsWorker.types.js';

export const TTS_WORKER_LIMITS = { loadTimeLimitMs: 300_000, terminationGraceMs: 10_000 } as const;

export const ttsWorkerMachine = lifecycleMachine<TtsLaunch, 'tts'>({
  id: 'ttsWorker',
  kind: 'tts',
  name: 'text-to-speech worker',
  limits: TTS_WORKER_LIMITS,
  rows: {
    start: 'unloaded | first speech request | the designated GPU has at least 7 GiB free (checked by the supervisor) | loaded: worker stays ready for further requests',
    cancel: 'loading | endpoint stop before the engine was ready | | unloaded: the start is aborted',
    unload: 'loaded | exclusive image or video mode, incompatible GPU profile change, endpoint stop | | unloaded: only our own worker is ended',
    error: 'loaded | the engine ended on its own | | unloaded: noticed at once, its request gets 502 worker_failed',
  },
});
