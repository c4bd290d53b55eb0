// Events, context and input of the TTS worker (spec 3.4): the speech synthesis worker, on the CPU
// or on one designated GPU, kept ready for further requests once loaded.
import type { EngineCommand, EngineInput as LifecycleEngineInput, LifecycleContext, LifecycleEmitted, LifecycleEvent, LifecycleInput } from '../worker/lifecycle.js';

/** What one start of the TTS worker runs: the profile snapshot's backend and defaults. */
export interface TtsLaunch {
  generation: number;
  profileId: string;
  revision: number;
  backend: 'espeak-ng' | 'openai-server';
  /** `cpu` or the designated GPU's UUID. */
  device: string;
  /** openai-server: the command line that starts the speech server. */
  command: string[] | undefined;
}

export type TtsWorkerEvent = LifecycleEvent;
export type TtsWorkerEmitted = LifecycleEmitted<'tts'>;
export type TtsWorkerContext = LifecycleContext<TtsLaunch>;
/** loadTimeLimitMs (default 5 min), terminationGraceMs (default 10 s). */
export type TtsWorkerInput = LifecycleInput;
export type { EngineCommand };
/** The engine process actor's input: the start's launch. */
export type EngineInput = LifecycleEngineInput<TtsLaunch>;
