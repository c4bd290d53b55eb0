// What the chat, image, STT, TTS and prompt enhancer adapters share (LifecycleWorker): their
// machines, the supervisor's children, all have the states unloaded and running.{loading, loaded,
// unloading, lost} and keep the start's launch (generation, profile), pid, stopping reason and last
// reason in their context.
import { createActor, type AnyActorLogic } from 'xstate';
import type { WorkerStart } from '../../machines/supervisor/index.js';
import type { RuntimeLookup } from '../adapters/runtimes.js';
import type { Inspection } from '../system/observe/inspect.js';
import type { Logger } from '../system/observe/log.js';
import type { WorkerHooks, WorkerStatus } from '../system/workers.js';

/** What every worker adapter is built from. */
export interface WorkerDeps {
  workers: WorkerHooks;
  log: Logger;
  lookup: RuntimeLookup;
  env: NodeJS.ProcessEnv;
  /** Tests shorten the machine's load limit, the grace before SIGKILL and how long a process may outlive it. */
  loadTimeLimitMs?: number;
  terminationGraceMs?: number;
  killLimitMs?: number;
  /** The state's runtime folder: worker processes are recorded there while they run (src/workers/leftovers.ts). */
  runtimeDir?: string;
}

/** The adapter's connection from its deps: its name, its machine's systemId, the status registry, the log and the limits. */
export function connectionOf(deps: WorkerDeps, name: string, systemId: string): Connection {
  return {
    name,
    systemId,
    workers: deps.workers,
    log: deps.log,
    limits: {
      ...(deps.loadTimeLimitMs === undefined ? {} : { loadTimeLimitMs: deps.loadTimeLimitMs }),
      ...(deps.terminationGraceMs === undefined ? {} : { terminationGraceMs: deps.terminationGraceMs }),
      ...(deps.killLimitMs === undefined ? {} : { killLimitMs: deps.killLimitMs }),
    },
  };
}

