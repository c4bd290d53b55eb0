// Spec 3.7, the queue:
//
// - FIFO queue: at most 16 waiting jobs; maximum wait 600 seconds.
// - Waiting requests of a changed or deactivated profile are rejected. They may be sent again.
// - Running requests continue with their already adopted profile.
// - (7) endpoint stopped: waiting requests are discarded.
//
// The queue only holds and drops jobs; which job runs next is the supervisor's decision (it sends
// `job.dispatch`). The queue alone keeps the waiting order: each job that waits gets a ticket,
// and a lower ticket waited first. Every outcome is emitted with the job's id; under the
// supervisor (`reportToParent`) it is also sent to the parent, which plans by the tickets.
import { assertEvent, enqueueActions, setup } from 'xstate';
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
    queueFull: ({ context, event }) => {
      assertEvent(event, 'job.enqueue');
      return event.job.source !== 'preload' && context.jobs.filter((job) => job.source !== 'preload').length >= context.maxWaiting;
    },
    isWaiting: ({ context, event }) => 'jobId' in event && context.jobs.some((job) => job.id === event.jobId),
    queueEmptied: ({ context }) => context.jobs.length === 0,
  },
  actions: {
    enqueue: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'job.enqueue');
      const jobs = [...context.jobs, event.job];
      const ticket = context.tickets + 1;
      enqueue.assign({ jobs, tickets: ticket });
      enqueue.spawnChild('expiryTimer', { id: timerId(event.job.id), input: { jobId: event.job.id, limitMs: context.maxWaitMs } });
      const requests = jobs.filter((job) => job.source !== 'preload').length;
      tell(enqueue, context, { type: 'job.queued', jobId: event.job.id, position: event.job.source === 'preload' ? jobs.length : requests, ticket });
    }),
    rejectFull: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'job.enqueue');
      tell(enqueue, context, { type: 'job.rejected', jobId: event.job.id, code: 'queue_full', retryAfterSeconds: context.retryAfterSeconds });
    }),
    /** Removes the event's job; `outcome` says what its waiting route hears. */
    remove: enqueueActions(({ context, event, enqueue }, params: { outcome: 'dispatched' | 'removed' | RejectionCode }) => {
      if (!('jobId' in event)) return;
      enqueue.assign({ jobs: context.jobs.filter((job) => job.id !== event.jobId) });
      enqueue.stopChild(timerId(event.jobId));
      if (params.outcome === 'dispatched') tell(enqueue, context, { type: 'job.dispatched', jobId: event.jobId });
      else if (params.outcome === 'removed') tell(enqueue, context, { type: 'job.removed', jobId: event.jobId });
      else tell(enqueue, context, { type: 'job.rejected', jobId: event.jobId, code: params.outcome });
    }),
    /** Rejects every waiting job that `select` picks with `code`, keeping the others in order. */
    rejectWhere: enqueueActions(({ context, event, enqueue }, params: { code: RejectionCode }) => {
      assertEvent(event, ['queue.discardAll', 'profile.changed']);
      const stale = (job: QueuedJob) => event.type === 'queue.discardAll' || staleAfter(job, event);
      const rejected = context.jobs.filter(stale);
      enqueue.assign({ jobs: context.jobs.filter((job) => !stale(job)) });
      for (const job of rejected) {
        enqueue.stopChild(timerId(job.id));
        tell(enqueue, context, { type: 'job.rejected', jobId: job.id, code: params.code });
      }
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
        'job.expired': {
          guard: 'isWaiting',
          actions: { type: 'remove', params: { outcome: 'queue_timeout' } },
          description: 'waiting over 600 seconds: the job expires with queue_timeout',
        },
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
