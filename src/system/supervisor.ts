// The root actor (the supervisor, with the listener and the queue as its children) made with its
// real actors: the listener machine's (src/system/listener.ts) and the memory check's start facts
// (src/system/startFacts.ts), and the worker machines with their real engines as its children (the
// adapters in src/workers/ make them). The profile store tells it about saves, deletions and
// publications.
import { createActor, type AnyActorLogic } from 'xstate';
import { SYSTEM_IDS, WORKER_IDS } from '../../machines/ids.js';
import { supervisorMachine, WORKER_KINDS, type SupervisorEvent, type WorkerKind, type WorkerLimits } from '../../machines/supervisor/index.js';
import type { RuntimeLookup } from '../adapters/runtimes.js';
import type { Config } from '../config.js';
import type { EndpointRecord } from '../store/endpoint.js';
import type { ProfileStore } from '../store/profiles.js';
import type { Inspection } from './observe/inspect.js';
import type { InferenceListener } from './listener.js';
import type { Logger } from './observe/log.js';
import type { SupervisorActor } from './scheduler.js';
import { supervisorAdapters } from './startFacts.js';
import { ownPids } from './observe/status.js';

export interface SupervisorDeps {
  config: Config;
  lookup: RuntimeLookup;
  log: Logger;
  /** The inspect callback of the whole actor system (the chart feed, and the chosen inspector). */
  inspect: Inspection['inspect'];
  listener: InferenceListener;
  /** What `endpoint.json` remembered from before this start. */
  record: EndpointRecord;
  /** The worker machines with their real engines, which the supervisor invokes as its children. */
  workerMachines: Record<WorkerKind, { logic: AnyActorLogic; limits: WorkerLimits }>;
  profiles: ProfileStore;
}

/** The supervisor, not yet started. */
export function createSupervisor(deps: SupervisorDeps): SupervisorActor {
  const { config, log, record, profiles } = deps;
  const workerActors = Object.fromEntries(WORKER_KINDS.map((kind) => [WORKER_IDS[kind], deps.workerMachines[kind].logic]));
  const supervisor: SupervisorActor = createActor(
    supervisorMachine.provide({
      actors: { listener: deps.listener.logic(), ...supervisorAdapters({ config, lookup: deps.lookup, ownPids: () => ownPids(supervisor) }), ...workerActors },
    }),
    {
      systemId: SYSTEM_IDS.supervisor,
      input: {
        listener: {
          address: { host: record.host, port: record.port },
          portRange: config.apiPorts,
          rememberedRunning: record.running,
          drainLimitMs: config.drainLimitMs,
        },
        workers: Object.fromEntries(WORKER_KINDS.map((kind) => [kind, deps.workerMachines[kind].limits])),
        scheduling: config.scheduling,
      },
      inspect: deps.inspect,
    },
  );

  // The supervisor decides which worker goes and commands its child, the worker machine, which
  // carries it out and reports its own `worker.unloaded` once its process is gone (or
  // `worker.lost` when it is not). Here it is only logged.
  supervisor.on('worker.unload', (event) => log.info({ worker: event.kind, code: event.code, reason: event.reason }, 'unloading worker'));
  supervisor.on('gpu.denied', (event) => log.info({ job: event.jobId, code: event.code }, 'reservation denied'));
  supervisor.on('gpu.revoked', (event) => log.warn({ job: event.jobId, code: event.code, reason: event.message }, 'reservation revoked'));
  supervisor.subscribe({ error: (error) => log.error({ err: error }, 'supervisor actor failed') });

  // Waiting requests of a changed, deleted or unpublished profile are rejected (spec 3.7).
  const tellProfile = (id: string, revision: number | null) => {
    const event: SupervisorEvent = { type: 'profile.changed', profileId: id, revision, published: profiles.isPublished(id) };
    supervisor.send(event);
  };
  profiles.on('profile.changed', ({ id, revision }) => tellProfile(id, revision));
  profiles.on('publication.changed', ({ removed }) => {
    for (const id of removed) tellProfile(id, profiles.get(id)?.revision ?? null);
  });
  return supervisor;
}
