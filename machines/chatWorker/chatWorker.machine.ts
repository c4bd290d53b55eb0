// Spec 3.2, the chat worker: one native llama-style server process that the service starts itself.
//
// | unloaded | first request for a published chat profile, or chat test start | resources free, memory check passes | loaded | worker started with stored parameters |
// | loaded | request for a different profile, or a new revision of the profile | | unloaded, then loaded with the new profile | the own worker is unloaded first |
// | loaded | image job, exclusive video mode or incompatible GPU profile change | | unloaded | |
// | loaded | additional foreign GPU process during operation | | unloaded | only the service's own worker is ended |
// | loaded | explicit unload in the chat test | no active requests | unloaded | with active requests the unload is rejected |
// | loading | cancel in the chat test | own start | unloaded | the start is aborted |
// | loaded | answer finished (chat test) | | loaded | the process stays loaded |
//
// Which of these happens is the supervisor's decision (its reservations, the queue, the memory
// check, the GPU watcher, the active-request check): it grants the start (`worker.start`, sent by
// the job that got the grant) and commands each unload (`worker.unload`, naming the start's
// generation). This machine is the process's life: loading until its `/health` answers 200,
// loaded, and unloading with SIGTERM, then SIGKILL after a grace period. A process that dies on
// its own is reported at once (`worker.exited` with the adapter's diagnosis), so the supervisor
// takes back the reservations of its requests (502 worker_failed). Finishing an answer sends
// nothing here: the process stays loaded.
import { assign, emit, sendTo, setup } from 'xstate';
import { chatWorkerActors } from './chatWorker.actors.js';
import type { ChatWorkerContext, ChatWorkerEmitted, ChatWorkerEvent, ChatWorkerInput } from './chatWorker.types.js';

export const CHAT_WORKER_LIMITS = { loadTimeLimitMs: 600_000, terminationGraceMs: 10_000 } as const;

type Ctx = { context: ChatWorkerContext; event: ChatWorkerEvent };

const generationOf = (context: ChatWorkerContext) => context.launch?.generation ?? 0;

