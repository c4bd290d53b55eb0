// The queue's only child: one expiry timer per waiting job (and a grace timer for a job whose
// wait limit the supervisor held). It is a machine with a named delay, so a simulated clock drives
// it in tests exactly as the real clock does in the service.
import { sendParent, setup } from 'xstate';

export interface ExpiryInput {
  jobId: string;
  limitMs: number;
  /** What it tells the queue when the time is up: the wait limit (default), or the end of a hold's grace. */
  event?: 'job.expired' | 'job.graceEnded';
}

export const expiryTimer = setup({
  types: { input: {} as ExpiryInput, context: {} as ExpiryInput },
  delays: { queueWaitLimit: ({ context }) => context.limitMs },
}).createMachine({
  id: 'expiryTimer',
  context: ({ input }) => input,
  initial: 'counting',
  states: {
    counting: {
      after: {
        queueWaitLimit: {
          target: 'expired',
          actions: sendParent(({ context }) => ({ type: context.event ?? 'job.expired', jobId: context.jobId })),
          description: 'the job waited the maximum wait (600 s), or the grace after a hold of its limit ended',
        },
      },
    },
    expired: { type: 'final' },
  },
});

export const queueActors = { expiryTimer };
