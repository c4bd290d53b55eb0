// The endpoint status object (`GET /api/v1/endpoint`, CONTRACT section 6): the listener machine's
// state and address, the stop in progress, the counters, the supervisor's workers and queue with
// their diagnostics, the profiles, the GPUs and the RAM budget.
import { MIB, type WorkerKind } from '../../../machines/supervisor/index.js';
import { probeGpus, type GpuInventory } from '../../adapters/gpus.js';
import { ramBudget, readRamFacts } from '../../adapters/memory.js';
import type { Config } from '../../config.js';
import type { Extensions } from '../../store/endpoint.js';
import type { SecretStore } from '../../store/secrets.js';
import type { BuildWatcher } from '../catalog/builds.js';
import type { Catalog } from '../catalog/catalog.js';
import type { Counters } from './counters.js';
import { diagnostics } from './diagnostics.js';
import { runningJobs, type ListenerActor } from '../listener.js';
import type { Scheduler, SupervisorActor } from '../scheduler.js';
import type { WorkerHooks } from '../workers.js';
import type { EndpointStatus } from './console.types.js';

/** The inventory as the status shows it: a simulated inventory that cannot be read is `failed`. */
type GpuStatus = Omit<GpuInventory, 'source'> & { source: GpuInventory['source'] | 'failed' };

export function statusWord(listener: ListenerActor): EndpointStatus['status'] {
  const snapshot = listener.getSnapshot();
  if (snapshot.matches('running')) return 'running';
  if (snapshot.matches('stopping') || snapshot.matches('off')) return 'stopping';
  return 'stopped';
}

/** The pids of our own workers: GPU processes with these pids are not foreign. */
export const ownPids = (supervisor: SupervisorActor) =>
  new Set(Object.values(supervisor.getSnapshot().context.workers).flatMap((w) => (w.pid === null ? [] : [w.pid])));

export interface StatusSources {
  config: Config;
  listener: ListenerActor;
  supervisor: SupervisorActor;
  scheduler: Scheduler;
  secrets: SecretStore;
  counters: Counters;
  workers: WorkerHooks;
  catalog: Catalog;
  builds: BuildWatcher;
  extensions: { readonly current: Readonly<Extensions> };
  /** The inference listener's bound port, while it listens. */
  boundPort: () => number | undefined;
  /** Since when a stop is in progress. */
  stopSince: () => string | null;
  /** When the running start of each kind's worker began (its adapter's record). */
  since: (kind: WorkerKind) => string | null;
  /** The steps an image process of a start has done. */
  progress: (generation: number) => { step: number; steps: number } | null;
}

export async function endpointStatus(s: StatusSources): Promise<EndpointStatus> {
  const { config, listener, supervisor } = s;
  const [inventory, ram] = await Promise.all([
    probeGpus(config.env, ownPids(supervisor)).catch((error: unknown): GpuStatus => ({ source: 'failed', gpus: [], problem: (error as Error).message })),
    readRamFacts(),
  ]);
  // Read after the probes: everything below is one moment's view.
  const supervised = supervisor.getSnapshot().context;
  const stopSince = s.stopSince();
  const budget = ramBudget(ram, config.ramReserveMiB * MIB);
  const report = diagnostics(supervised, {
    now: Date.now(),
    times: (id) => s.scheduler.times(id),
    since: s.since,
    progress: s.progress,
    build: (kind, generation) => s.builds.status(kind, generation),
  });
  const { context } = listener.getSnapshot();
  return {
    status: statusWord(listener),
    host: context.address.host,
    port: s.boundPort() ?? context.address.port,
    remembered_running: context.remembered.running,
    port_range: { ...context.portRange, from: config.apiPortsFrom },
    extensions: { ...s.extensions.current },
    error: context.error,
    stop: stopSince === null ? null : { since: stopSince, open_requests: s.counters.open, running_jobs: runningJobs(supervised.jobs) },
    secrets_problem: s.secrets.problem ?? null,
    gpu_mode: supervisor.getSnapshot().matches({ active: { gpuMode: 'exclusiveImage' } }) ? 'exclusive_image' : 'llm',
    counters: s.counters.snapshot(),
    workers: [...report.workers, ...s.workers.statuses().filter((w) => !report.workers.some((r) => r.kind === w.kind))],
    queue: report.queue,
    profiles: await s.catalog.views(inventory.gpus.length > 0),
    gpus: inventory.gpus,
    gpu_probe: { source: inventory.source, problem: inventory.problem ?? null },
    memory: {
      ram: {
        source: ram.source,
        host_total_mib: Math.floor(ram.hostTotalBytes / MIB),
        host_available_mib: Math.floor(ram.hostAvailableBytes / MIB),
        cgroup_limit_mib: ram.cgroup?.limitBytes == null ? null : Math.floor(ram.cgroup.limitBytes / MIB),
        cgroup_usage_mib: ram.cgroup ? Math.floor(ram.cgroup.usageBytes / MIB) : null,
        cgroup_inactive_file_mib: ram.cgroup ? Math.floor(ram.cgroup.inactiveFileBytes / MIB) : null,
        oom_kills: ram.cgroup?.oomKills ?? null,
        available_mib: Math.floor(ram.availableBytes / MIB),
        reserve_mib: config.ramReserveMiB,
        budget_mib: Math.floor(budget.budgetBytes / MIB),
        limited_by: budget.limitedBy,
        problem: ram.problem ?? null,
      },
      gpu_reserve_mib: inventory.gpus.map((g) => ({ uuid: g.uuid, reserve_mib: config.gpuReserveMiB.byGpu[g.uuid] ?? config.gpuReserveMiB.default })),
      note: 'Memory forecasts are predictions from the model metadata and the profiles, not proof of error-free operation.',
    },
  };
}
