// Events, context and input of the chat worker (spec 3.2): one llama-server process at a time.
import type { ExitReport } from '../worker.types.js';

/** What one start of the chat worker runs: the profile snapshot's stored parameters and the fit. */
export interface ChatLaunch {
  /** The start's generation from the supervisor's grant; every report names it. */
  generation: number;
  profileId: string;
  revision: number;
  /** The API profile name: the worker answers under it (`--alias`). */
  name: string;
  /** `-m`: the GGUF file. */
  model: string;
  /** `-c`: the total context, as stored. */
  context: number;
  /** `-np`: the slot count, as stored. */
  slots: number;
  /** `-ngl` from the memory check; null on the CPU. */
  gpuLayers: number | null;
  /** `-ts` from the memory check; null for one GPU or the CPU. */
  tensorSplit: number[] | null;
  /** `-ot` overrides from the build's own fit. */
  overrides: string[];
  /** GPUs the worker may see (CUDA_VISIBLE_DEVICES), in UUID order; empty on the CPU. */
  gpus: string[];
}

export type ChatWorkerEvent =
  /** The grant that started this generation (its job's route sends it). */
  | { type: 'worker.start'; launch: ChatLaunch }
  /** The supervisor's unload command for this generation (switch, image job, foreign process, explicit unload, cancel). */
  | { type: 'worker.unload'; generation: number; reason: string }
  /** From the server process actor. */
  | { type: 'server.spawned'; pid: number; port: number }
  | { type: 'server.ready' }
  | { type: 'server.exited'; report: ExitReport };

/** Sent by the machine to its server process actor. */
export type ServerCommand = { type: 'server.stop' } | { type: 'server.kill' };

export type ChatWorkerEmitted =
  | { type: 'worker.started'; kind: 'chat'; generation: number; pid: number }
  | { type: 'worker.loaded'; kind: 'chat'; generation: number }
  | { type: 'worker.exited'; kind: 'chat'; generation: number; cause: string; message: string };

export interface ChatWorkerContext {
  launch: ChatLaunch | null;
  pid: number | null;
  port: number | null;
  /** Why the worker is being unloaded, or the failure that ends it (then reported as `worker.exited`). */
  stopping: { reason: string; failure: { cause: string; message: string } | null } | null;
  /** The last unload reason or diagnosis, for the status. */
  last: string | null;
  loadTimeLimitMs: number;
  terminationGraceMs: number;
}

export interface ChatWorkerInput {
  /** How long the model may take to load before the start counts as failed (default 10 min). */
  loadTimeLimitMs?: number;
  /** SIGTERM, then SIGKILL after this grace (default 10 s). */
  terminationGraceMs?: number;
}
