// The reservation protocol's steps (spec 3.7): a job asks for its reservation (`gpu.reserve`), the
// queue child reports what became of it (`job.queued`, `job.rejected`, `job.removed`), and the job
// gives it back (`gpu.release`) or its client leaves (`job.cancel`). Each is a pure step,
// `(context, event) → { context, effects }` (effects.ts); who runs next is plan() (schedule.ts),
// carried out by grants.ts after these.
//
// - A job is refused before it waits while the endpoint stops, or when its profile snapshot is
//   older than a save that reached us (it may not reload an old revision).
// - When nobody waits and its loaded worker has a slot free, it is granted at once, without the
//   queue's round trip (`grantAtOnce`, guarded by `runsAtOnce`: FIFO holds, it overtakes nobody).
// - Under the swap-aware order (CONTRACT 9) a queued chat gets its overtaking bound: the longer of
//   the setting and its own profile's last measured load, never above the cap; a timer marks when
//   it passes (`switchBoundReached`). The answer times that decide whether a chat may overtake a
//   waiting switch come with each release (`heldMs`, kept per profile in `chatAnswers`).
import type { QueuedJob } from '../queue/index.js';
import { boundTimer, DENIALS, deny, Draft, grantOn, leaveCheck, unchanged, unload, type StepResult } from './effects.js';
import { runningOn } from './schedule.js';
import type { JobRecord, JobSpec, SupervisorContext, SupervisorEvent } from './supervisor.types.js';
import { ANSWER_WINDOW, SWITCH_MAX_WAIT_CAP_MS } from './supervisor.types.js';

type Of<T extends SupervisorEvent['type']> = Extract<SupervisorEvent, { type: T }>;

/**
 * Why a new job is refused before it waits: the endpoint is stopping, or its profile snapshot was
 * taken before a save that already reached us (it may not reload an old revision); null: accepted.
 */
export function refusal(context: SupervisorContext, job: JobSpec): 'endpoint_stopped' | 'profile_changed' | null {
  if (!context.accepting) return 'endpoint_stopped';
  const latest = context.revisions[job.profileId];
  return latest === null || (latest !== undefined && job.revision < latest) ? 'profile_changed' : null;
}

/** A job asks for its reservation: refused at once, or sent to the queue to wait for its turn. */
export function reserve(context: SupervisorContext, event: Of<'gpu.reserve'>): StepResult {
  const { job } = event;
  if (context.jobs[job.id]) return unchanged(context);
  const code = refusal(context, job);
  if (code !== null) return { context, effects: [{ type: 'deny', jobId: job.id, code, message: DENIALS[code](context) }] };
  const queued: QueuedJob = { id: job.id, kind: job.kind, source: job.source, profileId: job.profileId, revision: job.revision, at: job.at };
  return {
    context: { ...context, jobs: { ...context.jobs, [job.id]: { spec: job, phase: 'submitted', worker: null, gpus: [] } } },
    effects: [{ type: 'toQueue', event: { type: 'job.enqueue', job: queued } }],
  };
}

/** Nobody waits and its worker has a slot free: the job runs now, without the queue's round trip or wait timer. */
export function grantAtOnce(context: SupervisorContext, event: Of<'gpu.reserve'>): StepResult {
  const draft = new Draft(context);
  grantOn(draft, { spec: event.job, phase: 'submitted', worker: null, gpus: [] }, event.job.kind);
  return draft.result();
}

/**
 * The queue's report on a job: queued (its ticket and, for a chat under the swap-aware order, its
 * overtaking bound), rejected (full, timed out, its profile changed, the endpoint stopped), or
 * removed (its client left).
 */
