// The explicit unload (spec 3.2 "loaded | explicit unload in the chat test | no active requests |
// unloaded; with active requests the unload is rejected"), for the chat test's unload and the
// console's Unload of any worker: the supervisor decides (`worker.unloadRequest`: refused with
// `active_requests` while a job runs on that worker), this waits for its answer and then for the
// process to be gone (SIGTERM, then SIGKILL after the grace).
import { waitFor } from 'xstate';
import type { SupervisorEmitted, WorkerKind } from '../../machines/supervisor/index.js';
import { errors } from '../errors.js';
import { ask } from './ask.js';
import type { SupervisorActor } from './scheduler.js';

const UNLOAD_REPLY_MS = 15_000;
/** How long the unload waits for the process to end before it answers that it is still unloading. */
const UNLOAD_WAIT_MS = 30_000;

/** Unloads `kind`'s worker; resolves with whether its process is gone, or throws the refusal. */
export async function unloadWorker(supervisor: SupervisorActor, kind: WorkerKind, signal: AbortSignal): Promise<{ unloaded: boolean }> {
  const replied = await ask<typeof supervisor.logic, Extract<SupervisorEmitted, { type: 'supervisor.reply' }>>(
    supervisor,
    'supervisor.reply',
    { type: 'worker.unloadRequest', kind },
    { timeoutMs: UNLOAD_REPLY_MS, signal },
  );
  if (!replied) throw errors.unavailable('supervisor_timeout', 'The scheduler did not answer the unload in time.');
  if (!replied.outcome.ok) throw errors.conflict(replied.outcome.code, replied.outcome.message);
  const gone = await waitFor(supervisor, (s) => s.context.workers[kind].state === 'unloaded', { timeout: UNLOAD_WAIT_MS }).then(
    () => true,
    () => false,
  );
  return { unloaded: gone };
}
