// Liveness and readiness of the service, for supervisors and load balancers: only ok or
// not ok and a reason code, never data. Live: the supervisor (the root actor) runs. Ready: the
// state directory can be read, and the inference listener is where `endpoint.json` wants it
// (running when it says running, stopped when it says stopped), not on its way or failed.
import { constants } from 'node:fs';
import { access } from 'node:fs/promises';
import type { ListenerActor } from '../listener.js';
import type { SupervisorActor } from '../scheduler.js';

export type Health = { ok: true } | { ok: false; reason: HealthReason };

export type HealthReason =
  | 'supervisor_failed'
  /** The service is ending (SIGTERM): the supervisor is done. */
  | 'shutting_down'
  | 'state_dir_unreadable'
  | 'listener_starting'
  | 'listener_stopping'
  /** endpoint.json wants it running, and it is stopped (its port could not be bound). */
  | 'listener_down'
  /** endpoint.json wants it stopped, and it runs. */
  | 'listener_up';

export function liveness(supervisor: SupervisorActor): Health {
  const { status } = supervisor.getSnapshot();
  if (status === 'active') return { ok: true };
  return { ok: false, reason: status === 'error' ? 'supervisor_failed' : 'shutting_down' };
}

/** Where the listener machine is, judged against the remembered wish. Pure. */
export function listenerReadiness(state: 'restoring' | 'starting' | 'running' | 'stopping' | 'stopped', wantsRunning: boolean): Health {
  if (state === 'restoring' || state === 'starting') return { ok: false, reason: 'listener_starting' };
  if (state === 'stopping') return { ok: false, reason: 'listener_stopping' };
  if (state === 'running') return wantsRunning ? { ok: true } : { ok: false, reason: 'listener_up' };
  return wantsRunning ? { ok: false, reason: 'listener_down' } : { ok: true };
}

export async function readiness(deps: { stateDir: string; listener: ListenerActor | undefined; wantsRunning: boolean; supervisor: SupervisorActor }): Promise<Health> {
  const live = liveness(deps.supervisor);
  if (!live.ok) return live;
  try {
    await access(deps.stateDir, constants.R_OK | constants.X_OK);
  } catch {
    return { ok: false, reason: 'state_dir_unreadable' };
  }
  const snapshot = deps.listener?.getSnapshot();
  if (!snapshot) return { ok: false, reason: 'listener_stopping' };
  const state = (['restoring', 'starting', 'running', 'stopped'] as const).find((name) => snapshot.matches(name)) ?? 'stopping';
  return listenerReadiness(state, deps.wantsRunning);
}
