// Events, context and input of the chat worker (spec 3.2): one llama-server process at a time.
import type { EngineCommand, EngineInput as LifecycleEngineInput, LifecycleContext, LifecycleEmitted, LifecycleEvent, LifecycleInput } from '../worker/lifecycle.js';

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

/** worker.start / worker.unload from the supervisor's side; engine.spawned (pid, port), engine.ready, engine.exited from the llama-server actor. */
export type ChatWorkerEvent = LifecycleEvent;
/** Sent by the machine to its llama-server actor: engine.stop (SIGTERM), engine.kill (SIGKILL). */
export type { EngineCommand };
export type ChatWorkerEmitted = LifecycleEmitted<'chat'>;
export type ChatWorkerContext = LifecycleContext<ChatLaunch>;
/** loadTimeLimitMs (default 10 min), terminationGraceMs (default 10 s). */
export type ChatWorkerInput = LifecycleInput;
/** The llama-server actor's input: the start's launch. */
export type EngineInput = LifecycleEngineInput<ChatLaunch>;
