// Diagnostics per job and per worker for `GET /api/v1/endpoint` (spec 2.5, 7; CONTRACT section 6):
// each job's phase, wait time, reservations and GPU occupancy; each started worker's memory
// forecast with the reserve per GPU, the RAM budget and the GPU layer limit. A projection of the
// supervisor's context, nothing more; forecasts are labelled as predictions.
import { overtakenSwitches, waitingOrder, type JobRecord, type StartPlan, type SupervisorContext, type WorkerKind, type WorkerRecord } from '../../../machines/supervisor/index.js';
import type { JobTimes } from '../scheduler.js';
import type { BuildStatus, JobStatus, PlanStatus, QueueStatus, SupervisedWorker } from './console.types.js';

export function planStatus(plan: StartPlan): PlanStatus {
  return {
    gpu_layers: plan.gpuLayers,
    gpu_layer_limit: plan.gpuLayerLimit,
    tensor_split: plan.tensorSplit,
    fit: plan.fit,
    fit_tool: plan.fitTool,
    forecast: {
      ram_mib: Math.ceil(plan.forecast.ramMiB),
      gpu_mib: Object.fromEntries(Object.entries(plan.forecast.gpuMiB).map(([uuid, mib]) => [uuid, Math.ceil(mib)])),
      basis: plan.forecast.basis,
      note: 'prediction',
    },
    gpu_budget: plan.gpuBudget.map((g) => ({
      uuid: g.uuid,
      free_mib: g.freeMiB,
      reserve_mib: g.reserveMiB,
      available_mib: g.availableMiB,
      forecast_mib: g.forecastMiB,
    })),
    ram_budget: {
      available_mib: plan.ramBudget.availableMiB,
      reserve_mib: plan.ramBudget.reserveMiB,
      forecast_mib: plan.ramBudget.forecastMiB,
      limited_by: plan.ramBudget.limitedBy,
    },
  };
}

interface Clocks {
  now: number;
  times: (jobId: string) => JobTimes | undefined;
  since: (kind: WorkerKind) => string | null;
  /** Steps done by the image process of a start (image jobs). */
  progress?: (generation: number) => { step: number; steps: number } | null;
  /** Which build of its program a worker start runs (path and fingerprint). */
  build?: (kind: WorkerKind, generation: number) => BuildStatus | null;
}

/** The waiting switch's reason: how much longer chats for the loaded profile may go first. */
function overtakenReason(job: JobRecord, waitedMs: number): string {
  const left = Math.max(0, Math.ceil(((job.switchBound?.ms ?? 0) - waitedMs) / 1000));
  return `behind the loaded profile's requests, at most ${left} s more`;
}

function jobStatus(id: string, job: JobRecord, workers: Record<WorkerKind, WorkerRecord>, clocks: Clocks, position: number | null, overtaken = false): JobStatus {
  const times = clocks.times(id);
  const submitted = times?.submittedAt ?? job.spec.at;
  const granted = times?.grantedAt ?? null;
  let phase: JobStatus['phase'] = job.phase === 'checking' ? 'checking' : 'waiting';
  if (job.phase === 'running') phase = job.worker && workers[job.worker].state === 'loading' ? 'starting' : 'running';
  const waited = Math.max(0, (granted ?? clocks.now) - submitted);
  let reason: string | null = null;
  if (overtaken) reason = overtakenReason(job, waited);
  else if (job.phase === 'running' && job.steps?.image === 'due') reason = 'its prompt enhancer answered on the CPU: the image step waits for every GPU';
  return {
    job_id: id,
    kind: job.spec.kind,
    profile_id: job.spec.profileId,
    revision: job.spec.revision,
    source: job.spec.source,
    phase,
    position,
    waited_ms: waited,
    running_ms: granted === null ? null : Math.max(0, clocks.now - granted),
    reservation: { worker: job.worker, gpus: job.gpus },
    memory: job.worker && workers[job.worker].plan ? planStatus(workers[job.worker].plan!) : null,
    progress: job.spec.kind === 'image' && job.phase === 'running' ? (clocks.progress?.(workers.image.generation) ?? null) : null,
    reason,
  };
}

export function diagnostics(context: SupervisorContext, clocks: Clocks): { queue: QueueStatus; workers: SupervisedWorker[] } {
  const overtaken = new Set(overtakenSwitches(context));
  const waiting = waitingOrder(context.jobs).map((id, index) => jobStatus(id, context.jobs[id]!, context.workers, clocks, index + 1, overtaken.has(id)));
  const running = Object.entries(context.jobs)
    .filter(([, job]) => job.phase === 'running')
    .map(([id, job]) => jobStatus(id, job, context.workers, clocks, null));
  const workers = Object.values(context.workers)
    .filter((w) => w.state !== 'unloaded')
    .map((w) => ({
      kind: w.kind,
      profile_id: w.profileId,
      revision: w.revision,
      state: w.state,
      pid: w.pid,
      gpus: w.plan?.gpus ?? [],
      since: clocks.since(w.kind),
      slots: w.slots,
      active_jobs: running.filter((j) => j.reservation.worker === w.kind).length,
      last: w.last,
      plan: w.plan ? planStatus(w.plan) : null,
      build: clocks.build?.(w.kind, w.generation) ?? null,
      stale: w.stale?.reason ?? null,
    }));
  return { queue: { waiting, running }, workers };
}
