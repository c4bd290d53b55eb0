// The endpoint stop, the end of the service and the operator's explicit unload, as pure steps
// (effects.ts).
//
// - (3.1, 7) endpoint stop: waiting requests are discarded and no new ones accepted
//   (`discard`); then every worker is unloaded (`unloadAll`); the route hears the reply once every
//   worker is gone (workerReports.ts, `replyUnloadWaiters`). A bound listener accepts again
//   (`opened`), also after a stop whose unloads were never all confirmed.
// - The listener is off for good (`closeDown`): what waits is refused, what runs is revoked, every
//   worker is unloaded; the supervisor's `closing` state waits for their reports.
// - (3.2) "loaded | explicit unload in the chat test | no active requests | unloaded; with active
//   requests the unload is rejected" (`unloadRequest`, also the console's unload).
import { DENIALS, deny, Draft, revoke, revokePreloads, unload, type StepResult } from './effects.js';
import { runningOn } from './schedule.js';
import type { SupervisorContext, SupervisorEvent } from './supervisor.types.js';
import { WORKER_KINDS } from './supervisor.types.js';

type Of<T extends SupervisorEvent['type']> = Extract<SupervisorEvent, { type: T }>;

export function discard(context: SupervisorContext, event: Of<'endpoint.discard'>): StepResult {
  return {
    context: { ...context, accepting: false },
    effects: [
      { type: 'toQueue', event: { type: 'queue.discardAll' } },
      { type: 'reply', requestId: event.requestId, outcome: { ok: true } },
    ],
  };
}

/** The inference listener is bound again: a stop that never saw every unload confirmed no longer blocks new jobs. */
export function opened(context: SupervisorContext): StepResult {
  return { context: { ...context, accepting: true, unloadWaiters: [] }, effects: [] };
}

export function unloadAll(context: SupervisorContext, event: Of<'workers.unloadAll'>): StepResult {
  const draft = new Draft(context);
  revoke(draft, () => true, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
  for (const kind of WORKER_KINDS) unload(draft, kind, 'endpoint_stop', 'endpoint stop');
  draft.set({ accepting: false, unloadWaiters: [...context.unloadWaiters, event.requestId] });
  return draft.result();
}

/** The listener is off for good: refuse what waits, revoke what runs, unload every worker. */
export function closeDown(context: SupervisorContext): StepResult {
  const draft = new Draft(context);
  for (const [jobId, job] of Object.entries(context.jobs)) {
    if (job.phase !== 'running') deny(draft, jobId, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
  }
  revoke(draft, () => true, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
  for (const kind of WORKER_KINDS) unload(draft, kind, 'shutdown', 'the service is ending');
  draft.set({ checking: null, accepting: false });
  return draft.result();
}

export function unloadRequest(context: SupervisorContext, event: Of<'worker.unloadRequest'>): StepResult {
  // The enhancer lives inside an image job: a running image job is its active request.
  const active = runningOn(context.jobs, event.kind === 'enhancer' ? 'image' : event.kind);
  if (active > 0) {
    const message = `the ${event.kind} worker has ${active} active request(s): the unload is rejected`;
    return { context, effects: [{ type: 'reply', requestId: event.requestId, outcome: { ok: false, code: 'active_requests', message } }] };
  }
  const draft = new Draft(context);
  revokePreloads(draft, event.kind, 'explicit unload');
  unload(draft, event.kind, 'operator', 'explicit unload by the operator (the chat test or the console)');
  draft.do({ type: 'reply', requestId: event.requestId, outcome: { ok: true } });
  return draft.result();
}
