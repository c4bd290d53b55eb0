// Spec 3.2 "loaded | request for a different profile, or a new revision of the profile | |
// unloaded, then loaded with the new profile", and 2.1's `revision`: "a new revision makes the
// scheduler unload and restart the worker with the stored parameters". The supervisor unloads the
// stale worker once it is idle; this starts the new revision at once, so that the first request
// after a save does not pay for the load.
//
// The restart is a preload job (`source: 'preload'`), as the warm audio policy's: it goes through
// the same queue, memory check and worker start as a request, waits behind every request that
// needs its worker and holds none up, and unloads nothing of ours to make room. A request that
// comes meanwhile joins the start. It is made only for a worker that was loaded with the profile,
// while the endpoint accepts requests; a speech worker only under the audio policy `auto` (a warm
// one is reloaded by its policy, a `per_request` one is not kept loaded).
import type { JobRequest, Scheduler, SupervisorActor } from './scheduler.js';
import { ReservationDenied, ReservationRevoked } from './scheduler.js';
import type { StoredProfile } from '../store/profile.schema.js';
import type { ProfileStore } from '../store/profiles.js';
import type { Logger } from './observe/log.js';

type ReloadKind = 'chat' | 'tts' | 'stt';
const RELOAD_KINDS: readonly ReloadKind[] = ['chat', 'tts', 'stt'];

/** What a restart waits for (the supervisor starts it with the grant): the worker adapter of its kind. */
interface Restartable {
  ready(generation: number, signal?: AbortSignal): Promise<void>;
}

export interface ReloadDeps {
  supervisor: SupervisorActor;
  scheduler: Scheduler;
  profiles: ProfileStore;
  workers: Record<ReloadKind, Restartable>;
  /** Whether the inference listener accepts requests now. */
  accepting: () => boolean;
  log: Logger;
}

/** The reservation a restart of `profile`'s worker asks for. */
function restartJob(kind: ReloadKind, profile: StoredProfile): JobRequest {
  const device = profile.category === 'tts' ? profile.params.device : 'cpu';
  const slots = profile.category === 'chat' ? profile.params.slots : 1;
  return { kind, source: 'preload', profileId: profile.id, revision: profile.revision, slots, device, whenBusy: 'wait', profile } as JobRequest;
}

/**
 * Listens to profile saves. Call it after the supervisor is told of saves (src/system/supervisor.ts
 * subscribes first), so that its worker record already says the worker is stale.
 */
export function restartOnNewRevision(deps: ReloadDeps): void {
  const { supervisor, scheduler, profiles, workers, log } = deps;
  profiles.on('profile.changed', ({ id, revision }) => {
    if (revision === null || !deps.accepting()) return;
    const context = supervisor.getSnapshot().context;
    const kind = RELOAD_KINDS.find((k) => {
      const worker = context.workers[k];
      return worker.profileId === id && worker.state !== 'unloaded' && worker.revision !== revision;
    });
    if (!kind || (kind !== 'chat' && context.audio[kind] !== 'auto')) return;
    const profile = profiles.get(id);
    if (!profile || profile.category !== kind || profile.revision !== revision) return;
    void restart(kind, profile);
  });

  async function restart(kind: ReloadKind, profile: StoredProfile): Promise<void> {
    const started = Date.now();
    let lease;
    try {
      lease = await scheduler.reserve(restartJob(kind, profile));
    } catch (error) {
      // A refused restart is no failure: the next request loads the new revision (and meets the same refusal).
      const why = error instanceof ReservationDenied ? error.code : (error as Error).message;
      log.info({ worker: kind, profile: profile.id, revision: profile.revision, reason: why }, 'the new revision was not started after its save');
      return;
    }
    try {
      await workers[kind].ready(lease.generation, lease.signal);
      log.info({ worker: kind, profile: profile.id, revision: profile.revision, ms: Date.now() - started }, 'the new revision was started after its save');
    } catch (error) {
      const revoked = lease.signal.reason instanceof ReservationRevoked ? lease.signal.reason : undefined;
      log.info({ worker: kind, profile: profile.id, revision: profile.revision, reason: revoked?.code ?? (error as Error).message }, 'the new revision was not started after its save');
    } finally {
      lease.release();
    }
  }
}
