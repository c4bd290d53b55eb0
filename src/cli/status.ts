// `service-deck status`: the service of a state directory in a few lines (or `--json`): whether it
// runs, the inference listener and its port, the workers with their state and memory, the queue,
// and the profiles that are blocked and why. A running service answers `GET /api/v1/endpoint`; for
// a stopped one the files say the rest (no workers, no queue) and the catalog computes the blockers.
import type { Config } from '../config.js';
import type { EndpointRecord } from '../store/endpoint.js';
import type { ProfileView } from '../store/profile.schema.js';
import type { EndpointStatus, JobStatus, SupervisedWorker } from '../system/observe/console.types.js';
import type { CredentialSource } from './password.js';
import { onTarget, type ServiceFacts, type Target } from './target.js';

/** The status object's fields this command reads; a running service gives all of EndpointStatus. */
export type StatusView = Pick<EndpointStatus, 'status' | 'host' | 'port' | 'remembered_running' | 'error' | 'stop' | 'queue' | 'profiles'> & {
  workers: Array<EndpointStatus['workers'][number] & Partial<SupervisedWorker>>;
  gpus?: EndpointStatus['gpus'];
};

export interface StatusReport {
  state_dir: string;
  service: ServiceFacts;
  /** `GET /api/v1/endpoint` of the running service, or what the files say of a stopped one. */
  endpoint: StatusView;
}

/** What the files say of a stopped service: its address and remembered state, no workers, no queue. */
export function stoppedView(endpoint: Pick<EndpointRecord, 'host' | 'port' | 'running'>, profiles: ProfileView[]): StatusView {
  return {
    status: 'stopped',
    host: endpoint.host,
    port: endpoint.port,
    remembered_running: endpoint.running,
    error: null,
    stop: null,
    workers: [],
    queue: { waiting: [], running: [] },
    profiles,
  };
}

async function statusOf(target: Target): Promise<StatusView> {
  if (target.running) return target.session.call<EndpointStatus>('GET', '/api/v1/endpoint');
  return stoppedView(target.endpoint, await target.profiles());
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function profileLabel(id: string | null, profiles: Map<string, ProfileView>): string {
  if (id === null) return '-';
  const profile = profiles.get(id);
  return profile ? `${profile.name} (${id})` : id;
}

function listenerLine(report: StatusReport): string {
  const e = report.endpoint;
  const address = `${e.host}:${e.port}`;
  if (!report.service.running) {
    return `inference listener: stopped with the service (port ${e.port}; ${e.remembered_running ? 'starts again' : 'stays stopped'} when the service starts)`;
  }
  const error = e.error ? ` (last failure: ${e.error.message})` : '';
  if (e.status === 'running') return `inference listener: running on http://${address}/v1${error}`;
  if (e.status === 'stopping') {
    const waits = e.stop ? `: waiting for ${plural(e.stop.open_requests, 'open request')} and ${plural(e.stop.running_jobs, 'running job')}` : '';
    return `inference listener: stopping on ${address}${waits}`;
  }
  return `inference listener: stopped (port ${e.port})${error}`;
}

function memoryOf(worker: StatusView['workers'][number], gpus: StatusView['gpus']): string {
  const parts: string[] = [];
  const forecast = worker.plan?.forecast;
  if (forecast) {
    const gpu = Object.entries(forecast.gpu_mib).map(([uuid, mib]) => `${uuid} ${mib} MiB`);
    parts.push(`forecast RAM ${forecast.ram_mib} MiB${gpu.length > 0 ? `, GPU ${gpu.join(', ')}` : ''}`);
  }
  const used = (gpus ?? []).flatMap((g) => g.processes.filter((p) => p.pid === worker.pid).map((p) => `${g.uuid} ${p.usedMiB} MiB`));
  if (used.length > 0) parts.push(`GPU in use ${used.join(', ')}`);
  return parts.length > 0 ? `memory: ${parts.join('; ')}` : 'memory: no forecast (CPU worker or not planned)';
}

function jobLine(job: JobStatus, profiles: Map<string, ProfileView>): string {
  const where = job.position === null ? job.phase : `${job.phase} #${job.position}`;
  const times = job.running_ms === null ? `waited ${job.waited_ms} ms` : `waited ${job.waited_ms} ms, running ${job.running_ms} ms`;
  return `  ${where}  ${job.kind}  ${profileLabel(job.profile_id, profiles)}  ${job.source}  ${times}${job.reason ? `  (${job.reason})` : ''}`;
}

export function formatStatus(report: StatusReport): string {
  const { service, endpoint } = report;
  const profiles = new Map(endpoint.profiles.map((p) => [p.id, p]));
  const lines = [`service-deck: state directory ${report.state_dir}`];
  if (service.running) lines.push(`service: running (process ${service.pid}, admin API ${service.admin_url})`);
  else lines.push(`service: not running${service.note ? ` (${service.note})` : ''}`);
  lines.push(listenerLine(report));

  if (endpoint.workers.length === 0) lines.push('workers: none loaded');
  else lines.push('workers:');
  for (const w of endpoint.workers) {
    const revision = w.revision == null ? '' : ` revision ${w.revision}`;
    const pid = w.pid === null ? 'no process yet' : `process ${w.pid}`;
    lines.push(`  ${w.kind}  ${w.state}  ${profileLabel(w.profile_id, profiles)}${revision}  ${pid}  since ${w.since ?? '-'}`);
    lines.push(`    ${memoryOf(w, endpoint.gpus)}${w.stale ? `; goes when idle: ${w.stale}` : ''}`);
  }

  const { waiting, running } = endpoint.queue;
  lines.push(`queue: ${waiting.length} waiting, ${running.length} running`);
  for (const job of [...running, ...waiting]) lines.push(jobLine(job, profiles));

  const blocked = endpoint.profiles.filter((p) => p.blockers.length > 0);
  const published = endpoint.profiles.filter((p) => p.published).length;
  lines.push(`profiles: ${endpoint.profiles.length} (${published} published, ${blocked.length} blocked)`);
  for (const p of blocked) {
    lines.push(`  blocked: ${p.name} (${p.id}, ${p.category}${p.published ? ', published' : ''}): ${p.blockers.join('; ')}`);
  }
  return `${lines.join('\n')}\n`;
}

export async function statusCommand(config: Config, options: { json: boolean; credential: CredentialSource }): Promise<number> {
  const report = await onTarget(config, options.credential, 'service-deck status', async (target) => ({
    state_dir: target.stateDir,
    service: target.service,
    endpoint: await statusOf(target),
  }));
  process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : formatStatus(report));
  return 0;
}
