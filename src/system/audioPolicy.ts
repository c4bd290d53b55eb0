// The audio memory policy's adapter (spec 2.4, 3.6, 4.7): one actor of the audio policy machine
// per speech worker kind, fed with what it needs to know (whether the endpoint runs, the
// supervisor's record of its worker, profile saves), its mode carried to the supervisor, and its
// preload carried out as a job through the same reservation, memory check and worker start as a
// request. The stored choice is `audio-policy.json`; `errors` is what keeps a warm choice from
// being loaded now.
import { createActor, fromPromise, type Actor } from 'xstate';
import { audioPolicyMachine, type AudioKind, type AudioPolicyRecord, type AudioWorkerView, type PreloadInput } from '../../machines/audioPolicy/index.js';
import type { RuntimeLookup } from '../adapters/runtimes.js';
import { AUDIO_KINDS, toJson, type AudioPolicyStore } from '../store/audioPolicy.js';
import type { StoredProfile } from '../store/profile.schema.js';
import type { ProfileStore } from '../store/profiles.js';
import { profileBlockers } from './catalog/blockers.js';
import type { Inspection } from './observe/inspect.js';
import type { Logger } from './observe/log.js';
import { ReservationDenied, ReservationRevoked, type Scheduler, type SupervisorActor } from './scheduler.js';
import type { AudioPolicyError, AudioPolicyView } from './observe/console.types.js';

type PolicyActor = Actor<typeof audioPolicyMachine>;

/** What the warm preload waits for (the supervisor starts it with the grant): the TTS or STT worker adapter. */
interface SpeechWorker {
  ready(generation: number, signal?: AbortSignal): Promise<void>;
}

/** A failure the machine records with its code. */
export class PolicyError extends Error {
  override name = 'PolicyError';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Why a profile cannot be warm now, or undefined when it can be tried. */
export async function warmBlocker(kind: AudioKind, profileId: string | null, profiles: ProfileStore, lookup: RuntimeLookup): Promise<PolicyError | undefined> {
  if (profileId === null) return new PolicyError('not_executable', 'mode warm requires an executable profile: none is selected');
  const profile = profiles.get(profileId);
  if (!profile || profile.category !== kind) return new PolicyError('profile_missing', `the ${kind} profile ${profileId} does not exist (any more)`);
  const blockers = await profileBlockers(profile, lookup);
  if (blockers.length === 0) return undefined;
  const code = blockers.every((b) => b.startsWith('runtime missing')) ? 'runtime_missing' : 'not_executable';
  return new PolicyError(code, `the ${kind} profile ${profile.name} cannot be loaded: ${blockers.join('; ')}`);
}

export interface AudioPolicyDeps {
  store: AudioPolicyStore;
  supervisor: SupervisorActor;
  scheduler: Scheduler;
  profiles: ProfileStore;
  lookup: RuntimeLookup;
  workers: Record<AudioKind, SpeechWorker>;
  /** Whether the inference listener takes new requests. */
  accepting: () => boolean;
  /** Subscribes to the listener's changes (it exists once the supervisor has started). */
  watchListener: (onChange: () => void) => { unsubscribe(): void };
  log: Logger;
  retryMs?: number;
  inspect?: Inspection['inspect'];
}

export class AudioPolicies {
  readonly #deps: AudioPolicyDeps;
  readonly #actors: Record<AudioKind, PolicyActor>;
  readonly #feeds: Array<() => void> = [];

