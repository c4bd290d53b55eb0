// Events, context and input of the prompt enhancer worker (spec 4.7): one llama-server process per
// image job that has the enhancer on, ended before that job's image worker starts.
import type { ChatLaunch } from '../chatWorker/index.js';
import type { EngineCommand, EngineInput as LifecycleEngineInput, LifecycleContext, LifecycleEmitted, LifecycleEvent, LifecycleInput } from '../worker/lifecycle.js';

/**
 * What one start of the enhancer runs: the installed model (and its projector for reference
 * images), one slot, and where the memory check put it (the build's fit over every GPU of the image
 * reservation, CPU offload for the rest). The prompt is not here: it never enters a machine's
 * context; the adapter sends it in the one request.
 */
export interface EnhancerLaunch extends ChatLaunch {
  task: 't2i' | 'i2i';
  /** `--mmproj`: the projector that reads the reference images (i2i); null for t2i. */
  mmproj: string | null;
}

export type EnhancerWorkerEvent = LifecycleEvent;
export type EnhancerWorkerEmitted = LifecycleEmitted<'enhancer'>;
export type EnhancerWorkerContext = LifecycleContext<EnhancerLaunch>;
/** loadTimeLimitMs (default 10 min: a 20 GB model from disk), terminationGraceMs (default 10 s). */
export type EnhancerWorkerInput = LifecycleInput;
export type { EngineCommand };
export type EngineInput = LifecycleEngineInput<EnhancerLaunch>;
