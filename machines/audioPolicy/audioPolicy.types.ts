// Events, context and input of the audio memory policy (spec 2.4, 3.6): one actor per speech
// worker kind, each independent of the other.
import type { AudioKind, AudioMode, AudioPolicyRecord } from '../../src/store/audioPolicy.record.js';
import type { WorkerState } from '../supervisor/index.js';

export type { AudioKind, AudioMode, AudioPolicyRecord };

/** The supervisor's record of this kind's worker, as the adapter last saw it. */
export interface AudioWorkerView {
  state: WorkerState;
  profileId: string | null;
  /** Its profile got a newer revision or was deleted: it goes as soon as it is idle. */
  stale: boolean;
}

/** Why the last preload did not load the selection; kept until one succeeds or the choice changes. */
export interface PreloadError {
  code: string;
  message: string;
  /** Failed preloads in a row. */
  attempts: number;
}

export interface AudioPolicyContext extends AudioPolicyRecord {
  /** The inference endpoint runs and accepts requests: warm preloads only then. */
  endpointRunning: boolean;
  worker: AudioWorkerView;
  error: PreloadError | null;
  /** How long a failed preload waits before it is tried again. */
  retryMs: number;
}

export interface AudioPolicyInput extends AudioPolicyRecord {
  endpointRunning?: boolean;
  retryMs?: number;
}

/** The preload actor's input: load this profile on this kind's worker and wait until it is ready. */
export interface PreloadInput {
  kind: AudioKind;
  profileId: string;
}

export type AudioPolicyEvent =
  /** The operator's choice, already saved (POST /api/v1/audio-policy). */
  | { type: 'policy.set'; mode: AudioMode; profileId: string | null }
  | { type: 'endpoint.changed'; running: boolean }
  | { type: 'worker.changed'; worker: AudioWorkerView }
  /** A profile was saved or deleted: a failed preload of it is tried again at once. */
  | { type: 'profile.changed'; profileId: string };

/** The supervisor keeps or unloads the worker after its jobs by this mode. */
export type AudioPolicyEmitted = { type: 'policy.mode'; kind: AudioKind; mode: AudioMode };
