// What the chat and STT worker adapters share about a worker machine's life: both machines have
// the states unloaded and running.{loading, loaded, unloading} and keep the start's launch
// (generation, profile), pid, stopping reason and last reason in their context.
import type { WorkerStatus } from '../system/workers.js';

export interface WorkerSnapshotLike {
  matches(state: 'unloaded' | { running: 'loading' | 'loaded' | 'unloading' }): boolean;
  context: {
    launch: { generation: number; profileId: string } | null;
    pid: number | null;
    stopping: { reason: string; failure: { message: string } | null } | null;
    last: string | null;
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
export function whenLoaded<S extends WorkerSnapshotLike>(
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
export function whenGone<S extends WorkerSnapshotLike>(actor: WorkerActorLike<S>, generation: number): Promise<void> {
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
export function describeWorker(snapshot: WorkerSnapshotLike, kind: WorkerStatus['kind'], since: string | null, gpus: string[]): WorkerStatus | undefined {
  const { launch, pid } = snapshot.context;
  if (snapshot.matches('unloaded') || !launch) return undefined;
  const state = snapshot.matches({ running: 'loaded' }) ? 'loaded' : snapshot.matches({ running: 'loading' }) ? 'loading' : 'unloading';
  return { kind, profile_id: launch.profileId, state, pid, gpus, since };
}

/** The supervisor's unload command for one start: resolves once that start is gone. */
export async function unloadStart<S extends WorkerSnapshotLike>(
  actor: WorkerActorLike<S> & { send(event: { type: 'worker.unload'; generation: number; reason: string }): void },
  generation: number,
  reason: string,
): Promise<void> {
  const snapshot = actor.getSnapshot();
  if (snapshot.matches('unloaded') || snapshot.context.launch?.generation !== generation) return;
  actor.send({ type: 'worker.unload', generation, reason });
  await whenGone(actor, generation);
}

export interface Connection {
  kind: WorkerStatus['kind'];
  name: string;
  /** The supervisor: every report of the machine goes to it as it is. */
  supervisor: { send(event: never): void };
  workers: { register(hook: { name: string; kind: WorkerStatus['kind']; unload: (command: { generation: number; reason: string }) => Promise<void>; describe: () => WorkerStatus | undefined }): unknown };
  log: { error(details: object, message: string): void };
  unload: (generation: number, reason: string) => Promise<void>;
  describe: () => WorkerStatus | undefined;
  /** Sees each report first (the adapters note when their worker started). */
  onReport?: (event: { type: string }) => void;
}

/**
 * Starts a worker machine's actor and connects it: its reports go to the supervisor, and the
 * supervisor's unload commands (through the worker hooks) reach it.
 */
export function connectWorker(
  actor: { on(type: '*', handler: (event: { type: string }) => void): unknown; subscribe(observer: { error: (error: unknown) => void }): unknown; start(): unknown },
  connection: Connection,
): void {
  actor.on('*', (event) => {
    connection.onReport?.(event);
    connection.supervisor.send(event as never);
  });
  actor.subscribe({ error: (error) => connection.log.error({ err: error }, `${connection.name} actor failed`) });
  actor.start();
  connection.workers.register({
    name: connection.name,
    kind: connection.kind,
    unload: (command) => connection.unload(command.generation, command.reason),
    describe: connection.describe,
  });
}

/**
 * What the speech worker adapters share: the actor of their lifecycle machine, connected to the
 * supervisor; the start sent by the job whose grant carries a start plan; waiting for `loaded`;
 * the unload; the status line. Subclasses give the launch of a profile and their work.
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
    connection: Pick<Connection, 'name' | 'supervisor' | 'workers' | 'log'>,
    readonly failure: (reason: string) => Error,
  ) {
    connectWorker(actor, {
      ...connection,
      kind,
      unload: (generation, reason) => this.unload(generation, reason),
      describe: () => this.describe(),
      onReport: (event) => {
        if (event.type === 'worker.loaded') this.#since = new Date().toISOString();
      },
    });
  }

  /** The start a profile snapshot asks for under this grant. */
  protected abstract launchOf(generation: number, profile: P): L;

  /** The GPUs the status shows for the loaded start. */
  protected gpus(): string[] {
    return [];
  }

  /** The job whose grant starts the worker sends the start; others of the same start only wait. */
  start(lease: { generation: number; start: unknown }, profile: P): void {
    if (lease.start === null) return;
    this.actor.send({ type: 'worker.start', launch: this.launchOf(lease.generation, profile) });
  }

  /** Resolves once the start `generation` is loaded; rejects when it ends first. */
  async ready(generation: number, signal?: AbortSignal): Promise<void> {
    await whenLoaded(this.actor, generation, this.failure, signal);
  }

  unload(generation: number, reason: string): Promise<void> {
    return unloadStart(this.actor, generation, reason);
  }

  describe(): WorkerStatus | undefined {
    return describeWorker(this.actor.getSnapshot(), this.kind, this.#since, this.gpus());
  }

  stop(): void {
    this.actor.stop();
  }
}
