// The audio memory policy (spec 2.4, 3.6), one actor per speech worker kind, independent:
//
// | Mode          | Behaviour                                                                    |
// | `auto`        | load at the first job and keep loaded                                        |
// | `warm`        | preload the selected executable profile while the endpoint runs and reload   |
// |               | it after it is displaced. TTS preloads only in the LLM GPU mode and only     |
// |               | with enough free memory on its GPU. STT loads on the CPU                     |
// | `per_request` | unload after each request                                                    |
//
// "When the runtime is missing or resources are insufficient, the selection stays saved, the error
// appears in the administration API, the preload is retried later and no foreign service is
// interrupted."
//
// Who does what: this machine tells the supervisor the mode (`policy.mode`); the supervisor keeps a
// worker loaded after its job (auto, warm) or unloads it (per_request), and lets a warm preload wait
// its turn without holding anyone up (schedule.ts). The preload itself is a job through the same
// reservation and memory check as a request (the `preload` actor, provided by the adapter), so it
// can never end anything foreign: a start that does not fit is refused, and the refusal is this
// machine's `error` until a retry succeeds.
import { assertEvent, assign, emit, fromPromise, setup } from 'xstate';
import type {
  AudioPolicyContext,
  AudioPolicyEmitted,
  AudioPolicyEvent,
  AudioPolicyInput,
  AudioWorkerView,
  PreloadError,
  PreloadInput,
} from './audioPolicy.types.js';

export const AUDIO_POLICY_LIMITS = {
  /** A failed preload is tried again after this long (or at once when its profile is saved again). */
  retryMs: 30_000,
} as const;

/**
 * Outcomes that are no failure of the selection: the endpoint stopped, the profile changed while
 * the preload waited, or the preload gave way to a request that needed its worker gone.
 */
const NOT_AN_ERROR = new Set(['endpoint_stopped', 'profile_changed', 'displaced']);

/** A preload's rejection as a code and a message (the adapter throws errors with a `code`). */
export function preloadFailure(error: unknown): { code: string; message: string } {
  const candidate = error as { code?: unknown; message?: unknown } | null;
  const code = typeof candidate?.code === 'string' ? candidate.code : 'preload_failed';
  const message = typeof candidate?.message === 'string' ? candidate.message : String(error);
  return { code, message };
}

/** The worker is loaded (or loading) with the current revision of the selected profile. */
const holds = (w: AudioWorkerView, profileId: string | null) => (w.state === 'loaded' || w.state === 'loading') && w.profileId === profileId && !w.stale;

