// The hooks through which the listener's stop reaches the workers and the queue. The chat, image,
// TTS and STT workers and the queue (later issues) register here; the listener machine's
// `discardWaiting` and `unloadWorkers` actors call them in the spec's order.
export interface WorkerHook {
  name: string;
  /** Reject every waiting request (endpoint stop): `endpoint_stopped`. */
  discardWaiting?: () => Promise<void>;
  /** Unload the worker: own processes get SIGTERM, then SIGKILL after a grace period. */
  unload?: () => Promise<void>;
  /** What the status object shows for this worker, if it is loaded. */
  describe?: () => WorkerStatus | undefined;
}

export interface WorkerStatus {
  kind: 'chat' | 'image' | 'tts' | 'stt';
  profile_id: string | null;
  state: string;
  pid: number | null;
  gpus: string[];
  since: string | null;
}

export class WorkerHooks {
  readonly #hooks: WorkerHook[] = [];

  register(hook: WorkerHook): () => void {
    this.#hooks.push(hook);
    return () => {
      const index = this.#hooks.indexOf(hook);
      if (index >= 0) this.#hooks.splice(index, 1);
    };
  }

  async #all(pick: (hook: WorkerHook) => (() => Promise<void>) | undefined): Promise<void> {
    const results = await Promise.allSettled(this.#hooks.map((hook) => pick(hook)?.()));
    const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [`${this.#hooks[i]?.name}: ${String(r.reason)}`] : []));
    if (failed.length > 0) throw new Error(failed.join('; '));
  }

  discardWaiting(): Promise<void> {
    return this.#all((hook) => hook.discardWaiting);
  }

  unloadAll(): Promise<void> {
    return this.#all((hook) => hook.unload);
  }

  statuses(): WorkerStatus[] {
    return this.#hooks.flatMap((hook) => hook.describe?.() ?? []);
  }
}
