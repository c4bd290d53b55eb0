// Spec 4.7, the prompt enhancer: "loaded on demand before the image worker, runs across both GPUs
// with CPU offload if needed, and is ended before the image worker starts."
//
// It has no jobs of its own. An image job (API, image test) or the console's preview whose profile
// has the task on gets, with its grant of every GPU, an enhancer start first (the supervisor's
// image row: chat and TTS unloaded, enhancer loaded, enhancer ended, image worker started). The
// supervisor sends `worker.start` with that grant; the job asks its one question once the start is
// loaded, and tells the supervisor `enhancer.done`; the supervisor's unload ends the process. The process life is the
// shared worker lifecycle (machines/worker/lifecycle.ts): loading until llama-server's `/health`
// answers 200, loaded for the one request, unloading with SIGTERM and then SIGKILL after a grace.
// A process that dies on its own is reported at once; its job ends with 502 enhancer_failed.
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { EnhancerLaunch } from './enhancerWorker.types.js';

export const ENHANCER_WORKER_LIMITS = { loadTimeLimitMs: 600_000, terminationGraceMs: 10_000 } as const;

/** What a start of the enhancer runs: its image job's enhancer step (the installed model, the task, the projector) and the memory check's fit. */
export function enhancerLaunch(start: WorkerStart): EnhancerLaunch {
  const step = start.enhancer;
  if (!step) throw new Error('an enhancer start names its image job\'s enhancer step');
  const { plan } = start;
  return {
    generation: start.generation,
    profileId: start.profileId,
    revision: start.revision,
    name: `prompt-enhancer-${step.task}`,
    model: step.model,
    context: step.context,
    slots: 1,
    gpuLayers: plan.gpuLayers,
    tensorSplit: plan.tensorSplit,
    overrides: plan.overrides,
    gpus: start.gpus,
    task: step.task,
    mmproj: step.mmproj,
  };
}

export const enhancerWorkerMachine = lifecycleMachine<EnhancerLaunch, 'enhancer'>({
  id: 'enhancerWorker',
  kind: 'enhancer',
  name: 'prompt enhancer',
  limits: ENHANCER_WORKER_LIMITS,
  launch: enhancerLaunch,
  timeoutMessage: (seconds) => `The prompt enhancer did not finish loading within ${seconds} s (timeout); it was stopped.`,
  rows: {
    start:
      'unloaded | image job or preview whose profile has the task on | every GPU reserved, chat and TTS unloaded, enhancer installed | loaded: llama-server with the enhancer model (and its projector for i2i), the build fit across all GPUs with CPU offload',
    cancel: 'loading | the client left, the test was cancelled, or the endpoint stopped | | unloaded: the start is aborted',
    unload: 'loaded | the enhancer answered, or its answer failed | | unloaded: the enhancer is ended before the image worker starts',
    error: 'the process died: noticed at once, the job ends with 502 enhancer_failed (never the original prompt silently)',
  },
});
