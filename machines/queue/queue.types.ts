// Events, context and input of the queue machine (spec 3.7).

export type JobKind = 'chat' | 'image' | 'tts' | 'stt';

/**
 * `api`: an inference request; `test`: the operator's test, which needs no publication;
 * `preload`: the warm audio policy loading its selected profile (spec 3.6), which needs none either.
 */
export type JobSource = 'api' | 'test' | 'preload';

export interface QueuedJob {
  id: string;
  kind: JobKind;
  source: JobSource;
  /** The profile the job was accepted with; null for jobs that need none. */
  profileId: string | null;
  /** The profile revision of the snapshot the job took when it was accepted. */
  revision: number | null;
  /** When it was queued (the adapter's clock), for the waited time in diagnostics. */
  at: number;
}

export interface QueueInput {
  /** At most this many jobs wait (spec: 16). */
  maxWaiting?: number;
  /** A job waits at most this long (spec: 600 s). */
  maxWaitMs?: number;
  /** The Retry-After hint given with `queue_full`. */
  retryAfterSeconds?: number;
  /** Under the supervisor: every outcome is also sent to the parent, which plans by the tickets. */
  reportToParent?: boolean;
}

export interface QueueContext {
  /** The waiting jobs in FIFO order: the one place that keeps the order. */
  jobs: QueuedJob[];
  /** Tickets handed out: each job that waits gets the next, so a lower ticket waited first. */
  tickets: number;
  maxWaiting: number;
  maxWaitMs: number;
  retryAfterSeconds: number;
  reportToParent: boolean;
}

export type RejectionCode = 'queue_full' | 'queue_timeout' | 'profile_changed' | 'endpoint_stopped';

export type QueueEvent =
  | { type: 'job.enqueue'; job: QueuedJob }
  /** The supervisor granted the job its reservation: it leaves the queue to run. */
  | { type: 'job.dispatch'; jobId: string }
  /** The client went away: the job leaves at once, nobody is answered. */
  | { type: 'job.cancel'; jobId: string }
  /** From the job's own expiry timer. */
  | { type: 'job.expired'; jobId: string }
  /**
   * A profile got a new revision (`revision`), was deleted (`revision: null`), or was unpublished
   * (`published: false`: waiting API jobs go, the operator's tests need no publication and stay).
   */
  | { type: 'profile.changed'; profileId: string; revision: number | null; published: boolean }
  /** Endpoint stop: every waiting job is rejected. */
  | { type: 'queue.discardAll' };

export type QueueEmitted =
  /** `ticket`: its place in the FIFO order, for good (lower goes first); `position`: among the requests waiting now. */
  | { type: 'job.queued'; jobId: string; position: number; ticket: number }
  | { type: 'job.rejected'; jobId: string; code: RejectionCode; retryAfterSeconds?: number }
  | { type: 'job.dispatched'; jobId: string }
  | { type: 'job.removed'; jobId: string };
