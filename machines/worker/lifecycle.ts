// The life of one worker process, shared by the chat worker (spec 3.2) and the speech workers
// (3.4 TTS, 3.5 STT): each is its own machine made here with its kind, its limits and the spec rows
// it mirrors. The supervisor decides (its reservations and the memory check) and commands: it
// sends `worker.start` with the grant that planned the start (the machine reads its launch from
// the order: `spec.launch`), and every unload is its `worker.unload` naming the start's
// generation. The machine is the process's life: loading until the engine says it is
// ready, loaded for job after job, unloading with SIGTERM and then SIGKILL after a grace. A
// process that ends on its own is reported at once as `worker.exited` with the adapter's
// diagnosis; a start that does not load within its limit is stopped and reported as a timeout.
// The machine reports its own unload, and only once its process is gone (`worker.unloaded`): a
// process that outlives SIGKILL by the kill limit is reported `worker.lost` (the supervisor keeps
// its memory reserved) and unloaded when it finally ends.
import { assertEvent, assign, enqueueActions, fromCallback, sendTo, setup } from 'xstate';
import type { WorkerStart } from '../supervisor/supervisor.types.js';
import type { ExitReport } from '../worker.types.js';

export interface LaunchBase {
  /** The start's generation from the supervisor's grant; every report names it. */
  generation: number;
  profileId: string;
  revision: number;
}

export type LifecycleEvent =
  | { type: 'worker.start'; start: WorkerStart }
  | { type: 'worker.unload'; generation: number; reason: string }
  /** From the engine process actor. */
  | { type: 'engine.spawned'; pid: number; port?: number }
  | { type: 'engine.ready'; loadMs?: number }
  | { type: 'engine.exited'; report: ExitReport };

/** Sent by the machine to its engine process actor. */
export type EngineCommand = { type: 'engine.stop' } | { type: 'engine.kill' };

export type LifecycleEmitted<K extends string> =
  | { type: 'worker.started'; kind: K; generation: number; pid: number }
  | { type: 'worker.loaded'; kind: K; generation: number; loadMs?: number }
  | { type: 'worker.exited'; kind: K; generation: number; cause: string; message: string }
  /** The unload the supervisor ordered is done: the process is gone (or the start never began). */
  | { type: 'worker.unloaded'; kind: K; generation: number }
  /** The process outlived SIGKILL by the kill limit: its memory is not free. `worker.unloaded` follows if it ends. */
  | { type: 'worker.lost'; kind: K; generation: number; pid: number | null };

export interface LifecycleContext<L extends LaunchBase> {
  launch: L | null;
  pid: number | null;
  /** The loopback port of an engine that serves HTTP (llama-server); null otherwise. */
  port: number | null;
  /** Why the worker is being unloaded, or the failure that ends it (then reported as `worker.exited`). */
  stopping: { reason: string; failure: { cause: string; message: string } | null } | null;
  last: string | null;
  loadTimeLimitMs: number;
  terminationGraceMs: number;
  /** How long a process may outlive SIGKILL before it is reported lost. */
  killLimitMs: number;
  /** Under the supervisor: every report is also sent to it, its parent. */
  reportToParent: boolean;
}

export interface LifecycleInput {
  loadTimeLimitMs?: number;
  terminationGraceMs?: number;
  killLimitMs?: number;
  /** Invoked by the supervisor: its reports go to the parent too. */
  reportToParent?: boolean;
}

/** A process still there this long after SIGKILL is stuck (in the kernel, a driver): it is lost. */
export const KILL_LIMIT_MS = 10_000;

export interface EngineInput<L extends LaunchBase> {
  launch: L;
}

/** What makes one worker machine: its id and kind, limits, and the spec rows its transitions quote. */
export interface LifecycleSpec<L extends LaunchBase, K extends string> {
  id: string;
  kind: K;
  /** How messages name it: "speech-to-text worker". */
  name: string;
  limits: { loadTimeLimitMs: number; terminationGraceMs: number };
  /** What one start runs, read from the supervisor's start order (the job's profile snapshot, the memory check's plan). */
  launch: (start: WorkerStart) => L;
  /** What the load limit means for this worker (default: "did not become ready within N s"). */
  timeoutMessage?: (seconds: number) => string;
  rows: {
    /** unloaded → loaded. */
    start: string;
    /** loading → unloaded on the supervisor's command (a cancelled or stopped start). */
    cancel: string;
    /** loaded → unloaded on the supervisor's command. */
    unload: string;
    /** loaded → unloaded on its own (an error). */
    error: string;
  };
}

