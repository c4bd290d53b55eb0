// What the chat, image, STT and TTS worker adapters share (LifecycleWorker): their machines all
// have the states unloaded and running.{loading, loaded, unloading} and keep the start's launch
// (generation, profile), pid, stopping reason and last reason in their context.
import type { RuntimeLookup } from '../adapters/runtimes.js';
import type { Inspection } from '../system/observe/inspect.js';
import type { Logger } from '../system/observe/log.js';
import type { SupervisorActor } from '../system/scheduler.js';
import type { WorkerHooks, WorkerStatus } from '../system/workers.js';

/** What every worker adapter is built from. */
export interface WorkerDeps {
  supervisor: SupervisorActor;
  workers: WorkerHooks;
  log: Logger;
  lookup: RuntimeLookup;
  env: NodeJS.ProcessEnv;
  inspect?: Inspection['inspect'];
  /** Tests shorten the machine's load limit and the grace before SIGKILL. */
  loadTimeLimitMs?: number;
  terminationGraceMs?: number;
  /** The state's runtime folder: worker processes are recorded there while they run (src/workers/leftovers.ts). */
  runtimeDir?: string;
}

/** The actor options of a worker machine: its systemId, the limits the deps set, the inspector. */
export function workerActorOptions(systemId: string, deps: Pick<WorkerDeps, 'inspect' | 'loadTimeLimitMs' | 'terminationGraceMs'>) {
  return {
    systemId,
    input: {
      ...(deps.loadTimeLimitMs === undefined ? {} : { loadTimeLimitMs: deps.loadTimeLimitMs }),
      ...(deps.terminationGraceMs === undefined ? {} : { terminationGraceMs: deps.terminationGraceMs }),
    },
    ...(deps.inspect ? { inspect: deps.inspect } : {}),
  };
}

export interface WorkerSnapshotLike {
  matches(state: 'unloaded' | { running: 'loading' | 'loaded' | 'unloading' | 'lost' }): boolean;
  context: {
    launch: { generation: number; profileId: string } | null;
    pid: number | null;
    stopping: { reason: string; failure: { message: string } | null } | null;
    last: string | null;
    /** Starts unloaded before they began. */
    cancelled: number[];
  };
}

export interface WorkerActorLike<S extends WorkerSnapshotLike> {
  getSnapshot(): S;
  subscribe(listener: (snapshot: S) => void): { unsubscribe(): void };
}

/**
 * Resolves once the start `generation` is loaded; rejects (with `gone(reason)`) when that start
 * ends first, when a later start replaced it, or when `signal` aborts.
 */
