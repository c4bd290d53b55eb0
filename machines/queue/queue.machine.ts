// Spec 3.7, the queue:
//
// - FIFO queue: at most 16 waiting jobs; maximum wait 600 seconds.
// - Waiting requests of a changed or deactivated profile are rejected. They may be sent again.
// - Running requests continue with their already adopted profile.
// - (7) endpoint stopped: waiting requests are discarded.
// - Beyond the spec (CONTRACT 9): a switch that chats for the loaded profile went ahead of does not
//   expire because of them. While one of them runs the supervisor holds the switch's wait limit
//   (`job.hold`); once none runs (`job.unhold`) the limit applies again, but not before a grace for
//   the switch itself (the unload and memory check it waits for) has passed.
//
// The queue only holds and drops jobs; which job runs next is the supervisor's decision (it sends
// `job.dispatch`). The queue alone keeps the waiting order: each job that waits gets a ticket,
// and a lower ticket waited first. Every outcome is emitted with the job's id; under the
// supervisor (`reportToParent`) it is also sent to the parent, which plans by the tickets.
import { enqueueActions, setup } from 'xstate';
import { queueActors } from './queue.actors.js';
import type { QueueContext, QueueEmitted, QueueEvent, QueueInput, QueuedJob, RejectionCode } from './queue.types.js';

/** The part of `enqueue` that reports an outcome. */
interface Teller {
  emit(event: QueueEmitted): void;
  sendParent(event: QueueEmitted): void;
}

/** Emits an outcome, and sends it to the supervisor when the queue runs under one. */
function tell(enqueue: Teller, context: QueueContext, outcome: QueueEmitted): void {
  enqueue.emit(outcome);
  if (context.reportToParent) enqueue.sendParent(outcome);
}

/** Whether a waiting job is stale after a profile change (spec 3.7). */
export function staleAfter(job: QueuedJob, change: Extract<QueueEvent, { type: 'profile.changed' }>): boolean {
  if (job.profileId !== change.profileId) return false;
  return change.revision === null || job.revision !== change.revision || (!change.published && job.source === 'api');
}

export const QUEUE_LIMITS = { maxWaiting: 16, maxWaitMs: 600_000, retryAfterSeconds: 10 } as const;

const timerId = (jobId: string) => `expiry-${jobId}`;
const graceId = (jobId: string) => `grace-${jobId}`;

/** The queue's context without the job `jobId`'s hold. */
function withoutHold(context: QueueContext, jobId: string): Pick<QueueContext, 'holds' | 'overdue'> {
  const { [jobId]: _gone, ...holds } = context.holds;
  return { holds, overdue: context.overdue.filter((id) => id !== jobId) };
}