export function lifecycleMachine<L extends LaunchBase, K extends string>(spec: LifecycleSpec<L, K>) {
  type Context = LifecycleContext<L>;
  type Event = LifecycleEvent;
  type Emitted = LifecycleEmitted<K>;
  type Ctx = { context: Context; event: Event };
  const generationOf = (context: Context) => context.launch?.generation ?? 0;
  const exited = (context: Context, failure: { cause: string; message: string }): Emitted => ({
    type: 'worker.exited',
    kind: spec.kind,
    generation: generationOf(context),
    cause: failure.cause,
    message: failure.message,
  });

  /** Every report is emitted; under the supervisor (`reportToParent`) it is sent to it as well. */
  const tell = (enqueue: { emit(event: Emitted): void; sendParent(event: Emitted): void }, context: Context, report: Emitted) => {
    enqueue.emit(report);
    if (context.reportToParent) enqueue.sendParent(report);
  };

  return setup({
    types: {
      context: {} as Context,
      events: {} as Event,
      input: {} as LifecycleInput,
      emitted: {} as Emitted,
    },
    actors: {
      /**
       * The engine process of one start: spawns it, sends `engine.spawned` (pid), `engine.ready` once
       * it can take jobs, and `engine.exited` (with a diagnosis) when it ends. Takes `engine.stop`
       * (SIGTERM) and `engine.kill` (SIGKILL); its cleanup kills what is left. The system provides it.
       */
      engine: fromCallback<EngineCommand, EngineInput<L>, Event>(() => {
        throw new Error(`${spec.id} actor engine was not provided`);
      }),
    },
    guards: {
      /** The unload command names this start. */
      ownGeneration: ({ context, event }: Ctx) => {
        assertEvent(event, 'worker.unload');
        return event.generation === generationOf(context);
      },
      /** The start failed (the load limit): its end is reported as `worker.exited`. */
      stopFailed: ({ context }: Ctx) => context.stopping?.failure != null,
    },
    delays: {
      loadTimeLimit: ({ context }: { context: Context }) => context.loadTimeLimitMs,
      terminationGrace: ({ context }: { context: Context }) => context.terminationGraceMs,
      killLimit: ({ context }: { context: Context }) => context.terminationGraceMs + context.killLimitMs,
    },
    actions: {
      adoptLaunch: assign(({ event }: Ctx) => {
        assertEvent(event, 'worker.start');
        return { launch: spec.launch(event.start), pid: null, port: null, stopping: null };
      }),
      adoptProcess: assign(({ event }: Ctx) => {
        assertEvent(event, 'engine.spawned');
        return { pid: event.pid, port: event.port ?? null };
      }),
      reportStarted: enqueueActions(({ context, event, enqueue }) => {
        assertEvent(event, 'engine.spawned');
        tell(enqueue, context, { type: 'worker.started', kind: spec.kind, generation: generationOf(context), pid: event.pid });
      }),
      reportLoaded: enqueueActions(({ context, event, enqueue }) => {
        assertEvent(event, 'engine.ready');
        const { loadMs } = event;
        tell(enqueue, context, { type: 'worker.loaded', kind: spec.kind, generation: generationOf(context), ...(loadMs === undefined ? {} : { loadMs }) });
      }),
      noteUnload: assign(({ event }: Ctx) => {
        assertEvent(event, 'worker.unload');
        return { stopping: { reason: event.reason, failure: null } };
      }),
      noteLoadTimeout: assign(({ context }: Ctx) => ({
        stopping: {
          reason: 'the engine did not finish loading in time',
          failure: {
            cause: 'timeout',
            message:
              spec.timeoutMessage?.(Math.round(context.loadTimeLimitMs / 1000)) ??
              `The ${spec.name} did not become ready within ${Math.round(context.loadTimeLimitMs / 1000)} s (timeout); it was stopped.`,
          },
        },
      })),
      terminate: sendTo('engine', { type: 'engine.stop' } as EngineCommand),
      kill: sendTo('engine', { type: 'engine.kill' } as EngineCommand),
      reportExit: enqueueActions(({ context, event, enqueue }) => {
        assertEvent(event, 'engine.exited');
        tell(enqueue, context, exited(context, event.report));
      }),
      reportStopFailure: enqueueActions(({ context, enqueue }) => tell(enqueue, context, exited(context, context.stopping?.failure ?? { cause: 'unclear', message: `the ${spec.name} failed` }))),
      reportUnloaded: enqueueActions(({ context, enqueue }) => tell(enqueue, context, { type: 'worker.unloaded', kind: spec.kind, generation: generationOf(context) })),
      reportLost: enqueueActions(({ context, enqueue }) => tell(enqueue, context, { type: 'worker.lost', kind: spec.kind, generation: generationOf(context), pid: context.pid })),
      forgetProcess: assign(({ context, event }: Ctx) => {
        assertEvent(event, 'engine.exited');
        return { pid: null, port: null, last: context.stopping?.failure?.message ?? context.stopping?.reason ?? event.report.message, stopping: null };
      }),
    },
  }).createMachine({
    id: spec.id,
    context: ({ input }) => ({
      launch: null,
      pid: null,
      port: null,
      stopping: null,
      last: null,
      loadTimeLimitMs: input.loadTimeLimitMs ?? spec.limits.loadTimeLimitMs,
      terminationGraceMs: input.terminationGraceMs ?? spec.limits.terminationGraceMs,
      killLimitMs: input.killLimitMs ?? KILL_LIMIT_MS,
      reportToParent: input.reportToParent ?? false,
    }),
    initial: 'unloaded',
    states: {
      unloaded: {
        description: `no ${spec.name} process of ours runs`,
        on: {
          'worker.start': { target: 'running', actions: 'adoptLaunch', description: spec.rows.start },
        },
      },
      running: {
        description: 'the engine process exists: it loads, works, or is being ended',
        invoke: { id: 'engine', src: 'engine', input: ({ context }) => ({ launch: context.launch! }) },
        on: {
          'engine.spawned': { actions: ['adoptProcess', 'reportStarted'], description: 'the process exists: its pid is ours' },
        },
        initial: 'loading',
        states: {
          loading: {
            description: 'the engine loads',
            on: {
              'engine.ready': { target: 'loaded', actions: 'reportLoaded', description: 'the engine is ready' },
              'worker.unload': { guard: 'ownGeneration', target: 'unloading', actions: 'noteUnload', description: spec.rows.cancel },
              'engine.exited': {
                target: `#${spec.id}.unloaded`,
                actions: ['reportExit', 'forgetProcess'],
                description: 'the engine failed to load: its job gets 502 worker_failed with the likely cause',
              },
            },
            after: { loadTimeLimit: { target: 'unloading', actions: 'noteLoadTimeout', description: 'it did not load within the limit (timeout)' } },
          },
          loaded: {
            description: 'one job at a time; the worker stays loaded for further jobs',
            on: {
              'worker.unload': { guard: 'ownGeneration', target: 'unloading', actions: 'noteUnload', description: spec.rows.unload },
              'engine.exited': { target: `#${spec.id}.unloaded`, actions: ['reportExit', 'forgetProcess'], description: spec.rows.error },
            },
          },
          unloading: {
            description: 'SIGTERM was sent; SIGKILL follows after the grace period',
            entry: 'terminate',
            after: {
              terminationGrace: { actions: 'kill', description: 'still alive after the grace period: SIGKILL' },
              killLimit: { target: 'lost', actions: 'reportLost', description: 'still there the kill limit after SIGKILL: lost, its memory stays reserved' },
            },
            on: {
              'engine.exited': [
                { guard: 'stopFailed', target: `#${spec.id}.unloaded`, actions: ['reportStopFailure', 'forgetProcess'], description: 'a failed start is gone: reported with its cause' },
                { target: `#${spec.id}.unloaded`, actions: ['reportUnloaded', 'forgetProcess'], description: 'the engine is gone: unloaded' },
              ],
            },
          },
          lost: {
            description: 'the process outlived SIGKILL: reported lost; it is unloaded only when it ends',
            on: {
              'engine.exited': { target: `#${spec.id}.unloaded`, actions: ['reportUnloaded', 'forgetProcess'], description: 'the lost process ended at last: unloaded' },
              'worker.start': {
                target: `#${spec.id}.running`,
                reenter: true,
                actions: 'adoptLaunch',
                description: 'the supervisor saw the lost process leave its GPUs and starts anew: the old process is given up, a new one starts',
              },
            },
          },
        },
      },
    },
  });
}
