// Spec 3.2, the chat worker: one native llama-style server process that the service starts itself.
//
// | unloaded | first request for a published chat profile, or chat test start | resources free, memory check passes | loaded | worker started with stored parameters |
// | loaded | request for a different profile, or a new revision of the profile | | unloaded, then loaded with the new profile | the own worker is unloaded first |
// | loaded | image job, exclusive video mode or incompatible GPU profile change | | unloaded | |
// | loaded | additional foreign GPU process during operation | | unloaded | only the service's own worker is ended |
// | loaded | explicit unload in the chat test | no active requests | unloaded | with active requests the unload is rejected |
// | loading | cancel in the chat test | own start | unloaded | the start is aborted |
// | loaded | answer finished (chat test) | | loaded | the process stays loaded |
//
// Which of these happens is the supervisor's decision (its reservations, the queue, the memory
// check, the GPU watcher, the active-request check): it grants the start and sends it here with
// the grant (`worker.start`, with the job's profile snapshot and the memory check's plan), and
// commands each unload (`worker.unload`, naming the start's generation). This machine is the process's life (the shared worker lifecycle,
// machines/worker/lifecycle.ts): loading until its `/health` answers 200, loaded, and unloading
// with SIGTERM, then SIGKILL after a grace period. A process that dies on
// its own is reported at once (`worker.exited` with the adapter's diagnosis), so the supervisor
// takes back the reservations of its requests (502 worker_failed). Finishing an answer sends
// nothing here: the process stays loaded.
import type { ChatParams } from '../../src/store/profile.schema.js';
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import { lifecycleMachine } from '../worker/lifecycle.js';
import type { ChatLaunch } from './chatWorker.types.js';

export const CHAT_WORKER_LIMITS = { loadTimeLimitMs: 600_000, terminationGraceMs: 10_000 } as const;

/** What a start of the chat worker runs: its profile snapshot's stored parameters, and the memory check's layers, split and GPUs. */
export function chatLaunch(start: WorkerStart): ChatLaunch {
  const profile = start.profile as { name: string; params: ChatParams };
  const { plan } = start;
  return {
    generation: start.generation,
    profileId: start.profileId,
    revision: start.revision,
    name: profile.name,
    model: profile.params.model,
    context: profile.params.context,
    slots: profile.params.slots,
    gpuLayers: plan.gpuLayers,
    tensorSplit: plan.tensorSplit,
    overrides: plan.overrides,
    gpus: start.gpus,
  };
}

export const chatWorkerMachine = lifecycleMachine<ChatLaunch, 'chat'>({
  id: 'chatWorker',
  kind: 'chat',
  name: 'chat worker',
  limits: CHAT_WORKER_LIMITS,
  launch: chatLaunch,
  rows: {
    start: 'unloaded | first request for a published chat profile, or chat test start | resources free, memory check passes | loaded: worker started with stored parameters',
    cancel: 'loading | cancel in the chat test | own start | unloaded: the start is aborted',
    unload:
      'loaded | a different profile or a new revision, an image job, an incompatible GPU change, a foreign GPU process, or the explicit unload without active requests | unloaded: the own worker is unloaded first',
    error: 'the process died: noticed at once, its requests get 502 worker_failed with the likely cause',
  },
});
