// What a worker adapter reports when its process ended, shared by the worker machines.

/** How a worker process ended, diagnosed by the adapter (spec 7: RAM OOM only when confirmed). */
export interface ExitReport {
  exitCode: number | null;
  signal: string | null;
  /** ram_oom, gpu_oom, timeout, model_error, stopped or unclear. */
  cause: string;
  /** Names the likely cause for the client and the operator; never a prompt. */
  message: string;
}
