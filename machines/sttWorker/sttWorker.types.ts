// Events, context and input of the STT worker (spec 3.5): one speech-to-text engine process on
// the CPU, loaded at the first transcription and kept loaded for further recordings.
import type { EngineCommand, EngineInput as LifecycleEngineInput, LifecycleContext, LifecycleEmitted, LifecycleEvent, LifecycleInput } from '../worker/lifecycle.js';

/** What one start of the STT worker runs: the profile snapshot's engine and model. */
export interface SttLaunch {
  generation: number;
  profileId: string;
  revision: number;
  backend: 'pocketsphinx' | 'whisper.cpp';
  /** The model file (whisper.cpp), or undefined for pocketsphinx's packaged en-us model. */
  model: string | undefined;
  threads: number;
}

export type SttWorkerEvent = LifecycleEvent;
export type SttWorkerEmitted = LifecycleEmitted<'stt'>;
export type SttWorkerContext = LifecycleContext<SttLaunch>;
/** loadTimeLimitMs (default 2 min), terminationGraceMs (default 5 s). */
export type SttWorkerInput = LifecycleInput;
export type { EngineCommand };
/** The engine process actor's input: the start's launch. */
export type EngineInput = LifecycleEngineInput<SttLaunch>;