export const chatWorkerMachine = setup({
  types: {
    context: {} as ChatWorkerContext,
    events: {} as ChatWorkerEvent,
    input: {} as ChatWorkerInput,
    emitted: {} as ChatWorkerEmitted,
  },
  actors: chatWorkerActors,
  guards: {
    /** The unload command names this start (a command about an earlier start changes nothing). */
    ownGeneration: ({ context, event }: Ctx) => event.type === 'worker.unload' && event.generation === generationOf(context),
    /** The process ended because we stopped it, not on its own. */
    stopFailed: ({ context }: Ctx) => context.stopping?.failure != null,
  },
  delays: {
    loadTimeLimit: ({ context }) => context.loadTimeLimitMs,
    terminationGrace: ({ context }) => context.terminationGraceMs,
  },
  actions: {
    adoptLaunch: assign(({ event }: Ctx) => {
      if (event.type !== 'worker.start') return {};
      return { launch: event.launch, pid: null, port: null, stopping: null };
    }),
    reportStarted: emit(({ context, event }: Ctx): ChatWorkerEmitted => {
      const pid = event.type === 'server.spawned' ? event.pid : 0;
      return { type: 'worker.started', kind: 'chat', generation: generationOf(context), pid };
    }),
    adoptProcess: assign(({ event }: Ctx) => (event.type === 'server.spawned' ? { pid: event.pid, port: event.port } : {})),
    reportLoaded: emit(({ context }: Ctx): ChatWorkerEmitted => ({ type: 'worker.loaded', kind: 'chat', generation: generationOf(context) })),
    noteUnload: assign(({ event }: Ctx) => (event.type === 'worker.unload' ? { stopping: { reason: event.reason, failure: null } } : {})),
    noteLoadTimeout: assign(({ context }: Ctx) => ({
      stopping: {
        reason: 'the model did not finish loading in time',
        failure: {
          cause: 'timeout',
          message: `The chat worker did not become ready within ${Math.round(context.loadTimeLimitMs / 1000)} s (timeout); it was stopped.`,
        },
      },
    })),
    terminate: sendTo('server', { type: 'server.stop' }),
    kill: sendTo('server', { type: 'server.kill' }),
    reportExit: emit(({ context, event }: Ctx): ChatWorkerEmitted => {
      const report = event.type === 'server.exited' ? event.report : { cause: 'unclear', message: 'the chat worker ended' };
      return { type: 'worker.exited', kind: 'chat', generation: generationOf(context), cause: report.cause, message: report.message };
    }),
    reportStopFailure: emit(({ context }: Ctx): ChatWorkerEmitted => {
      const failure = context.stopping?.failure ?? { cause: 'unclear', message: 'the chat worker failed' };
      return { type: 'worker.exited', kind: 'chat', generation: generationOf(context), cause: failure.cause, message: failure.message };
    }),
    forgetProcess: assign(({ context, event }: Ctx) => ({
      pid: null,
      port: null,
      last:
        context.stopping?.failure?.message ??
        context.stopping?.reason ??
        (event.type === 'server.exited' ? event.report.message : context.last),
      stopping: null,
    })),
  },
}).createMachine({
  id: 'chatWorker',
  context: ({ input }) => ({
    launch: null,
    pid: null,
    port: null,
    stopping: null,
    last: null,
    loadTimeLimitMs: input.loadTimeLimitMs ?? CHAT_WORKER_LIMITS.loadTimeLimitMs,
    terminationGraceMs: input.terminationGraceMs ?? CHAT_WORKER_LIMITS.terminationGraceMs,
  }),
  initial: 'unloaded',
  states: {
    unloaded: {
      description: 'no llama-server process of ours runs',
      on: {
        'worker.start': {
          target: 'running',
          actions: 'adoptLaunch',
          description: 'unloaded | first request for a published chat profile, or chat test start | resources free, memory check passes | loaded: worker started with stored parameters',
        },
      },
    },
    running: {
      description: 'the process exists: it loads, answers, or is being ended',
      invoke: { id: 'server', src: 'server', input: ({ context }) => ({ launch: context.launch! }) },
      on: {
        'server.spawned': { actions: ['adoptProcess', 'reportStarted'], description: 'the process exists: its pid is ours, never foreign' },
      },
      initial: 'loading',
      states: {
        loading: {
          description: 'the model loads; /health answers 503 until it is ready',
          on: {
            'server.ready': { target: 'loaded', actions: 'reportLoaded', description: '/health answered 200: the worker is loaded' },
            'worker.unload': {
              guard: 'ownGeneration',
              target: 'unloading',
              actions: 'noteUnload',
              description: 'loading | cancel in the chat test | own start | unloaded: the start is aborted',
            },
            'server.exited': {
              target: '#chatWorker.unloaded',
              actions: ['reportExit', 'forgetProcess'],
              description: 'the process died while loading: the start failed, its requests get 502 worker_failed with the likely cause',
            },
          },
          after: {
            loadTimeLimit: { target: 'unloading', actions: 'noteLoadTimeout', description: 'the model did not load within the limit: the start failed (timeout)' },
          },
        },
        loaded: {
          description: 'the worker answers up to its slot count in parallel; a finished answer keeps it loaded',
          on: {
            'worker.unload': {
              guard: 'ownGeneration',
              target: 'unloading',
              actions: 'noteUnload',
              description:
                'loaded | a different profile or a new revision, an image job, an incompatible GPU change, a foreign GPU process, or the explicit unload without active requests | unloaded: the own worker is unloaded first',
            },
            'server.exited': {
              target: '#chatWorker.unloaded',
              actions: ['reportExit', 'forgetProcess'],
              description: 'the process died: noticed at once, its requests get 502 worker_failed with the likely cause',
            },
          },
        },
        unloading: {
          description: 'SIGTERM was sent; SIGKILL follows after the grace period',
          entry: 'terminate',
          after: { terminationGrace: { actions: 'kill', description: 'still alive after the grace period: SIGKILL' } },
          on: {
            'server.exited': [
              {
                guard: 'stopFailed',
                target: '#chatWorker.unloaded',
                actions: ['reportStopFailure', 'forgetProcess'],
                description: 'a failed start is gone: reported as worker.exited with its cause',
              },
              { target: '#chatWorker.unloaded', actions: 'forgetProcess', description: 'the process is gone: unloaded' },
            ],
          },
        },
      },
    },
  },
});