export interface WorkerSnapshotLike {
  matches(state: 'unloaded' | { running: 'loading' | 'loaded' | 'unloading' | 'lost' }): boolean;
  context: {
    launch: { generation: number; profileId: string } | null;
    pid: number | null;
    stopping: { reason: string; failure: { message: string } | null } | null;
    last: string | null;
    /** The unload's limits: the grace before SIGKILL, and how long the process may outlive SIGKILL before it is lost. */
    terminationGraceMs: number;
    killLimitMs: number;
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
): Promise<S> {
  return new Promise((resolve, reject) => {
    const check = (snapshot: S): boolean => {
      const current = snapshot.context.launch?.generation;
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

/**
 * How the wait for a start's end ended: `gone` (unloaded, or replaced by a later start), `lost`
 * (its process outlived SIGKILL: nothing more can be done for it, and the supervisor keeps its
 * memory reserved), or `limit` (neither came within the wait's limit).
 */
export type GoneOutcome = 'gone' | 'lost' | 'limit';

/**
 * Resolves once the start `generation` is gone or lost, or after `limitMs` at the latest; rejects
 * with the reason of `signal` when it aborts first. Whichever comes first, nothing is left
 * listening (the actor, the signal, the timer).
 */
export function whenGone<S extends WorkerSnapshotLike>(actor: WorkerActorLike<S>, generation: number, options: { limitMs: number; signal?: AbortSignal }): Promise<GoneOutcome> {
  const { limitMs, signal } = options;
  const outcome = (s: S): GoneOutcome | undefined => {
    if (s.matches('unloaded') || s.context.launch?.generation !== generation) return 'gone';
    return s.matches({ running: 'lost' }) ? 'lost' : undefined;
  };
  const now = outcome(actor.getSnapshot());
  if (now) return Promise.resolve(now);
  if (signal?.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const settle = (then: () => void) => {
      subscription.unsubscribe();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      then();
    };
    const onAbort = () => settle(() => reject(signal?.reason as Error));
    const subscription = actor.subscribe((s) => {
      const ended = outcome(s);
      if (ended) settle(() => resolve(ended));
    });
    const timer = setTimeout(() => settle(() => resolve('limit')), limitMs);
    signal?.addEventListener('abort', onAbort, { once: true });
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
  /** The systemId of its machine among the supervisor's children. */
  systemId: string;
  workers: { register(hook: { name: string; kind: WorkerStatus['kind']; describe: () => WorkerStatus | undefined }): unknown };
  log: { error(details: object, message: string): void; warn(details: object, message: string): void };
  /** The machine's limits (tests shorten the load limit, the grace before SIGKILL and the kill limit). */
  limits: { loadTimeLimitMs?: number; terminationGraceMs?: number; killLimitMs?: number };
}

/** The actor of a worker machine, as the adapter drives and reads it. */
export type WorkerActor<S extends WorkerSnapshotLike> = WorkerActorLike<S> & {
  send(event: { type: 'worker.start'; start: WorkerStart } | { type: 'worker.unload'; generation: number; reason: string }): void;
  on(type: '*', handler: (event: { type: string }) => void): unknown;
};

/**
 * What the worker adapters share. The adapter makes its worker machine with the real engine
 * (`logic`); the supervisor invokes it as its child (under `systemId`), commands it
 * and hears its reports, `worker.unloaded` and `worker.lost` included; the supervisor also sends it
 * each start, with the grant that planned it. Once the supervisor runs, `attach()` gives the
 * adapter that child: a job's wait for `loaded`, and the status line, go through it. Subclasses
 * give their work.
 */
export abstract class LifecycleWorker<S extends WorkerSnapshotLike> {
  /** When the current start was sent (the status's `since`), and which start that is. */
  #since: { generation: number; at: string } | null = null;
  #actor: WorkerActor<S> | undefined;
  /** Set when the adapter runs its machine alone (tests): then `stop()` ends it. */
  #own: { stop(): void } | undefined;

  readonly #wiring: Connection;

  protected constructor(
    /** The worker machine with its real engine, for the supervisor to invoke. */
    readonly logic: AnyActorLogic,
    readonly kind: WorkerStatus['kind'],
    wiring: Connection,
    readonly failure: (reason: string) => Error,
  ) {
    this.#wiring = wiring;
  }

  /** The systemId of its machine among the supervisor's children. */
  get systemId(): string {
    return this.#wiring.systemId;
  }

  /** The machine's limits, as the supervisor invokes it. */
  get limits(): Connection['limits'] {
    return this.#wiring.limits;
  }

  /** The supervisor's child of this kind, once it runs. */
  attach(actor: WorkerActor<S>): void {
    this.#actor = actor;
    const noteStart = (snapshot: S) => {
      const generation = snapshot.context.launch?.generation;
      if (generation !== undefined && generation !== this.#since?.generation) this.#since = { generation, at: new Date().toISOString() };
    };
    actor.subscribe(noteStart);
    actor.on('*', (event) => {
      if (event.type === 'worker.lost') this.#wiring.log.warn({ worker: this.kind, pid: actor.getSnapshot().context.pid }, 'worker process did not end after SIGKILL: lost, its memory stays reserved');
    });
    this.attached(actor);
    this.#wiring.workers.register({ name: this.#wiring.name, kind: this.kind, describe: () => this.describe() });
  }

  /**
   * Runs the worker machine alone, its reports going to `report` instead of a supervisor (the
   * worker tests). `stop()` ends it.
   */
  runAlone(report: (event: { type: string }) => void, options: { inspect?: Inspection['inspect'] } = {}): void {
    const actor = createActor(this.logic, { systemId: this.#wiring.systemId, input: { ...this.#wiring.limits }, ...(options.inspect ? { inspect: options.inspect } : {}) });
    actor.on('*', (event: { type: string }) => report(event));
    actor.subscribe({ error: (error: unknown) => this.#wiring.log.error({ err: error }, `${this.#wiring.name} actor failed`) });
    actor.start();
    this.#own = actor;
    this.attach(actor as unknown as WorkerActor<S>);
  }

  /** What a subclass watches on its machine once it runs (the chat worker's connections). */
  protected attached(_actor: WorkerActor<S>): void {}

  get actor(): WorkerActor<S> {
    if (!this.#actor) throw new Error(`the ${this.#wiring.name} machine is not running yet`);
    return this.#actor;
  }

  /** The GPUs the status shows for the loaded start. */
  protected gpus(): string[] {
    return [];
  }

  /**
   * Resolves once the start `generation` is loaded (the supervisor sent it with the job's grant);
   * rejects when it ends first or `signal` aborts.
   */
  async ready(generation: number, signal?: AbortSignal): Promise<void> {
    await whenLoaded(this.actor, generation, this.failure, signal);
  }

  /** The supervisor's unload command for one start: the machine carries it out and reports it. */
  unload(generation: number, reason: string): void {
    this.actor.send({ type: 'worker.unload', generation, reason });
  }

  /**
   * Resolves once the start `generation` is gone (unloaded, or replaced by a later start) or lost
   * (its process outlived SIGKILL: the job has nothing more to wait for, the supervisor keeps its
   * memory reserved), and at the latest after the unload's limit (the grace before SIGKILL and the
   * kill limit, by which the machine reports one or the other); rejects with the reason of
   * `signal` when it aborts first.
   */
  gone(generation: number, signal?: AbortSignal): Promise<GoneOutcome> {
    const { terminationGraceMs, killLimitMs } = this.actor.getSnapshot().context;
    return whenGone(this.actor, generation, { limitMs: terminationGraceMs + killLimitMs, ...(signal ? { signal } : {}) });
  }

  describe(): WorkerStatus | undefined {
    return describeWorker(this.actor.getSnapshot(), this.kind, this.#since?.at ?? null, this.gpus());
  }

  /** Ends the machine the adapter runs alone (under the supervisor, the supervisor ends it). */
  stop(): void {
    this.#own?.stop();
  }
}
