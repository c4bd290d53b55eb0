// What the worker machines report about their own process, as pure steps (effects.ts). Each
// worker machine reports for itself, naming the start's generation: `worker.started` (its pid is
// ours, never foreign), `worker.loaded`, `worker.unloaded` only once its process is gone,
// `worker.lost` when it outlived SIGKILL (its memory stays reserved until the GPU probe no longer
// shows it), `worker.exited` when it died (its running jobs fail with worker_failed, or
// runtime_missing when its program was gone). A report about an earlier start changes nothing.
// A job whose worker is held by one answer reports `worker.stalled`: when others wait for that
// worker, it is restarted (beyond the spec: a grammar that holds the worker's loop).
import { Draft, emptyWorker, revoke, unchanged, unload, type StepResult } from './effects.js';
import type { SupervisorContext, SupervisorEvent, WorkerKind } from './supervisor.types.js';
import { WORKER_KINDS } from './supervisor.types.js';

type Report = Extract<SupervisorEvent, { type: 'worker.started' | 'worker.loaded' | 'worker.unloaded' | 'worker.lost' | 'worker.exited' }>;
type Stalled = Extract<SupervisorEvent, { type: 'worker.stalled' }>;

export function workerReport(context: SupervisorContext, event: Report): StepResult {
  const current = context.workers[event.kind];
  // A report about an earlier start (late, repeated, or about a process we replaced) changes nothing.
  if (event.generation !== current.generation || current.state === 'unloaded') return unchanged(context);
  const draft = new Draft(context);
  switch (event.type) {
    case 'worker.started':
      // The pid of the process we asked for: from now on it is ours, never foreign.
      if (current.pid === null) draft.setWorker(event.kind, { ...current, pid: event.pid });
      break;
    case 'worker.loaded':
      if (current.state === 'loading') draft.setWorker(event.kind, { ...current, state: 'loaded' });
      if (event.kind === 'chat' && event.loadMs !== undefined && current.profileId !== null && current.revision !== null) {
        draft.set({ chatLoads: { ...context.chatLoads, [current.profileId]: { revision: current.revision, ms: event.loadMs } } });
      }
      break;
    case 'worker.unloaded':
      // Only the unload we asked for ends a worker (or a lost one's process that ended at last).
      if (current.state === 'unloading' || current.state === 'lost') draft.setWorker(event.kind, emptyWorker(event.kind, current.last));
      break;
    case 'worker.lost':
      // The unload failed: the worker keeps its record, its plan and pid, so its memory stays
      // counted, until the probe shows its process gone from its GPUs or it ends.
      if (current.state === 'unloading') {
        const pid = event.pid ?? current.pid;
        draft.setWorker(event.kind, { ...current, state: 'lost', pid, last: `its process (pid ${pid}) did not end after SIGKILL: lost, its memory stays reserved until it is gone` });
      }
      break;
    case 'worker.exited':
      if (current.state === 'unloading' || current.state === 'lost') {
        draft.setWorker(event.kind, emptyWorker(event.kind, current.last));
        break;
      }
      draft.setWorker(event.kind, emptyWorker(event.kind, `${event.cause}: ${event.message}`));
      revoke(draft, (job) => job.worker === event.kind, event.cause === 'runtime_missing' ? 'runtime_missing' : 'worker_failed', event.message);
      break;
  }
  return draft.result();
}

/** The stalled job still runs on that start of its worker, and another job (not a preload) waits for that worker or runs on it. */
export function stallHoldsOthers(context: SupervisorContext, event: Stalled): boolean {
  const worker = context.workers[event.kind];
  const job = context.jobs[event.jobId];
  if (worker.generation !== event.generation || worker.state !== 'loaded' || job?.phase !== 'running' || job.worker !== event.kind) return false;
  return Object.values(context.jobs).some(
    (other) => other.spec.id !== event.jobId && other.spec.source !== 'preload' && (other.phase === 'running' ? other.worker === event.kind : other.spec.kind === event.kind),
  );
}

/**
 * A worker held by one answer while others wait (`stallHoldsOthers`): it is restarted. Every job on
 * it fails with the report's message (a held loop holds them all, and which answer held it cannot
 * be told apart).
 */
export function restartStalled(context: SupervisorContext, event: Stalled): StepResult {
  const draft = new Draft(context);
  revoke(draft, (job) => job.worker === event.kind, 'worker_failed', event.message);
  unload(draft, event.kind, 'stalled', `an answer held the ${event.kind} worker (no token, no answer to a status probe) while others waited: it was restarted`);
  return draft.result();
}

/** Every worker is gone, or lost (nothing more can be done for a process that outlives SIGKILL). */
export function allUnloaded(context: SupervisorContext): boolean {
  const done = (k: WorkerKind) => context.workers[k].state === 'unloaded' || context.workers[k].state === 'lost';
  return WORKER_KINDS.every(done);
}

/** An endpoint stop waits for every worker to be gone: once they are, its routes hear so, and new jobs are accepted again. */
export function replyUnloadWaiters(context: SupervisorContext): StepResult {
  if (context.unloadWaiters.length === 0 || !allUnloaded(context)) return unchanged(context);
  return {
    context: { ...context, unloadWaiters: [], accepting: true },
    effects: context.unloadWaiters.map((requestId) => ({ type: 'reply', requestId, outcome: { ok: true } })),
  };
}
