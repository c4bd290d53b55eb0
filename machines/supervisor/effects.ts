// What a supervisor step decides beside its next context: the effects that the machine's one
// action, `carryOut` (supervisor.machine.ts), carries out with XState's emit, sendTo, raise and
// cancel. Every event's rule is a pure step, `(context, event) → { context, effects }`, in the
// files beside this one, one per subject: reservations.ts (reserve, queue reports, release),
// grants.ts (plan() carried out, the memory check's verdict), workerReports.ts, gpuWatch.ts,
// profiles.ts, enhancer.ts and stop.ts. A step never changes the context it is given: it works on a
// Draft, which copies a map only when one of its records changes, and every record it does not
// change keeps its identity.
//
// The changes that several steps share are here: a denial, a revocation, an unload, a grant on a
// loaded worker, a worker start (its record, and the start order the worker child gets with the
// grant), and leaving the memory check.
import type { QueueEvent } from '../queue/index.js';
import { preloadsOn } from './schedule.js';
import type {
  DenialCode,
  JobRecord,
  JobSpec,
  RevocationCode,
  StartPlan,
  SupervisorContext,
  SupervisorEmitted,
  SupervisorEvent,
  UnloadCode,
  WorkerKind,
  WorkerRecord,
  WorkerStart,
} from './supervisor.types.js';

/** An emitted event's fields, without its type. */
type Emitted<T extends SupervisorEmitted['type']> = Omit<Extract<SupervisorEmitted, { type: T }>, 'type'>;

export type Effect =
  /** `gpu.granted` to the job's route. */
  | ({ type: 'grant' } & Emitted<'gpu.granted'>)
  /** `gpu.denied`: a job that has not run is refused. */
  | ({ type: 'deny' } & Emitted<'gpu.denied'>)
  /** `gpu.revoked`: a running job loses its reservation. */
  | ({ type: 'revoke' } & Emitted<'gpu.revoked'>)
  /** `worker.unload` to the worker child (it reports its own end), and emitted for the adapters and metrics. */
  | ({ type: 'unload' } & Emitted<'worker.unload'>)
  /** `worker.start` to the worker child: the start a grant planned, sent right after that grant. */
  | { type: 'start'; kind: WorkerKind; start: WorkerStart }
  /** `job.queued` to the job's route: its place in the queue. */
  | ({ type: 'queued' } & Emitted<'job.queued'>)
  /** `supervisor.reply` to a route waiting for an answer (an endpoint stop, an explicit unload). */
  | ({ type: 'reply' } & Emitted<'supervisor.reply'>)
  /** An event for the queue child. */
  | { type: 'toQueue'; event: QueueEvent }
  /** An event the supervisor raises to itself after `delay` ms, cancelled by `id`. */
  | { type: 'timer'; id: string; delay: number; event: SupervisorEvent }
  | { type: 'cancelTimer'; id: string }
  /** `check.abandoned`: the job under its memory check left; the check is dropped. */
  | { type: 'abandonCheck' };

export interface StepResult {
  context: SupervisorContext;
  effects: Effect[];
}

/** A step that changes nothing and does nothing. */
export const unchanged = (context: SupervisorContext): StepResult => ({ context, effects: [] });

/**
 * The next context of one step, built without touching the one it started from: the jobs and
 * workers maps are copied on their first change, and records are replaced, never changed.
 */
export class Draft {
  readonly effects: Effect[] = [];
  #jobs: Record<string, JobRecord> | null = null;
  #workers: Record<WorkerKind, WorkerRecord> | null = null;
  #rest: Partial<SupervisorContext> | null = null;

  constructor(readonly before: SupervisorContext) {}

  get jobs(): Record<string, JobRecord> {
    return this.#jobs ?? this.before.jobs;
  }

  get workers(): Record<WorkerKind, WorkerRecord> {
    return this.#workers ?? this.before.workers;
  }

