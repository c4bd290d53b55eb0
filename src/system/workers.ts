// The hooks through which the supervisor's decisions reach the worker adapters. The chat, image,
// TTS and STT workers (later issues) register here: when the supervisor emits `worker.unload` for a
// kind, that kind's hook unloads its process, and the system reports `worker.unloaded` back.
export interface WorkerHook {
  name: string;
  /** The worker kind this hook unloads on the supervisor's `worker.unload`. */
  kind?: WorkerStatus['kind'];
  /** Unload the worker start the supervisor names: own processes get SIGTERM, then SIGKILL after a grace period. */
  unload?: (command: UnloadCommand) => Promise<void>;
  /** What the status object shows for this worker, if it is loaded. */
  describe?: () => WorkerStatus | undefined;
}

export interface UnloadCommand {
  /** The worker start the supervisor's command names. */
  generation: number;
  reason: string;
}

export interface WorkerStatus {
  kind: 'chat' | 'image' | 'tts' | 'stt' | 'enhancer';
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

  async #all(pick: (hook: WorkerHook) => Promise<void> | undefined): Promise<void> {
    const results = await Promise.allSettled(this.#hooks.map((hook) => pick(hook)));
    const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [`${this.#hooks[i]?.name}: ${String(r.reason)}`] : []));
    if (failed.length > 0) throw new Error(failed.join('; '));
  }

  /** Unloads the workers of one kind; nothing to do when none is registered. */
  async unload(kind: WorkerStatus['kind'], command: UnloadCommand): Promise<void> {
    await this.#all((hook) => (hook.kind === kind ? hook.unload?.(command) : undefined));
  }

  statuses(): WorkerStatus[] {
    return this.#hooks.flatMap((hook) => hook.describe?.() ?? []);
  }
}
