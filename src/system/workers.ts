// The status lines of the workers: each adapter registers here once its machine, the supervisor's
// child, runs, and the status shows what each describes. (The supervisor commands its worker
// machines itself: nothing here carries an unload.)
export interface WorkerHook {
  name: string;
  kind?: WorkerStatus['kind'];
  /** What the status object shows for this worker, if it is loaded. */
  describe?: () => WorkerStatus | undefined;
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

  statuses(): WorkerStatus[] {
    return this.#hooks.flatMap((hook) => hook.describe?.() ?? []);
  }
}
