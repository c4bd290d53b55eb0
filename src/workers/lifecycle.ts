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
