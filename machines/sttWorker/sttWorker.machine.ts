// Spec 3.5, the STT worker: one speech-to-text engine process on the CPU.
//
// | unloaded | first transcription request | | loaded (CPU) | one STT job at a time; worker stays loaded for further recordings |
// | loaded | endpoint stop, a new build, or an error | | unloaded | |
//
// The supervisor decides (one STT job at a time is its rule: it grants the next job only when the
// running one released): the job whose grant starts the worker sends `worker.start`, and every
// unload is its `worker.unload` naming the start's generation. This machine is the engine
// process's life: loading until the engine says its model is loaded, loaded for recording after
// recording, unloading with SIGTERM and then SIGKILL after a grace. An engine that ends on its own
// ("an error") is reported at once as `worker.exited` with the adapter's diagnosis.
import { assign, emit, sendTo, setup } from 'xstate';
import { sttWorkerActors } from './sttWorker.actors.js';
import type { SttWorkerContext, SttWorkerEmitted, SttWorkerEvent, SttWorkerInput } from './sttWorker.types.js';

export const STT_WORKER_LIMITS = { loadTimeLimitMs: 120_000, terminationGraceMs: 5_000 } as const;

type Ctx = { context: SttWorkerContext; event: SttWorkerEvent };

const generationOf = (context: SttWorkerContext) => context.launch?.generation ?? 0;

const report = (context: SttWorkerContext, failure: { cause: string; message: string }): SttWorkerEmitted => ({
  type: 'worker.exited',
  kind: 'stt',
  generation: generationOf(context),
  cause: failure.cause,
  message: failure.message,
});

export const sttWorkerMachine = setup({
  types: {
    context: {} as SttWorkerContext,
    events: {} as SttWorkerEvent,
    input: {} as SttWorkerInput,
    emitted: {} as SttWorkerEmitted,
  },
  actors: sttWorkerActors,
  guards: {
    /** The unload command names this start. */
    ownGeneration: ({ context, event }: Ctx) => event.type === 'worker.unload' && event.generation === generationOf(context),
    /** The start failed (the load limit): its end is reported as `worker.exited`. */
    stopFailed: ({ context }: Ctx) => context.stopping?.failure != null,
  },
  delays: {
    loadTimeLimit: ({ context }) => context.loadTimeLimitMs,
    terminationGrace: ({ context }) => context.terminationGraceMs,
  },
  actions: {
    adoptLaunch: assign(({ event }: Ctx) => (event.type === 'worker.start' ? { launch: event.launch, pid: null, stopping: null } : {})),
    adoptProcess: assign(({ event }: Ctx) => (event.type === 'engine.spawned' ? { pid: event.pid } : {})),
    reportStarted: emit(({ context, event }: Ctx): SttWorkerEmitted => ({
      type: 'worker.started',
      kind: 'stt',
      generation: generationOf(context),
      pid: event.type === 'engine.spawned' ? event.pid : 0,
    })),
    reportLoaded: emit(({ context }: Ctx): SttWorkerEmitted => ({ type: 'worker.loaded', kind: 'stt', generation: generationOf(context) })),
    noteUnload: assign(({ event }: Ctx) => (event.type === 'worker.unload' ? { stopping: { reason: event.reason, failure: null } } : {})),
    noteLoadTimeout: assign(({ context }: Ctx) => ({
      stopping: {
        reason: 'the engine did not finish loading in time',
        failure: {
          cause: 'timeout',
          message: `The speech-to-text worker did not load its model within ${Math.round(context.loadTimeLimitMs / 1000)} s (timeout); it was stopped.`,
        },
      },
    })),
    terminate: sendTo('engine', { type: 'engine.stop' }),
    kill: sendTo('engine', { type: 'engine.kill' }),
    reportExit: emit(({ context, event }: Ctx) => report(context, event.type === 'engine.exited' ? event.report : { cause: 'unclear', message: 'the engine ended' })),
    reportStopFailure: emit(({ context }: Ctx) => report(context, context.stopping?.failure ?? { cause: 'unclear', message: 'the engine failed' })),
    forgetProcess: assign(({ context, event }: Ctx) => ({
      pid: null,
      last: context.stopping?.failure?.message ?? context.stopping?.reason ?? (event.type === 'engine.exited' ? event.report.message : context.last),
      stopping: null,
    })),
  },
}).createMachine({
  id: 'sttWorker',
  context: ({ input }) => ({
    launch: null,
    pid: null,
    stopping: null,
    last: null,
    loadTimeLimitMs: input.loadTimeLimitMs ?? STT_WORKER_LIMITS.loadTimeLimitMs,
    terminationGraceMs: input.terminationGraceMs ?? STT_WORKER_LIMITS.terminationGraceMs,
  }),
  initial: 'unloaded',
  states: {
    unloaded: {
      description: 'no engine process of ours runs',
      on: {
        'worker.start': {
          target: 'running',
          actions: 'adoptLaunch',
          description: 'unloaded | first transcription request | | loaded (CPU): the engine starts on the CPU',
        },
      },
    },
    running: {
      description: 'the engine process exists: it loads, transcribes, or is being ended',
      invoke: { id: 'engine', src: 'engine', input: ({ context }) => ({ launch: context.launch! }) },
      on: {
        'engine.spawned': { actions: ['adoptProcess', 'reportStarted'], description: 'the process exists: its pid is ours' },
      },
      initial: 'loading',
      states: {
        loading: {
          description: 'the engine loads its model',
          on: {
            'engine.ready': { target: 'loaded', actions: 'reportLoaded', description: 'the model is loaded' },
            'worker.unload': { guard: 'ownGeneration', target: 'unloading', actions: 'noteUnload', description: 'unloaded before it was ready (endpoint stop)' },
            'engine.exited': {
              target: '#sttWorker.unloaded',
              actions: ['reportExit', 'forgetProcess'],
              description: 'the engine failed to load: its job gets 502 worker_failed with the likely cause',
            },
          },
          after: {
            loadTimeLimit: { target: 'unloading', actions: 'noteLoadTimeout', description: 'the model did not load within the limit (timeout)' },
          },
        },
        loaded: {
          description: 'one recording at a time; the worker stays loaded for further recordings',
          on: {
            'worker.unload': {
              guard: 'ownGeneration',
              target: 'unloading',
              actions: 'noteUnload',
              description: 'loaded | endpoint stop, a new build (or the per-request policy) | | unloaded',
            },
            'engine.exited': {
              target: '#sttWorker.unloaded',
              actions: ['reportExit', 'forgetProcess'],
              description: 'loaded | an error | | unloaded: the engine ended on its own; noticed at once',
            },
          },
        },
        unloading: {
          description: 'SIGTERM was sent; SIGKILL follows after the grace period',
          entry: 'terminate',
          after: { terminationGrace: { actions: 'kill', description: 'still alive after the grace period: SIGKILL' } },
          on: {
            'engine.exited': [
              { guard: 'stopFailed', target: '#sttWorker.unloaded', actions: ['reportStopFailure', 'forgetProcess'], description: 'a failed start is gone: reported with its cause' },
              { target: '#sttWorker.unloaded', actions: 'forgetProcess', description: 'the engine is gone: unloaded' },
            ],
          },
        },
      },
    },
  },
});
