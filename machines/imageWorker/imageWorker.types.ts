// Events, context and input of the image worker (spec 3.3): one image process per image.
import type { EngineCommand, EngineInput as LifecycleEngineInput, LifecycleContext, LifecycleEmitted, LifecycleEvent, LifecycleInput } from '../worker/lifecycle.js';

/**
 * What one start of the image worker runs: the profile snapshot's files and settings and the GPUs
 * of the reservation. The job's own part is not here (its prompt, its private folder and reference
 * images): the prompt never enters a machine's context (the inspector would show it); the adapter
 * keeps them for the one process, as the job hands them over.
 */
export interface ImageLaunch {
  generation: number;
  profileId: string;
  revision: number;
  model: string;
  files: { vae?: string | undefined; llm?: string | undefined; clip_l?: string | undefined; t5xxl?: string | undefined };
  width: number;
  height: number;
  steps: number;
  guidance: number;
  cfgScale: number;
  seed: number;
  /** Every GPU of the reservation (an image job reserves them all); empty on the CPU. */
  gpus: string[];
}

/** The job's own part of one image: its prompt and the reference images in its job folder, in the client's order (edits). */
export interface ImagePrompt {
  prompt: string;
  references: string[];
}

export type ImageWorkerEvent = LifecycleEvent;
export type ImageWorkerEmitted = LifecycleEmitted<'image'>;
export type ImageWorkerContext = LifecycleContext<ImageLaunch>;
/** loadTimeLimitMs: the longest one image may take (default 60 min); terminationGraceMs (default 10 s). */
export type ImageWorkerInput = LifecycleInput;
export type { EngineCommand };
export type EngineInput = LifecycleEngineInput<ImageLaunch>;