function whenLoaded<S extends WorkerSnapshotLike>(
  actor: WorkerActorLike<S>,
  generation: number,
  gone: (reason: string) => Error,
  signal?: AbortSignal,
  refused?: () => string | undefined,
): Promise<S> {
  return new Promise((resolve, reject) => {
    const check = (snapshot: S): boolean => {
      const current = snapshot.context.launch?.generation;
      const early = refused?.();
      if (early !== undefined) {
        reject(gone(early));
        return true;
      }
      if (current === generation && snapshot.matches({ running: 'loaded' })) {
        resolve(snapshot);
        return true;
      }
      if (current !== undefined && current > generation) {
        reject(gone('the worker was replaced by a later start'));
        return true;
      }
      if (current === generation && (snapshot.matches('unloaded') || snapshot.matches({ running: 'unloading' }))) {
        const { stopping, last } = snapshot.context;
        reject(gone(stopping?.failure?.message ?? stopping?.reason ?? last ?? 'the worker stopped before it was ready'));
        return true;
      }
      return false;
    };
    if (check(actor.getSnapshot())) return;
    const onAbort = () => {
      subscription.unsubscribe();
      reject(signal?.reason instanceof Error ? signal.reason : gone('cancelled while the worker loaded'));
    };
    const subscription = actor.subscribe((snapshot) => {
      if (!check(snapshot)) return;
      subscription.unsubscribe();
      signal?.removeEventListener('abort', onAbort);
    });
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Resolves once the start `generation` is gone (unloaded, or replaced). */
function whenGone<S extends WorkerSnapshotLike>(actor: WorkerActorLike<S>, generation: number): Promise<void> {
  const done = (s: S) => s.matches('unloaded') || s.context.launch?.generation !== generation;
  return new Promise((resolve) => {
    if (done(actor.getSnapshot())) return resolve();
    const subscription = actor.subscribe((s) => {
      if (!done(s)) return;
      subscription.unsubscribe();
      resolve();
    });
  });
}

/** The status line of a worker machine, or undefined while it is unloaded. */
function describeWorker(snapshot: WorkerSnapshotLike, kind: WorkerStatus['kind'], since: string | null, gpus: string[]): WorkerStatus | undefined {
  const { launch, pid } = snapshot.context;
  if (snapshot.matches('unloaded') || !launch) return undefined;
  const state = snapshot.matches({ running: 'loaded' }) ? 'loaded' : snapshot.matches({ running: 'loading' }) ? 'loading' : snapshot.matches({ running: 'lost' }) ? 'lost' : 'unloading';
  return { kind, profile_id: launch.profileId, state, pid, gpus, since };
}

export interface Connection {
  name: string;
  /** The supervisor: every report of the machine goes to it as it is. */
  supervisor: { send(event: never): void };
  workers: { register(hook: { name: string; kind: WorkerStatus['kind']; unload: (command: { generation: number; reason: string }) => void; describe: () => WorkerStatus | undefined }): unknown };
  log: { error(details: object, message: string): void; warn(details: object, message: string): void };
}

/**
 * What the worker adapters share: the actor of their worker machine, started and connected (its
 * reports go to the supervisor as they are, `worker.unloaded` and `worker.lost` included; the
 * supervisor's unload commands reach it through the worker hooks); the start sent by the job whose
 * grant carries a start plan; waiting for `loaded`; the status line. Subclasses give the launch of
 * a profile and their work.
 */
export abstract class LifecycleWorker<S extends WorkerSnapshotLike, L, P> {
  #since: string | null = null;

  protected constructor(
    readonly actor: WorkerActorLike<S> & {
      send(event: { type: 'worker.start'; launch: L } | { type: 'worker.unload'; generation: number; reason: string }): void;
      on(type: '*', handler: (event: { type: string }) => void): unknown;
      subscribe(observer: { error: (error: unknown) => void }): unknown;
      start(): unknown;
      stop(): unknown;
    },
    readonly kind: WorkerStatus['kind'],
    connection: Connection,
    readonly failure: (reason: string) => Error,
  ) {
    actor.on('*', (event) => {
      if (event.type === 'worker.loaded') this.#since = new Date().toISOString();
      if (event.type === 'worker.lost') connection.log.warn({ worker: kind, pid: this.actor.getSnapshot().context.pid }, 'worker process did not end after SIGKILL: lost, its memory stays reserved');
      connection.supervisor.send(event as never);
    });
    actor.subscribe({ error: (error) => connection.log.error({ err: error }, `${connection.name} actor failed`) });
    actor.start();
    connection.workers.register({
      name: connection.name,
      kind,
      unload: (command) => this.unload(command.generation, command.reason),
      describe: () => this.describe(),
    });
  }

  /** The start a profile snapshot asks for under this grant (and its start plan). */
  protected abstract launchOf(lease: { generation: number; start: unknown }, profile: P): L;

  /** The GPUs the status shows for the loaded start. */
  protected gpus(): string[] {
    return [];
  }

  /** The job whose grant starts the worker sends the start; others of the same start only wait. */
  start(lease: { generation: number; start: unknown }, profile: P): void {
    if (lease.start === null) return;
    this.actor.send({ type: 'worker.start', launch: this.launchOf(lease, profile) });
  }

  /** Resolves once the start `generation` is loaded; rejects when it ends first or `signal` aborts. */
  async ready(generation: number, signal?: AbortSignal): Promise<void> {
    const early = () => (this.actor.getSnapshot().context.cancelled.includes(generation) ? `the ${this.kind} worker start was unloaded before it began` : undefined);
    await whenLoaded(this.actor, generation, this.failure, signal, early);
  }

  /** The supervisor's unload command for one start: the machine carries it out and reports it. */
  unload(generation: number, reason: string): void {
    this.actor.send({ type: 'worker.unload', generation, reason });
  }

  /** Resolves once the start `generation` is gone (unloaded, or replaced by a later start). */
  gone(generation: number): Promise<void> {
    return whenGone(this.actor, generation);
  }

  describe(): WorkerStatus | undefined {
    return describeWorker(this.actor.getSnapshot(), this.kind, this.#since, this.gpus());
  }

  stop(): void {
    this.actor.stop();
  }
}
