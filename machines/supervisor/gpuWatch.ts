// The GPU watch's step (spec 3.2, 7): the probe's latest view of the GPUs (`gpu.inventory`), as a
// pure step (effects.ts).
//
// - "additional foreign GPU process during operation → unloaded: only the service's own worker is
//   ended": a compute process that is not ours on a GPU the chat worker uses ends the chat worker
//   and takes back its running jobs' reservations. Foreign processes are never signalled.
// - A lost worker (its process outlived SIGKILL) keeps its memory reserved until the probe no
//   longer shows its process on any GPU of its plan; then its kind may start anew.
// The watcher runs while either can happen (`gpuWatchNeeded`: the supervisor's `gpuWatch` region).
import { Draft, emptyWorker, revoke, unload, type StepResult } from './effects.js';
import type { GpuView, SupervisorContext, SupervisorEvent, WorkerKind, WorkerRecord } from './supervisor.types.js';
import { WORKER_KINDS } from './supervisor.types.js';

/**
 * Lost workers whose process the GPU probe no longer shows on any GPU of their plan: their memory
 * is free again, and their kind may start anew. A lost worker without GPUs waits for its exit.
 */
export function releaseLost(draft: Draft, gpus: GpuView[]): void {
  for (const kind of WORKER_KINDS) {
    const w = draft.workers[kind];
    const on = w.plan?.gpus ?? [];
    if (w.state !== 'lost' || on.length === 0) continue;
    const seen = gpus.some((g) => on.includes(g.uuid) && g.processes.some((p) => p.pid === w.pid));
    if (!seen) draft.setWorker(kind, emptyWorker(kind, `its lost process (pid ${w.pid}) is gone from its GPUs: its memory is free`));
  }
}

/** Foreign compute processes on the GPUs the chat worker uses. */
function foreignOnChatGpus(workers: Record<WorkerKind, WorkerRecord>, gpus: GpuView[]): { uuid: string; pids: number[] } | undefined {
  const chat = workers.chat;
  if (chat.state !== 'loaded' && chat.state !== 'loading') return undefined;
  const own = new Set(Object.values(workers).flatMap((w) => (w.pid === null ? [] : [w.pid])));
  for (const uuid of chat.plan?.gpus ?? []) {
    const pids = gpus.find((g) => g.uuid === uuid)?.processes.filter((p) => !own.has(p.pid)).map((p) => p.pid) ?? [];
    if (pids.length > 0) return { uuid, pids };
  }
  return undefined;
}

/** Whether the GPU watcher runs: the chat worker holds a GPU, or a lost worker does. */
export function gpuWatchNeeded(context: SupervisorContext): boolean {
  const chat = context.workers.chat;
  if ((chat.state === 'loading' || chat.state === 'loaded') && (chat.plan?.gpus.length ?? 0) > 0) return true;
  return WORKER_KINDS.some((k) => context.workers[k].state === 'lost' && (context.workers[k].plan?.gpus.length ?? 0) > 0);
}

/** The probe's view: lost workers gone from their GPUs are released; a foreign process beside the chat worker ends it. */
export function inventory(context: SupervisorContext, event: Extract<SupervisorEvent, { type: 'gpu.inventory' }>): StepResult {
  const draft = new Draft(context);
  draft.set({ gpus: event.gpus });
  releaseLost(draft, event.gpus);
  const foreign = foreignOnChatGpus(draft.workers, event.gpus);
  if (!foreign) return draft.result();
  const reason = `a foreign process (pid ${foreign.pids.join(', ')}) appeared on GPU ${foreign.uuid}: only our own chat worker is ended`;
  revoke(draft, (job) => job.worker === 'chat', 'resources_busy', reason);
  unload(draft, 'chat', 'foreign_process', reason);
  return draft.result();
}