  /** The context as it stands (the one it started from while nothing changed). */
  get context(): SupervisorContext {
    if (this.#jobs === null && this.#workers === null && this.#rest === null) return this.before;
    return { ...this.before, ...this.#rest, jobs: this.jobs, workers: this.workers };
  }

  setJob(id: string, record: JobRecord): void {
    (this.#jobs ??= { ...this.before.jobs })[id] = record;
  }

  dropJob(id: string): void {
    if (!(id in this.jobs)) return;
    delete (this.#jobs ??= { ...this.before.jobs })[id];
  }

  setWorker(kind: WorkerKind, record: WorkerRecord): void {
    (this.#workers ??= { ...this.before.workers })[kind] = record;
  }

  /** Any other part of the context: the job under check, the counters, the policies. */
  set(update: Omit<Partial<SupervisorContext>, 'jobs' | 'workers'>): void {
    this.#rest = { ...this.#rest, ...update };
  }

  do(effect: Effect): void {
    this.effects.push(effect);
  }

  result(): StepResult {
    return { context: this.context, effects: this.effects };
  }
}

/** The id of a waiting chat job's swap-bound timer: cancelled as soon as the job stops waiting. */
export const boundTimer = (jobId: string) => `switch-bound-${jobId}`;

export function emptyWorker(kind: WorkerKind, last: string | null = null): WorkerRecord {
  return { kind, state: 'unloaded', generation: 0, profileId: null, revision: null, slots: 1, pid: null, plan: null, stale: null, last };
}

export const DENIALS: Record<Exclude<DenialCode, 'resources_busy' | 'insufficient_memory' | 'image_busy' | 'start_check_failed' | 'enhancer_failed'>, (c: SupervisorContext) => string> = {
  queue_full: (c) => `The queue is full: ${c.limits.maxWaiting} requests are waiting. Retry later.`,
  queue_timeout: (c) => `The request waited ${c.limits.maxWaitMs / 1000} seconds in the queue without getting its turn.`,
  profile_changed: () => 'The profile changed or was unpublished while the request waited; send it again.',
  endpoint_stopped: () => 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.',
};

/**
 * The job under check after `jobId` left: a job that leaves while its start is checked abandons
 * the check (its facts would belong to no one), even when another job is put under check in the
 * same step.
 */
export function leaveCheck(draft: Draft, jobId: string): void {
  if (draft.before.checking !== jobId) return;
  draft.do({ type: 'abandonCheck' });
  draft.set({ checking: null });
}

/** Removes a job that has not run and tells its route why. */
export function deny(draft: Draft, jobId: string, code: DenialCode, message: string, retryAfterSeconds?: number): void {
  if (draft.jobs[jobId]?.switchBound) draft.do({ type: 'cancelTimer', id: boundTimer(jobId) });
  draft.dropJob(jobId);
  draft.do(retryAfterSeconds === undefined ? { type: 'deny', jobId, code, message } : { type: 'deny', jobId, code, message, retryAfterSeconds });
}

/** Takes running jobs' reservations back: their routes end them with `code`. */
export function revoke(draft: Draft, select: (job: JobRecord) => boolean, code: RevocationCode, message: string): void {
  for (const [jobId, job] of Object.entries(draft.jobs)) {
    if (job.phase !== 'running' || !select(job)) continue;
    draft.dropJob(jobId);
    draft.do({ type: 'revoke', jobId, code, message });
  }
}

/** A warm preload waiting for a worker that is unloaded for someone else gives way: it is revoked. */
export function revokePreloads(draft: Draft, kind: WorkerKind, reason: string): void {
  const ids = new Set(preloadsOn(draft.jobs, kind));
  if (ids.size > 0) revoke(draft, (job) => ids.has(job.spec.id), 'resources_busy', `the preload gave way: ${reason}`);
}

/** A worker of ours goes: the worker machine carries it out and reports its own `worker.unloaded` (or `worker.lost`). */
export function unload(draft: Draft, kind: WorkerKind, code: UnloadCode, reason: string): void {
  const worker = draft.workers[kind];
  if (worker.state === 'unloaded' || worker.state === 'unloading' || worker.state === 'lost') return;
  draft.setWorker(kind, { ...worker, state: 'unloading', last: reason });
  draft.do({ type: 'unload', kind, generation: worker.generation, code, reason });
}

/** A job runs on a worker loaded (or loading) with its profile: no start, the worker's GPUs. */
export function grantOn(draft: Draft, job: JobRecord, worker: WorkerKind): void {
  if (job.switchBound) draft.do({ type: 'cancelTimer', id: boundTimer(job.spec.id) });
  const { generation, plan } = draft.workers[worker];
  const gpus = plan?.gpus ?? [];
  draft.setJob(job.spec.id, { ...job, phase: 'running', worker, gpus });
  draft.do({ type: 'grant', jobId: job.spec.id, worker, generation, start: null, gpus });
}

/**
 * A worker start the supervisor granted, after the grant that names it: its record is loading, and
 * the worker child gets its start order at once, so no record is loading without a start under
 * way, whatever becomes of the job. `gpus`: what the start may use (an image start: every GPU of
 * its job's reservation).
 */
export function startWorker(draft: Draft, kind: WorkerKind, generation: number, spec: JobSpec, plan: StartPlan, gpus: string[] = plan.gpus): void {
  const slots = kind === 'enhancer' ? 1 : spec.slots;
  draft.setWorker(kind, { kind, state: 'loading', generation, profileId: spec.profileId, revision: spec.revision, slots, pid: null, plan, stale: null, last: null });
  const enhancer = kind === 'enhancer' ? (spec.enhancer ?? null) : null;
  draft.do({ type: 'start', kind, start: { generation, profileId: spec.profileId, revision: spec.revision, profile: spec.profile, plan, gpus, enhancer } });
}
