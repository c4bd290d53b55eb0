// The hooks through which the supervisor's decisions reach the worker adapters. The chat, image,
// TTS, STT and enhancer workers register here: when the supervisor emits `worker.unload` for a
// kind, that kind's hook hands the command to its worker machine, which reports back itself.
export interface WorkerHook {
  name: string;
  /** The worker kind this hook unloads on the supervisor's `worker.unload`. */
  kind?: WorkerStatus['kind'];
  /** Hand the supervisor's unload of one start to the worker machine (SIGTERM, then SIGKILL after a grace period). */
  unload?: (command: UnloadCommand) => void;
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

  /** Hands the unload to the workers of one kind; nothing to do when none is registered. */
  unload(kind: WorkerStatus['kind'], command: UnloadCommand): void {
    for (const hook of this.#hooks) if (hook.kind === kind) hook.unload?.(command);
  }

  statuses(): WorkerStatus[] {
    return this.#hooks.flatMap((hook) => hook.describe?.() ?? []);
  }
}