export function fromQueue(context: SupervisorContext, event: Of<'job.queued' | 'job.rejected' | 'job.removed'>): StepResult {
  const job = context.jobs[event.jobId];
  // Reports about jobs that already ran, or already left, change nothing: every job ends once.
  if (!job || job.phase === 'running') return unchanged(context);
  const draft = new Draft(context);
  if (event.type === 'job.queued') {
    if (job.phase !== 'submitted') return unchanged(context);
    // Swap-aware order: a chat may be overtaken by chats for another loaded profile until its
    // bound: the longer of the setting and its own profile's last measured load (what the
    // switch will cost), never above the cap, so that a slow load elsewhere or a large setting
    // cannot hold it back until the queue's wait runs out.
    let switchBound: JobRecord['switchBound'];
    if (context.scheduling.order === 'swap-aware' && job.spec.kind === 'chat' && job.spec.source !== 'preload') {
      const measured = context.chatLoads[job.spec.profileId];
      const loadMs = measured?.revision === job.spec.revision ? measured.ms : 0;
      const ms = Math.min(SWITCH_MAX_WAIT_CAP_MS, Math.max(context.scheduling.switchMaxWaitMs, loadMs));
      switchBound = { ms, reached: false };
      draft.do({ type: 'timer', id: boundTimer(event.jobId), delay: ms, event: { type: 'switch.bound', jobId: event.jobId } });
    }
    draft.setJob(event.jobId, { ...job, phase: 'waiting', ticket: event.ticket, ...(switchBound ? { switchBound } : {}) });
    draft.do({ type: 'queued', jobId: event.jobId, position: event.position });
    return draft.result();
  }
  if (event.type === 'job.rejected') deny(draft, event.jobId, event.code, DENIALS[event.code](context), event.retryAfterSeconds);
  else {
    if (job.switchBound) draft.do({ type: 'cancelTimer', id: boundTimer(event.jobId) });
    draft.dropJob(event.jobId);
  }
  leaveCheck(draft, event.jobId);
  return draft.result();
}

/** The chat answers measured per profile, with one more answer of `spec`'s profile (a new revision starts a new window). */
function withAnswer(answers: SupervisorContext['chatAnswers'], spec: JobSpec, heldMs: number): SupervisorContext['chatAnswers'] {
  const kept = answers[spec.profileId];
  const ms = kept?.revision === spec.revision ? [...kept.ms, heldMs].slice(-ANSWER_WINDOW) : [heldMs];
  return { ...answers, [spec.profileId]: { revision: spec.revision, ms } };
}

/**
 * The job ended (a stream after its last byte), or its client left: a waiting job leaves the
 * queue, a running one frees its reservation; a chat answer's time counts for the overtaking rule.
 * A chat test cancelled during its own worker start aborts that start.
 */
export function release(context: SupervisorContext, event: Of<'gpu.release' | 'job.cancel'>): StepResult {
  const job = context.jobs[event.jobId];
  if (!job) return unchanged(context);
  const draft = new Draft(context);
  draft.dropJob(event.jobId);
  if (job.phase !== 'running') draft.do({ type: 'toQueue', event: { type: 'job.cancel', jobId: event.jobId } });
  if (job.phase !== 'running' && job.switchBound) draft.do({ type: 'cancelTimer', id: boundTimer(event.jobId) });
  // A chat answer's time, grant to release, for the overtaking rule (the loaded profile's p95).
  if (job.phase === 'running' && job.spec.kind === 'chat' && event.heldMs !== undefined) {
    draft.set({ chatAnswers: withAnswer(context.chatAnswers, job.spec, event.heldMs) });
  }
  // loading | cancel in the chat test | own start | unloaded: the start is aborted.
  const kind = job.worker;
  if (event.type === 'job.cancel' && job.spec.source === 'test' && kind && draft.workers[kind].state === 'loading' && runningOn(draft.jobs, kind) === 0) {
    unload(draft, kind, 'operator', `the ${kind} test was cancelled during its own worker start: the start is aborted`);
  }
  leaveCheck(draft, event.jobId);
  return draft.result();
}

/** A waiting switch has waited its bound: from now on nothing overtakes it. */
export function switchBoundReached(context: SupervisorContext, event: Of<'switch.bound'>): StepResult {
  const job = context.jobs[event.jobId];
  if (!job?.switchBound || job.phase === 'running') return unchanged(context);
  return { context: { ...context, jobs: { ...context.jobs, [event.jobId]: { ...job, switchBound: { ...job.switchBound, reached: true } } } }, effects: [] };
}