export const audioPolicyMachine = setup({
  types: {
    context: {} as AudioPolicyContext,
    events: {} as AudioPolicyEvent,
    input: {} as AudioPolicyInput,
    emitted: {} as AudioPolicyEmitted,
  },
  actors: {
    /** Placeholder: the adapter reserves the worker for the profile, starts it, and resolves once it is ready. */
    preload: fromPromise<void, PreloadInput>(() => Promise.reject(new Error('no preload adapter provided'))),
  },
  delays: {
    retry: ({ context }) => context.retryMs,
  },
  guards: {
    isWarm: ({ context }) => context.mode === 'warm',
    isPerRequest: ({ context }) => context.mode === 'per_request',
    endpointStopped: ({ context }) => !context.endpointRunning,
    holdsSelection: ({ context }) => holds(context.worker, context.profileId),
    /** The reported worker no longer holds the selection. */
    displaced: ({ context, event }) => {
      assertEvent(event, 'worker.changed');
      return !holds(event.worker, context.profileId);
    },
    /** The reported worker now holds the selection. */
    nowHolds: ({ context, event }) => {
      assertEvent(event, 'worker.changed');
      return holds(event.worker, context.profileId);
    },
    /** `error`: the preload's rejection. */
    notAnError: (_, params: { error: unknown }) => NOT_AN_ERROR.has(preloadFailure(params.error).code),
    isSelection: ({ context, event }) => {
      assertEvent(event, 'profile.changed');
      return event.profileId === context.profileId;
    },
  },
  actions: {
    tellMode: emit(({ context }): AudioPolicyEmitted => ({ type: 'policy.mode', kind: context.kind, mode: context.mode })),
    choose: assign(({ event }) => {
      assertEvent(event, 'policy.set');
      return { mode: event.mode, profileId: event.profileId, error: null };
    }),
    noteWorker: assign(({ event }) => {
      assertEvent(event, 'worker.changed');
      return { worker: event.worker };
    }),
    noteEndpoint: assign(({ event }) => {
      assertEvent(event, 'endpoint.changed');
      return { endpointRunning: event.running };
    }),
    clearError: assign({ error: null }),
    /** `error`: the preload's rejection. */
    recordError: assign(({ context }, params: { error: unknown }) => {
      const { code, message } = preloadFailure(params.error);
      const error: PreloadError = { code, message, attempts: (context.error?.attempts ?? 0) + 1 };
      return { error };
    }),
  },
}).createMachine({
  id: 'audioPolicy',
  context: ({ input }) => ({
    kind: input.kind,
    mode: input.mode,
    profileId: input.profileId,
    endpointRunning: input.endpointRunning ?? false,
    worker: { state: 'unloaded', profileId: null, stale: false },
    error: null,
    retryMs: input.retryMs ?? AUDIO_POLICY_LIMITS.retryMs,
  }),
  initial: 'choosing',
  on: {
    'policy.set': {
      target: '.choosing',
      reenter: true,
      actions: ['choose'],
      description: 'the operator saved a choice: it takes effect at once and changes no model profile',
    },
    'worker.changed': { actions: ['noteWorker'] },
    'endpoint.changed': { actions: ['noteEndpoint'] },
  },
  states: {
    choosing: {
      always: [
        { guard: 'isWarm', target: 'warm' },
        { guard: 'isPerRequest', target: 'perRequest' },
        { target: 'auto' },
      ],
    },
    auto: {
      entry: ['tellMode'],
      description: 'auto (default): load at the first job and keep loaded',
    },
    perRequest: {
      entry: ['tellMode'],
      description: 'per_request: unload after each request (the supervisor unloads the idle worker)',
    },
    warm: {
      entry: ['tellMode'],
      description: 'warm: preload the selected executable profile while the endpoint runs and reload it after it is displaced',
      initial: 'deciding',
      on: {
        'endpoint.changed': {
          target: '.deciding',
          reenter: true,
          actions: ['noteEndpoint'],
          description: 'the endpoint started (preload now) or stopped (the stop unloads the worker; nothing is preloaded)',
        },
      },
      states: {
        deciding: {
          always: [
            { guard: 'endpointStopped', target: 'dormant' },
            { guard: 'holdsSelection', target: 'held', actions: ['clearError'] },
            { target: 'preloading' },
          ],
        },
        dormant: {
          description: 'the endpoint is stopped: the choice stays saved, nothing is loaded until it runs',
        },
        preloading: {
          description: 'a preload job waits its turn, passes the memory check, and starts the worker (TTS only in the LLM GPU mode)',
          invoke: {
            src: 'preload',
            input: ({ context }) => ({ kind: context.kind, profileId: context.profileId! }),
            onDone: {
              target: 'deciding',
              actions: ['clearError'],
              description: 'the selection is loaded and stays loaded (decided again from the worker record: it may have gone already)',
            },
            onError: [
              {
                guard: { type: 'notAnError', params: ({ event }) => ({ error: event.error }) },
                target: 'deciding',
                description: 'the endpoint stopped, or the profile changed while the preload waited: decide again',
              },
              {
                target: 'failed',
                actions: [{ type: 'recordError', params: ({ event }) => ({ error: event.error }) }],
                description: 'runtime missing or resources insufficient: the choice stays saved and the error appears in `errors`',
              },
            ],
          },
          on: { 'worker.changed': { actions: ['noteWorker'] } },
        },
        held: {
          description: 'the selection is loaded',
          on: {
            'worker.changed': [
              {
                guard: 'displaced',
                target: 'deciding',
                actions: ['noteWorker'],
                description: 'displaced (image job, chat start, endpoint stop, new revision, a crash): reload it',
              },
              { actions: ['noteWorker'] },
            ],
          },
        },
        failed: {
          description: 'the preload is retried later; nothing foreign was interrupted',
          after: { retry: { target: 'deciding', description: 'retry the preload' } },
          on: {
            'profile.changed': { guard: 'isSelection', target: 'deciding', description: 'the selected profile was saved again: retry at once' },
            'worker.changed': [
              { guard: 'nowHolds', target: 'deciding', actions: ['noteWorker'], description: 'a request loaded the selection meanwhile' },
              { actions: ['noteWorker'] },
            ],
          },
        },
      },
    },
  },
});
