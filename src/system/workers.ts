// The status lines of the workers: each adapter registers here once its machine, the supervisor's
// child, runs, and the status shows what each describes. (The supervisor commands its worker
// machines itself: nothing here carries an unload.) Beside them, each kind's recent stderr lines.
import { WorkerStderr } from './observe/stderrLines.js';
import type { WorkerStatus } from './observe/console.types.js';

export type { WorkerStatus };

export interface WorkerHook {
  name: string;
  kind?: WorkerStatus['kind'];
  /** What the status object shows for this worker, if it is loaded. */
  describe?: () => WorkerStatus | undefined;
}

export class WorkerHooks {
  readonly #hooks: WorkerHook[] = [];
  /** Each worker kind's recent stderr lines, redacted, for the console. */
  readonly stderr = new WorkerStderr();

  register(hook: WorkerHook): void {
    this.#hooks.push(hook);
  }

  statuses(): WorkerStatus[] {
    return this.#hooks.flatMap((hook) => hook.describe?.() ?? []);
  }

  /** When the running start of this kind's worker began (its adapter sent the start), or null. */
  since(kind: WorkerStatus['kind']): string | null {
    for (const hook of this.#hooks) if (hook.kind === kind) return hook.describe?.()?.since ?? null;
    return null;
  }
}
