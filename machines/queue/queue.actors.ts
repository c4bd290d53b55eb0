// The queue's only child: one expiry timer per waiting job. It is a machine with a named delay, so
// a simulated clock drives it in tests exactly as the real clock does in the service.
import { sendParent, setup } from 'xstate';

export interface ExpiryInput {
  jobId: string;
  limitMs: number;
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
          actions: sendParent(({ context }) => ({ type: 'job.expired' as const, jobId: context.jobId })),
          description: 'the job waited the maximum wait (600 s)',
        },
      },
    },
    expired: { type: 'final' },
  },
});

export const queueActors = { expiryTimer };