  constructor(deps: AudioPolicyDeps) {
    this.#deps = deps;
    const { supervisor, scheduler, profiles, workers, log } = deps;
    const preload = fromPromise<void, PreloadInput>(async ({ input, signal }) => {
      const blocker = await warmBlocker(input.kind, input.profileId, profiles, deps.lookup);
      if (blocker) throw blocker;
      const profile = profiles.get(input.profileId) as StoredProfile;
      const device = profile.category === 'tts' ? profile.params.device : 'cpu';
      let lease;
      try {
        lease = await scheduler.reserve(
          { kind: input.kind, source: 'preload', profileId: profile.id, revision: profile.revision, slots: 1, device, whenBusy: 'wait', profile },
          { signal },
        );
      } catch (error) {
        if (error instanceof ReservationDenied) throw new PolicyError(error.code, error.message);
        throw error;
      }
      const worker = workers[input.kind];
      try {
        await worker.ready(lease.generation, AbortSignal.any([signal, lease.signal]));
        log.info({ worker: input.kind, profile: profile.id }, 'audio policy warm: preloaded');
      } catch (error) {
        const revoked = lease.signal.reason;
        if (revoked instanceof ReservationRevoked) {
          // Given way to a request (not a failure); a crash or a missing runtime is one, retried later.
          if (revoked.code === 'resources_busy') throw new PolicyError('displaced', `the preload gave way: ${revoked.message}`);
          throw new PolicyError(revoked.code, `the ${input.kind} worker did not load: ${revoked.message}`);
        }
        throw new PolicyError('worker_failed', `the ${input.kind} worker did not load: ${(error as Error).message}`);
      } finally {
        lease.release();
      }
    });
    const logic = audioPolicyMachine.provide({ actors: { preload } });
    const make = (kind: AudioKind): PolicyActor => {
      const record = deps.store.get(kind);
      const actor = createActor(logic, {
        systemId: `audioPolicy.${kind}`,
        input: { ...record, ...(deps.retryMs === undefined ? {} : { retryMs: deps.retryMs }) },
        ...(deps.inspect ? { inspect: deps.inspect } : {}),
      });
      actor.on('policy.mode', (event) => supervisor.send({ type: 'audio.mode', kind: event.kind, mode: event.mode }));
      actor.subscribe({ error: (error) => log.error({ err: error, worker: kind }, 'audio policy actor failed') });
      return actor;
    };
    this.#actors = { tts: make('tts'), stt: make('stt') };
  }

  /** Starts both policies and their feeds (after the supervisor has started). */
  start(): void {
    const { supervisor, profiles, accepting, watchListener } = this.#deps;
    for (const kind of AUDIO_KINDS) this.#actors[kind].start();
    let running: boolean | undefined;
    const seen: Partial<Record<AudioKind, AudioWorkerView>> = {};
    const feed = () => {
      const context = supervisor.getSnapshot().context;
      for (const kind of AUDIO_KINDS) {
        const w = context.workers[kind];
        const last = seen[kind];
        if (last && last.state === w.state && last.profileId === w.profileId && last.stale === (w.stale !== null)) continue;
        const view: AudioWorkerView = { state: w.state, profileId: w.profileId, stale: w.stale !== null };
        seen[kind] = view;
        this.#actors[kind].send({ type: 'worker.changed', worker: view });
      }
      const now = accepting() && context.accepting;
      if (now === running) return;
      running = now;
      for (const kind of AUDIO_KINDS) this.#actors[kind].send({ type: 'endpoint.changed', running: now });
    };
    const fromSupervisor = supervisor.subscribe({ next: feed });
    const fromListener = watchListener(feed);
    const onProfile = ({ id }: { id: string }) => {
      for (const kind of AUDIO_KINDS) this.#actors[kind].send({ type: 'profile.changed', profileId: id });
    };
    profiles.on('profile.changed', onProfile);
    this.#feeds.push(
      () => fromSupervisor.unsubscribe(),
      () => fromListener.unsubscribe(),
      () => profiles.off('profile.changed', onProfile),
    );
    feed();
  }

  /** Saves a choice, then lets it take effect. */
  async set(record: AudioPolicyRecord): Promise<void> {
    await this.#deps.store.set(record);
    this.#actors[record.kind].send({ type: 'policy.set', mode: record.mode, profileId: record.profileId });
  }

  /** The settings, what keeps a warm choice from being loaded now, and where each policy stands. */
  async view(): Promise<AudioPolicyView> {
    const errors: AudioPolicyError[] = [];
    const states = {} as Record<AudioKind, string>;
    for (const kind of AUDIO_KINDS) {
      const snapshot = this.#actors[kind].getSnapshot();
      const { mode, profileId, error } = snapshot.context;
      const value = snapshot.value;
      states[kind] = typeof value === 'object' && 'warm' in value ? `warm.${String(value.warm)}` : mode;
      if (mode !== 'warm') continue;
      if (error) {
        errors.push({ kind, profile_id: profileId, code: error.code, message: error.message, attempts: error.attempts });
        continue;
      }
      const blocker = await warmBlocker(kind, profileId, this.#deps.profiles, this.#deps.lookup);
      if (blocker) errors.push({ kind, profile_id: profileId, code: blocker.code, message: blocker.message, attempts: 0 });
    }
    return { settings: this.#deps.store.list().map(toJson), errors, states };
  }

  stop(): void {
    for (const end of this.#feeds.splice(0)) end();
    for (const kind of AUDIO_KINDS) this.#actors[kind].stop();
  }
}