export const queueMachine = setup({
  types: {
    context: {} as QueueContext,
    events: {} as QueueEvent,
    input: {} as QueueInput,
    emitted: {} as QueueEmitted,
  },
  actors: queueActors,
  guards: {
    /** At most 16 requests wait; a warm preload (spec 3.6) takes no request's place. */
    queueFull: ({ context, event }) =>
      event.type === 'job.enqueue' && event.job.source !== 'preload' && context.jobs.filter((job) => job.source !== 'preload').length >= context.maxWaiting,
    isWaiting: ({ context, event }) => 'jobId' in event && context.jobs.some((job) => job.id === event.jobId),
    queueEmptied: ({ context }) => context.jobs.length === 0,
    /** The supervisor holds the job's wait limit, or the grace after its hold still runs. */
    limitHeld: ({ context, event }) => 'jobId' in event && context.holds[event.jobId] !== undefined,
    heldWaiting: ({ context, event }) => 'jobId' in event && context.holds[event.jobId] === 'held',
    /** The job's wait limit passed while it was held, and its grace has ended. */
    overdue: ({ context, event }) => 'jobId' in event && context.overdue.includes(event.jobId),
  },
  actions: {
    enqueue: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.enqueue') return;
      const jobs = [...context.jobs, event.job];
      const ticket = context.tickets + 1;
      enqueue.assign({ jobs, tickets: ticket });
      enqueue.spawnChild('expiryTimer', { id: timerId(event.job.id), input: { jobId: event.job.id, limitMs: context.maxWaitMs } });
      const requests = jobs.filter((job) => job.source !== 'preload').length;
      tell(enqueue, context, { type: 'job.queued', jobId: event.job.id, position: event.job.source === 'preload' ? jobs.length : requests, ticket });
    }),
    rejectFull: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.enqueue') return;
      tell(enqueue, context, { type: 'job.rejected', jobId: event.job.id, code: 'queue_full', retryAfterSeconds: context.retryAfterSeconds });
    }),
    /** Removes the event's job; `outcome` says what its waiting route hears. */
    remove: enqueueActions(({ context, event, enqueue }, params: { outcome: 'dispatched' | 'removed' | RejectionCode }) => {
      if (!('jobId' in event)) return;
      enqueue.assign({ jobs: context.jobs.filter((job) => job.id !== event.jobId), ...withoutHold(context, event.jobId) });
      enqueue.stopChild(timerId(event.jobId));
      enqueue.stopChild(graceId(event.jobId));
      if (params.outcome === 'dispatched') tell(enqueue, context, { type: 'job.dispatched', jobId: event.jobId });
      else if (params.outcome === 'removed') tell(enqueue, context, { type: 'job.removed', jobId: event.jobId });
      else tell(enqueue, context, { type: 'job.rejected', jobId: event.jobId, code: params.outcome });
    }),
    /** Rejects every waiting job that `select` picks with `code`, keeping the others in order. */
    rejectWhere: enqueueActions(({ context, event, enqueue }, params: { code: RejectionCode }) => {
      const stale = (job: QueuedJob) => event.type === 'queue.discardAll' || (event.type === 'profile.changed' && staleAfter(job, event));
      const rejected = context.jobs.filter(stale);
      const gone = new Set(rejected.map((job) => job.id));
      const holds = Object.fromEntries(Object.entries(context.holds).filter(([id]) => !gone.has(id)));
      enqueue.assign({ jobs: context.jobs.filter((job) => !stale(job)), holds, overdue: context.overdue.filter((id) => !gone.has(id)) });
      for (const job of rejected) {
        enqueue.stopChild(timerId(job.id));
        enqueue.stopChild(graceId(job.id));
        tell(enqueue, context, { type: 'job.rejected', jobId: job.id, code: params.code });
      }
    }),
    /** A job that went ahead of this one runs: its wait limit is held (and a grace that ran is void). */
    hold: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.hold') return;
      enqueue.stopChild(graceId(event.jobId));
      enqueue.assign({ holds: { ...context.holds, [event.jobId]: 'held' } });
    }),
    /** None runs any more: the limit applies again once `graceMs` has passed. */
    unhold: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.unhold') return;
      enqueue.assign({ holds: { ...context.holds, [event.jobId]: 'grace' } });
      enqueue.spawnChild('expiryTimer', { id: graceId(event.jobId), input: { jobId: event.jobId, limitMs: event.graceMs, event: 'job.graceEnded' } });
    }),
    /** Its limit passed while held: it expires when its grace ends, if it still waits then. */
    markOverdue: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.expired') return;
      enqueue.assign({ overdue: [...context.overdue, event.jobId] });
    }),
    graceEnded: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'job.graceEnded') return;
      enqueue.assign(withoutHold(context, event.jobId));
    }),
  },
}).createMachine({
  id: 'queue',
  context: ({ input }) => ({
    jobs: [],
    tickets: 0,
    maxWaiting: input.maxWaiting ?? QUEUE_LIMITS.maxWaiting,
    maxWaitMs: input.maxWaitMs ?? QUEUE_LIMITS.maxWaitMs,
    retryAfterSeconds: input.retryAfterSeconds ?? QUEUE_LIMITS.retryAfterSeconds,
    reportToParent: input.reportToParent ?? false,
    holds: {},
    overdue: [],
  }),
  initial: 'idle',
  on: {
    'job.enqueue': [
      {
        guard: 'queueFull',
        actions: 'rejectFull',
        description: 'queue full (16 waiting): the job is refused with queue_full and Retry-After',
      },
      { target: '.waiting', actions: 'enqueue', description: 'the job waits at the end of the FIFO queue' },
    ],
  },
  states: {
    idle: {
      description: 'nobody waits',
    },
    waiting: {
      description: 'jobs wait in FIFO order, each at most 600 s',
      always: { guard: 'queueEmptied', target: 'idle' },
      on: {
        'job.dispatch': {
          guard: 'isWaiting',
          actions: { type: 'remove', params: { outcome: 'dispatched' } },
          description: 'the supervisor granted the job: it leaves the queue to run',
        },
        'job.cancel': {
          guard: 'isWaiting',
          actions: { type: 'remove', params: { outcome: 'removed' } },
          description: 'a client that disconnects leaves the queue at once',
        },
        'job.expired': [
          {
            guard: 'limitHeld',
            actions: 'markOverdue',
            description: 'waiting over 600 seconds while its limit is held (a job that went ahead of it runs, or the grace after it): it does not expire yet',
          },
          {
            guard: 'isWaiting',
            actions: { type: 'remove', params: { outcome: 'queue_timeout' } },
            description: 'waiting over 600 seconds: the job expires with queue_timeout',
          },
        ],
        'job.hold': {
          guard: 'isWaiting',
          actions: 'hold',
          description: 'a job that went ahead of it runs (swap-aware order): its wait limit is held',
        },
        'job.unhold': {
          guard: 'heldWaiting',
          actions: 'unhold',
          description: 'no job that went ahead of it runs any more: its limit applies again after a grace',
        },
        'job.graceEnded': [
          {
            guard: 'overdue',
            actions: { type: 'remove', params: { outcome: 'queue_timeout' } },
            description: 'the grace after its hold ended and its 600 seconds have passed: the job expires with queue_timeout',
          },
          { actions: 'graceEnded', description: 'the grace after its hold ended within its 600 seconds: its own limit counts as before' },
        ],
        'profile.changed': {
          actions: { type: 'rejectWhere', params: { code: 'profile_changed' } },
          description: 'waiting requests of a changed or deactivated profile are rejected; they may be sent again',
        },
        'queue.discardAll': {
          actions: { type: 'rejectWhere', params: { code: 'endpoint_stopped' } },
          description: 'endpoint stopped: waiting requests are discarded',
        },
      },
    },
  },
});
