// Events, context and input of the STT worker (spec 3.5): one speech-to-text engine process on
// the CPU, loaded at the first transcription and kept loaded for further recordings.
import type { ExitReport } from '../worker.types.js';

/** What one start of the STT worker runs: the profile snapshot's engine and model. */
export interface SttLaunch {
  /** The start's generation from the supervisor's grant; every report names it. */
  generation: number;
  profileId: string;
  revision: number;
  backend: 'pocketsphinx' | 'whisper.cpp';
  /** The model file (whisper.cpp), or undefined for pocketsphinx's packaged en-us model. */
  model: string | undefined;
  threads: number;
}

export type SttWorkerEvent =
  /** The grant that started this generation (its job sends it). */
  | { type: 'worker.start'; launch: SttLaunch }
  /** The supervisor's unload command: endpoint stop, a new build, a per-request policy. */
  | { type: 'worker.unload'; generation: number; reason: string }
  /** From the engine process actor. */
  | { type: 'engine.spawned'; pid: number }
  | { type: 'engine.ready' }
  | { type: 'engine.exited'; report: ExitReport };

/** Sent by the machine to its engine process actor. */
export type EngineCommand = { type: 'engine.stop' } | { type: 'engine.kill' };

export type SttWorkerEmitted =
  | { type: 'worker.started'; kind: 'stt'; generation: number; pid: number }
  | { type: 'worker.loaded'; kind: 'stt'; generation: number }
  | { type: 'worker.exited'; kind: 'stt'; generation: number; cause: string; message: string };

export interface SttWorkerContext {
  launch: SttLaunch | null;
  pid: number | null;
  /** Why the worker is being unloaded, or the failure that ends it (then reported as `worker.exited`). */
  stopping: { reason: string; failure: { cause: string; message: string } | null } | null;
  last: string | null;
  loadTimeLimitMs: number;
  terminationGraceMs: number;
}

export interface SttWorkerInput {
  /** How long the model may take to load (default 2 min). */
  loadTimeLimitMs?: number;
  /** SIGTERM, then SIGKILL after this grace (default 5 s). */
  terminationGraceMs?: number;
}
