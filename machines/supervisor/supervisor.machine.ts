// The supervisor (spec 1, 3, 3.7, 7, 8): the root actor. It shares the scarce GPUs and the RAM
// between the chat, image, TTS and STT workers through reservations and a FIFO queue:
//
// - "A scheduler serialises access to GPUs and memory through reservations and a FIFO queue."
// - Reservation is an event protocol: a job sends `gpu.reserve`, waits in the queue child, and hears
//   `gpu.granted` (with the worker start plan when its worker must start) or `gpu.denied`. When
//   nobody waits and its loaded worker has a slot free, it is granted at once, without the queue's
//   round trip (FIFO holds: it overtakes nobody; `runsAtOnce` in schedule.ts). It holds
//   the reservation for its whole life ("streaming keeps the model reservation until the output
//   ends") and gives it back with `gpu.release`. `gpu.revoked` takes it back early (a foreign GPU
//   process appeared, the worker died, the endpoint stopped). A release that nobody waits for,
//   with no worker due for an idle unload, skips `plan()` (`releaseLeavesNothingToPlan`).
// - The queue child keeps the waiting order: its `job.queued` gives each job a ticket, and `plan()`
//   walks the jobs by ticket (`waitingOrder`). The supervisor keeps no copy of the order.
// - Under the swap-aware order (CONTRACT 9) the answer times that decide whether a chat may
//   overtake a waiting switch come with each release (`heldMs`, kept per profile in
//   `chatAnswers`). The queue's 600 s wait limit stays absolute for every job (3.7).
// - Which job runs next is `plan()` (schedule.ts); whether a worker start fits is `decideStart()`
//   (fit.ts) on facts an adapter gathered. Both are pure; this machine carries their steps out.
// - (3.2) "additional foreign GPU process during operation → unloaded: only the service's own
//   worker is ended". Foreign processes are never signalled.
// - (3.1, 7) endpoint stop: waiting requests are discarded, then every worker is unloaded.
//
// The listener (spec 3.1), the queue (3.7) and the five worker machines are children with their
// systemIds; the workers are commanded with `worker.unload` (sendTo) and report back with
// `worker.*` events, each worker machine for itself: `worker.unloaded` only once its process is
// gone, `worker.lost` when it outlived SIGKILL (its memory stays reserved until the GPU probe no
// longer shows it).
import { assertEvent, assign, enqueueActions, setup } from 'xstate';
import { SYSTEM_IDS, WORKER_IDS } from '../ids.js';
import { QUEUE_LIMITS } from '../queue/index.js';
import type { QueueEvent, QueuedJob } from '../queue/index.js';
import { decideStart, type CheckInput, type StartFacts } from './fit.js';
import { admit, admitImageStep, enhancerOnCpu, exclusiveImageMode, imageStepDue, plan, preloadsOn, releaseLeavesNothingToPlan, runningOn, runsAtOnce, unloadableFor } from './schedule.js';
import { supervisorActors } from './supervisor.actors.js';
import type {
  DenialCode,
  JobRecord,
  JobSpec,
  StartPlan,
  RevocationCode,
  SupervisorContext,
  SupervisorEmitted,
  SupervisorEvent,
  SupervisorInput,
  UnloadCode,
  WorkerKind,
  WorkerRecord,
} from './supervisor.types.js';
import { ANSWER_WINDOW, DEFAULT_SCHEDULING, SWITCH_MAX_WAIT_CAP_MS, WORKER_KINDS } from './supervisor.types.js';

/** The supervisor's command to a worker machine. */
type WorkerCommand = { type: 'worker.unload'; generation: number; reason: string };

/** The part of `enqueue` the helpers below use. */
interface Enqueue {
  emit(event: SupervisorEmitted): void;
  sendTo(to: string, event: QueueEvent | WorkerCommand): void;
  raise(event: SupervisorEvent): void;
  assign(update: Partial<SupervisorContext>): void;
  cancel(id: string): void;
}

/** The id of a waiting chat job's swap-bound timer: cancelled as soon as the job stops waiting. */
const boundTimer = (jobId: string) => `switch-bound-${jobId}`;

export function emptyWorker(kind: WorkerKind, last: string | null = null): WorkerRecord {
  return { kind, state: 'unloaded', generation: 0, profileId: null, revision: null, slots: 1, pid: null, plan: null, stale: null, last };
}

const DENIALS: Record<Exclude<DenialCode, 'resources_busy' | 'insufficient_memory' | 'image_busy' | 'start_check_failed' | 'enhancer_failed'>, (c: SupervisorContext) => string> = {
  queue_full: (c) => `The queue is full: ${c.limits.maxWaiting} requests are waiting. Retry later.`,
  queue_timeout: (c) => `The request waited ${c.limits.maxWaitMs / 1000} seconds in the queue without getting its turn.`,
  profile_changed: () => 'The profile changed or was unpublished while the request waited; send it again.',
  endpoint_stopped: () => 'The endpoint is stopping or stopped: waiting requests are discarded and no new ones are accepted.',
};

const OK = { ok: true } as const;

const toQueue = (enqueue: Enqueue, event: QueueEvent) => enqueue.sendTo(SYSTEM_IDS.queue, event);

/**
 * The job under check after `jobId` left: a job that leaves while its start is checked abandons
 * the check (its facts would belong to no one), even when another job is put under check in the
 * same step.
 */
function checkAfterLeaving(enqueue: Enqueue, context: SupervisorContext, jobId: string): string | null {
  if (context.checking !== jobId) return context.checking;
  enqueue.raise({ type: 'check.abandoned' });
  return null;
}

/** Removes a job that has not run and tells its route why. */
function deny(enqueue: Enqueue, jobs: Record<string, JobRecord>, jobId: string, code: DenialCode, message: string, retryAfterSeconds?: number) {
  if (jobs[jobId]?.switchBound) enqueue.cancel(boundTimer(jobId));
  delete jobs[jobId];
  const denied: SupervisorEmitted = { type: 'gpu.denied', jobId, code, message };
  enqueue.emit(retryAfterSeconds === undefined ? denied : { ...denied, retryAfterSeconds });
}

/**
 * Why a new job is refused before it waits: the endpoint is stopping, or its profile snapshot was
 * taken before a save that already reached us (it may not reload an old revision); null: accepted.
 */
function refusal(context: SupervisorContext, job: JobSpec): 'endpoint_stopped' | 'profile_changed' | null {
  if (!context.accepting) return 'endpoint_stopped';
  const latest = context.revisions[job.profileId];
  return latest === null || (latest !== undefined && job.revision < latest) ? 'profile_changed' : null;
}

/** A job runs on a worker loaded (or loading) with its profile: no start, the worker's GPUs. */
function grantOn(enqueue: Enqueue, jobs: Record<string, JobRecord>, workers: Record<WorkerKind, WorkerRecord>, job: JobRecord, worker: WorkerKind) {
  if (job.switchBound) enqueue.cancel(boundTimer(job.spec.id));
  const gpus = workers[worker].plan?.gpus ?? [];
  jobs[job.spec.id] = { ...job, phase: 'running', worker, gpus };
  enqueue.emit({ type: 'gpu.granted', jobId: job.spec.id, worker, generation: workers[worker].generation, start: null, gpus });
}

/** The chat answers measured per profile, with one more answer of `spec`'s profile (a new revision starts a new window). */
function withAnswer(answers: SupervisorContext['chatAnswers'], spec: JobSpec, heldMs: number): SupervisorContext['chatAnswers'] {
  const kept = answers[spec.profileId];
  const ms = kept?.revision === spec.revision ? [...kept.ms, heldMs].slice(-ANSWER_WINDOW) : [heldMs];
  return { ...answers, [spec.profileId]: { revision: spec.revision, ms } };
}

/** Takes running jobs' reservations back: their routes end them with `code`. */
function revoke(enqueue: Enqueue, jobs: Record<string, JobRecord>, select: (job: JobRecord) => boolean, code: RevocationCode, message: string) {
  for (const [jobId, job] of Object.entries(jobs)) {
    if (job.phase !== 'running' || !select(job)) continue;
    delete jobs[jobId];
    enqueue.emit({ type: 'gpu.revoked', jobId, code, message });
  }
}

/** A warm preload waiting for a worker that is unloaded for someone else gives way: it is revoked. */
function revokePreloads(enqueue: Enqueue, jobs: Record<string, JobRecord>, kind: WorkerKind, reason: string) {
  const ids = new Set(preloadsOn(jobs, kind));
  if (ids.size > 0) revoke(enqueue, jobs, (job) => ids.has(job.spec.id), 'resources_busy', `the preload gave way: ${reason}`);
}

/** The record of a worker start the supervisor just granted. */
function loadingWorker(kind: WorkerKind, generation: number, spec: JobSpec, plan: StartPlan): WorkerRecord {
  const slots = kind === 'enhancer' ? 1 : spec.slots;
  return { kind, state: 'loading', generation, profileId: spec.profileId, revision: spec.revision, slots, pid: null, plan, stale: null, last: null };
}

function unload(enqueue: Enqueue, workers: Record<WorkerKind, WorkerRecord>, kind: WorkerKind, code: UnloadCode, reason: string) {
  const worker = workers[kind];
  if (worker.state === 'unloaded' || worker.state === 'unloading' || worker.state === 'lost') return;
  workers[kind] = { ...worker, state: 'unloading', last: reason };
  // The worker machine carries it out and reports its own `worker.unloaded` (or `worker.lost`).
  enqueue.sendTo(WORKER_IDS[kind], { type: 'worker.unload', generation: worker.generation, reason });
  enqueue.emit({ type: 'worker.unload', kind, generation: worker.generation, code, reason });
}

/** What the start check of the job under check needs to know. */
export function checkInput(context: SupervisorContext): CheckInput | undefined {
  const job = context.checking === null ? undefined : context.jobs[context.checking];
  if (!job) return undefined;
  // An enhancer on the CPU is checked alone and unloads nothing of ours; its image step is checked
  // once the GPUs are free.
  const step = imageStepDue(job) ? 'image' : enhancerOnCpu(job.spec) ? 'enhancer' : undefined;
  if (step) return { job: job.spec, workers: context.workers, idle: [], step };
  return { job: job.spec, workers: context.workers, idle: unloadableFor(context, job.spec) };
}

/**
 * The memory check of a running image job's image step (its enhancer on the CPU has answered):
 * the image worker starts on every GPU, or the job's reservation is taken back with the refusal.
 */
function imageStepVerdict(enqueue: Enqueue, context: SupervisorContext, workers: Record<WorkerKind, WorkerRecord>, jobId: string, facts: StartFacts, input: CheckInput) {
  const jobs = { ...context.jobs };
  const job = jobs[jobId]!;
  // Chat or TTS may have started while the facts were gathered: the step waits again.
  if (admitImageStep({ ...context, workers }).type !== 'start') {
    enqueue.assign({ workers });
    return;
  }
  const verdict = decideStart(facts, input);
  if (verdict.verdict === 'refuse') {
    revoke(enqueue, jobs, (j) => j.spec.id === jobId, verdict.code === 'enhancer_failed' ? 'start_check_failed' : verdict.code, verdict.message);
    enqueue.assign({ jobs, workers });
    return;
  }
  if (verdict.verdict === 'unload-first') {
    for (const kind of verdict.kinds) unload(enqueue, workers, kind, 'make_room', verdict.message);
    enqueue.assign({ workers });
    return;
  }
  const generation = context.starts + 1;
  const gpus = facts.gpus.map((g) => g.uuid);
  workers.image = loadingWorker('image', generation, job.spec, verdict.plan);
  jobs[jobId] = { ...job, gpus, steps: { enhancer: job.steps!.enhancer, image: null } };
  enqueue.emit({ type: 'gpu.granted', jobId, worker: 'image', generation, start: verdict.plan, gpus, step: 'image' });
  enqueue.assign({ jobs, workers, starts: generation });
}

/**
 * Lost workers whose process the GPU probe no longer shows on any GPU of their plan: their memory
 * is free again, and their kind may start anew. A lost worker without GPUs waits for its exit.
 */
function releaseLost(workers: Record<WorkerKind, WorkerRecord>, gpus: SupervisorContext['gpus']): boolean {
  let changed = false;
  for (const kind of WORKER_KINDS) {
    const w = workers[kind];
    const on = w.plan?.gpus ?? [];
    if (w.state !== 'lost' || on.length === 0) continue;
    const seen = gpus.some((g) => on.includes(g.uuid) && g.processes.some((p) => p.pid === w.pid));
    if (seen) continue;
    workers[kind] = emptyWorker(kind, `its lost process (pid ${w.pid}) is gone from its GPUs: its memory is free`);
    changed = true;
  }
  return changed;
}

/** Foreign compute processes on the GPUs the chat worker uses. */
function foreignOnChatGpus(context: SupervisorContext): { uuid: string; pids: number[] } | undefined {
  const chat = context.workers.chat;
  if (chat.state !== 'loaded' && chat.state !== 'loading') return undefined;
  const own = new Set(Object.values(context.workers).flatMap((w) => (w.pid === null ? [] : [w.pid])));
  for (const uuid of chat.plan?.gpus ?? []) {
    const pids = context.gpus.find((g) => g.uuid === uuid)?.processes.filter((p) => !own.has(p.pid)).map((p) => p.pid) ?? [];
    if (pids.length > 0) return { uuid, pids };
  }
  return undefined;
}

/** Whether the GPU watcher runs: the chat worker holds a GPU, or a lost worker does. */
function gpuWatchNeeded(context: SupervisorContext): boolean {
  const chat = context.workers.chat;
  if ((chat.state === 'loading' || chat.state === 'loaded') && (chat.plan?.gpus.length ?? 0) > 0) return true;
  return WORKER_KINDS.some((k) => context.workers[k].state === 'lost' && (context.workers[k].plan?.gpus.length ?? 0) > 0);
}

export const supervisorMachine = setup({
  types: {
    context: {} as SupervisorContext,
    events: {} as SupervisorEvent,
    input: {} as SupervisorInput,
    emitted: {} as SupervisorEmitted,
  },
  actors: supervisorActors,
  delays: {
    closingLimit: 60_000,
  },
  guards: {
    /** Every worker is gone, or lost (nothing more can be done for a process that outlives SIGKILL). */
    allUnloaded: ({ context }) => WORKER_KINDS.every((k) => context.workers[k].state === 'unloaded' || context.workers[k].state === 'lost'),
    checkPending: ({ context }) => context.checking !== null,
    /** Nobody waits (FIFO: it overtakes no one) and its worker is loaded with its profile with a slot free. */
    nobodyWaitsAndSlotFree: ({ context, event }) => {
      assertEvent(event, 'gpu.reserve');
      return (
        context.jobs[event.job.id] === undefined &&
        context.unloadWaiters.length === 0 &&
        refusal(context, event.job) === null &&
        runsAtOnce(context, event.job)
      );
    },
    /** Nobody waits for the released slot (FIFO has nobody to serve) and no worker falls due for an idle unload. */
    nobodyWaitsAndNothingToUnload: ({ context, event }) => {
      assertEvent(event, 'gpu.release');
      return releaseLeavesNothingToPlan(context, event.jobId);
    },
    /** Neither: nothing on the GPUs to watch. */
    nothingToWatch: ({ context }) => !gpuWatchNeeded(context),
    /** A chat worker holds a GPU (foreign processes there are noticed), or a lost worker does (its end is noticed). */
    gpuWatchNeeded: ({ context }) => gpuWatchNeeded(context),
    /** An image job runs, or its image or enhancer process is not yet gone. */
    exclusiveImageMode: ({ context }) => exclusiveImageMode(context),
    llmModeAgain: ({ context }) => !exclusiveImageMode(context),
    /** The stalled job still runs on that start of its worker, and another job (not a preload) waits for that worker or runs on it. */
    stallHoldsOthers: ({ context, event }) => {
      assertEvent(event, 'worker.stalled');
      const worker = context.workers[event.kind];
      const job = context.jobs[event.jobId];
      if (worker.generation !== event.generation || worker.state !== 'loaded' || job?.phase !== 'running' || job.worker !== event.kind) return false;
      return Object.values(context.jobs).some(
        (other) => other.spec.id !== event.jobId && other.spec.source !== 'preload' && (other.phase === 'running' ? other.worker === event.kind : other.spec.kind === event.kind),
      );
    },
  },
  actions: {
    submit: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'gpu.reserve');
      if (context.jobs[event.job.id]) return;
      const { job } = event;
      const code = refusal(context, job);
      if (code !== null) {
        enqueue.emit({ type: 'gpu.denied', jobId: job.id, code, message: DENIALS[code](context) });
        return;
      }
      enqueue.assign({ jobs: { ...context.jobs, [job.id]: { spec: job, phase: 'submitted', worker: null, gpus: [] } } });
      const queued: QueuedJob = { id: job.id, kind: job.kind, source: job.source, profileId: job.profileId, revision: job.revision, at: job.at };
      toQueue(enqueue, { type: 'job.enqueue', job: queued });
    }),
    /** Nobody waits and its worker has a slot free: the job runs now, without the queue's round trip or wait timer. */
    grantAtOnce: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'gpu.reserve');
      const jobs = { ...context.jobs };
      grantOn(enqueue, jobs, context.workers, { spec: event.job, phase: 'submitted', worker: null, gpus: [] }, event.job.kind);
      enqueue.assign({ jobs });
    }),
    fromQueue: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, ['job.queued', 'job.rejected', 'job.removed']);
      const job = context.jobs[event.jobId];
      // Reports about jobs that already ran, or already left, change nothing: every job ends once.
      if (!job || job.phase === 'running') return;
      if (event.type === 'job.queued') {
        if (job.phase !== 'submitted') return;
        // Swap-aware order: a chat may be overtaken by chats for another loaded profile until its
        // bound: the longer of the setting and its own profile's last measured load (what the
        // switch will cost), never above the cap, so that a slow load elsewhere or a large setting
        // cannot hold it back until the queue's wait runs out.
        let switchBound: JobRecord['switchBound'];
        if (context.scheduling.order === 'swap-aware' && job.spec.kind === 'chat' && job.spec.source !== 'preload') {
          const measured = context.chatLoads[job.spec.profileId];
          const loadMs = measured?.revision === job.spec.revision ? measured.ms : 0;
          const ms = Math.min(SWITCH_MAX_WAIT_CAP_MS, Math.max(context.scheduling.switchMaxWaitMs, loadMs));
          switchBound = { ms, reached: false };
          enqueue.raise({ type: 'switch.bound', jobId: event.jobId }, { delay: ms, id: boundTimer(event.jobId) });
        }
        enqueue.assign({ jobs: { ...context.jobs, [event.jobId]: { ...job, phase: 'waiting', ticket: event.ticket, ...(switchBound ? { switchBound } : {}) } } });
        enqueue.emit({ type: 'job.queued', jobId: event.jobId, position: event.position });
        return;
      }
      const jobs = { ...context.jobs };
      if (event.type === 'job.rejected') deny(enqueue, jobs, event.jobId, event.code, DENIALS[event.code](context), event.retryAfterSeconds);
      else {
        if (job.switchBound) enqueue.cancel(boundTimer(event.jobId));
        delete jobs[event.jobId];
      }
      enqueue.assign({ jobs, checking: checkAfterLeaving(enqueue, context, event.jobId) });
    }),
    release: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, ['gpu.release', 'job.cancel']);
      const job = context.jobs[event.jobId];
      if (!job) return;
      const jobs = { ...context.jobs };
      delete jobs[event.jobId];
      if (job.phase !== 'running') toQueue(enqueue, { type: 'job.cancel', jobId: event.jobId });
      if (job.phase !== 'running' && job.switchBound) enqueue.cancel(boundTimer(event.jobId));
      const workers = { ...context.workers };
      const kind = job.worker;
      // A chat answer's time, grant to release, for the overtaking rule (the loaded profile's p95).
      if (job.phase === 'running' && job.spec.kind === 'chat' && event.heldMs !== undefined) {
        enqueue.assign({ chatAnswers: withAnswer(context.chatAnswers, job.spec, event.heldMs) });
      }
      // loading | cancel in the chat test | own start | unloaded: the start is aborted.
      if (event.type === 'job.cancel' && job.spec.source === 'test' && kind && workers[kind].state === 'loading' && runningOn(jobs, kind) === 0) {
        unload(enqueue, workers, kind, 'operator', `the ${kind} test was cancelled during its own worker start: the start is aborted`);
      }
      enqueue.assign({ workers, jobs, checking: checkAfterLeaving(enqueue, context, event.jobId) });
    }),
    workerReport: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, ['worker.started', 'worker.loaded', 'worker.unloaded', 'worker.lost', 'worker.exited']);
      const workers = { ...context.workers };
      const jobs = { ...context.jobs };
      const current = workers[event.kind];
      // A report about an earlier start (late, repeated, or about a process we replaced) changes nothing.
      if (event.generation !== current.generation || current.state === 'unloaded') return;
      switch (event.type) {
        case 'worker.started':
          // The pid of the process we asked for: from now on it is ours, never foreign.
          if (current.pid === null) workers[event.kind] = { ...current, pid: event.pid };
          break;
        case 'worker.loaded':
          if (current.state === 'loading') workers[event.kind] = { ...current, state: 'loaded' };
          if (event.kind === 'chat' && event.loadMs !== undefined && current.profileId !== null && current.revision !== null) {
            enqueue.assign({ chatLoads: { ...context.chatLoads, [current.profileId]: { revision: current.revision, ms: event.loadMs } } });
          }
          break;
        case 'worker.unloaded':
          // Only the unload we asked for ends a worker (or a lost one's process that ended at last).
          if (current.state === 'unloading' || current.state === 'lost') workers[event.kind] = emptyWorker(event.kind, current.last);
          break;
        case 'worker.lost':
          // The unload failed: the worker keeps its record, its plan and pid, so its memory stays
          // counted, until the probe shows its process gone from its GPUs or it ends.
          if (current.state === 'unloading') {
            const pid = event.pid ?? current.pid;
            workers[event.kind] = { ...current, state: 'lost', pid, last: `its process (pid ${pid}) did not end after SIGKILL: lost, its memory stays reserved until it is gone` };
          }
          break;
        case 'worker.exited':
          if (current.state === 'unloading' || current.state === 'lost') {
            workers[event.kind] = emptyWorker(event.kind, current.last);
            break;
          }
          workers[event.kind] = emptyWorker(event.kind, `${event.cause}: ${event.message}`);
          revoke(enqueue, jobs, (job) => job.worker === event.kind, event.cause === 'runtime_missing' ? 'runtime_missing' : 'worker_failed', event.message);
          break;
        default:
          return;
      }
      enqueue.assign({ workers, jobs });
    }),
    inventory: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'gpu.inventory');
      const workers = { ...context.workers };
      const released = releaseLost(workers, event.gpus);
      const foreign = foreignOnChatGpus({ ...context, workers, gpus: event.gpus });
      if (!foreign) {
        enqueue.assign(released ? { gpus: event.gpus, workers } : { gpus: event.gpus });
        return;
      }
      const jobs = { ...context.jobs };
      const reason = `a foreign process (pid ${foreign.pids.join(', ')}) appeared on GPU ${foreign.uuid}: only our own chat worker is ended`;
      revoke(enqueue, jobs, (job) => job.worker === 'chat', 'resources_busy', reason);
      unload(enqueue, workers, 'chat', 'foreign_process', reason);
      enqueue.assign({ gpus: event.gpus, workers, jobs });
    }),
    profileChanged: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'profile.changed');
      toQueue(enqueue, event);
      const workers = { ...context.workers };
      for (const kind of WORKER_KINDS) {
        const w = workers[kind];
        if (w.profileId === event.profileId && w.state !== 'unloaded' && (event.revision === null || w.revision !== event.revision)) {
          const reason = event.revision === null ? 'its profile was deleted' : `its profile has a new revision (${event.revision})`;
          workers[kind] = { ...w, stale: { code: 'profile_changed', reason } };
        }
      }
      enqueue.assign({ workers, revisions: { ...context.revisions, [event.profileId]: event.revision } });
    }),
    buildChanged: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'worker.buildChanged');
      const w = context.workers[event.kind];
      if (w.generation !== event.generation || w.state === 'unloaded' || w.state === 'unloading' || w.state === 'lost') return;
      enqueue.assign({ workers: { ...context.workers, [event.kind]: { ...w, stale: { code: 'new_build', reason: event.reason } } } });
    }),
    audioMode: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'audio.mode');
      enqueue.assign({ audio: { ...context.audio, [event.kind]: event.mode } });
    }),
    /** The inference listener is bound again: a stop that never saw every unload confirmed no longer blocks new jobs. */
    opened: assign({ accepting: true, unloadWaiters: [] }),
    discard: enqueueActions(({ event, enqueue }) => {
      assertEvent(event, 'endpoint.discard');
      enqueue.assign({ accepting: false });
      toQueue(enqueue, { type: 'queue.discardAll' });
      enqueue.emit({ type: 'supervisor.reply', requestId: event.requestId, outcome: OK });
    }),
    unloadRequest: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'worker.unloadRequest');
      // The enhancer lives inside an image job: a running image job is its active request.
      const active = runningOn(context.jobs, event.kind === 'enhancer' ? 'image' : event.kind);
      if (active > 0) {
        const message = `the ${event.kind} worker has ${active} active request(s): the unload is rejected`;
        enqueue.emit({ type: 'supervisor.reply', requestId: event.requestId, outcome: { ok: false, code: 'active_requests', message } });
        return;
      }
      const workers = { ...context.workers };
      const jobs = { ...context.jobs };
      revokePreloads(enqueue, jobs, event.kind, 'explicit unload');
      unload(enqueue, workers, event.kind, 'operator', 'explicit unload by the operator (the chat test or the console)');
      enqueue.assign({ workers, jobs });
      enqueue.emit({ type: 'supervisor.reply', requestId: event.requestId, outcome: OK });
    }),
    /**
     * A worker held by one answer while others wait: it is restarted. Every job on it fails with the
     * report's message (a held loop holds them all, and which answer held it cannot be told apart).
     */
    restartStalled: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'worker.stalled');
      const workers = { ...context.workers };
      const jobs = { ...context.jobs };
      revoke(enqueue, jobs, (job) => job.worker === event.kind, 'worker_failed', event.message);
      unload(enqueue, workers, event.kind, 'stalled', `an answer held the ${event.kind} worker (no token, no answer to a status probe) while others waited: it was restarted`);
      enqueue.assign({ workers, jobs });
    }),
    /** The enhancer of an image job answered: it ends now, and the job's image start is due (4.7). */
    enhancerDone: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'enhancer.done');
      const job = context.jobs[event.jobId];
      if (!job?.steps || job.phase !== 'running') return;
      const workers = { ...context.workers };
      if (workers.enhancer.generation === job.steps.enhancer) unload(enqueue, workers, 'enhancer', 'enhancer_done', 'the enhancer answered: it ends before the image worker starts');
      const image = job.steps.image;
      let next: 'due' | null = null;
      if (image === 'later') {
        // An enhancer on the CPU: now the image step waits for every GPU, in the job's place.
        next = 'due';
      } else if (image && image !== 'due') {
        // An enhancer on the GPUs: the job holds them; its image start was planned with its grant.
        workers.image = loadingWorker('image', image.generation, job.spec, image.plan);
        enqueue.emit({ type: 'gpu.granted', jobId: event.jobId, worker: 'image', generation: image.generation, start: image.plan, gpus: job.gpus, step: 'image' });
      }
      enqueue.assign({ workers, jobs: { ...context.jobs, [event.jobId]: { ...job, steps: { ...job.steps, image: next } } } });
    }),
    /** A waiting switch has waited its bound: from now on nothing overtakes it. */
    switchBound: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'switch.bound');
      const job = context.jobs[event.jobId];
      if (!job?.switchBound || job.phase === 'running') return;
      enqueue.assign({ jobs: { ...context.jobs, [event.jobId]: { ...job, switchBound: { ...job.switchBound, reached: true } } } });
    }),
    unloadAll: enqueueActions(({ context, event, enqueue }) => {
      assertEvent(event, 'workers.unloadAll');
      const workers = { ...context.workers };
      const jobs = { ...context.jobs };
      revoke(enqueue, jobs, () => true, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
      for (const kind of WORKER_KINDS) unload(enqueue, workers, kind, 'endpoint_stop', 'endpoint stop');
      enqueue.assign({ workers, jobs, accepting: false, unloadWaiters: [...context.unloadWaiters, event.requestId] });
    }),
    /** The listener is off for good: refuse what waits, revoke what runs, unload every worker. */
    closeDown: enqueueActions(({ context, enqueue }) => {
      const jobs = { ...context.jobs };
      const workers = { ...context.workers };
      for (const [jobId, job] of Object.entries(context.jobs)) {
        if (job.phase !== 'running') deny(enqueue, jobs, jobId, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
      }
      revoke(enqueue, jobs, () => true, 'endpoint_stopped', DENIALS.endpoint_stopped(context));
      for (const kind of WORKER_KINDS) unload(enqueue, workers, kind, 'shutdown', 'the service is ending');
      enqueue.assign({ jobs, workers, checking: null, accepting: false });
    }),
    replyUnloadWaiters: enqueueActions(({ context, enqueue }) => {
      const done = (k: WorkerKind) => context.workers[k].state === 'unloaded' || context.workers[k].state === 'lost';
      if (context.unloadWaiters.length === 0 || !WORKER_KINDS.every(done)) return;
      for (const requestId of context.unloadWaiters) enqueue.emit({ type: 'supervisor.reply', requestId, outcome: OK });
      enqueue.assign({ unloadWaiters: [], accepting: true });
    }),
    /** Carries out `plan()`: grants, start checks, unloads and the GUI test's conflicts. */
    schedule: enqueueActions(({ context, enqueue }) => {
      if (context.unloadWaiters.length > 0) return;
      const steps = plan(context);
      if (steps.length === 0) return;
      const jobs = { ...context.jobs };
      const workers = { ...context.workers };
      let checking = context.checking;
      for (const step of steps) {
        if (step.do === 'unload') {
          revokePreloads(enqueue, jobs, step.kind, step.reason);
          unload(enqueue, workers, step.kind, step.code, step.reason);
          continue;
        }
        const job = jobs[step.jobId];
        if (!job) continue;
        if (step.do === 'check') {
          checking = step.jobId;
          // An image step keeps its job running: its reservation is held while it is checked.
          if (!imageStepDue(job)) jobs[step.jobId] = { ...job, phase: 'checking' };
        } else if (step.do === 'grant') {
          toQueue(enqueue, { type: 'job.dispatch', jobId: step.jobId });
          grantOn(enqueue, jobs, workers, job, step.worker);
        } else {
          toQueue(enqueue, { type: 'job.cancel', jobId: step.jobId });
          deny(enqueue, jobs, step.jobId, step.code, step.message);
        }
      }
      enqueue.assign({ jobs, workers, checking });
    }),
    /** The memory check's facts are in: start the worker, refuse the job, or unload idle workers first. */
    applyVerdict: enqueueActions(({ context, enqueue }, params: { facts: StartFacts }) => {
      const input = checkInput(context);
      const jobId = context.checking;
      const workers = { ...context.workers };
      const released = releaseLost(workers, params.facts.gpus);
      enqueue.assign(released ? { checking: null, gpus: params.facts.gpus, workers } : { checking: null, gpus: params.facts.gpus });
      if (!input || jobId === null) return;
      const jobs = { ...context.jobs };
      const job = jobs[jobId]!;
      if (input.step === 'image') {
        imageStepVerdict(enqueue, context, workers, jobId, params.facts, input);
        return;
      }
      // The world may have moved while the facts were gathered: only a start that is still due goes ahead.
      if (admit(context, job.spec).type !== 'start') {
        jobs[jobId] = { ...job, phase: 'waiting' };
        enqueue.assign({ jobs });
        return;
      }
      const verdict = decideStart(params.facts, input);
      if (verdict.verdict === 'refuse') {
        toQueue(enqueue, { type: 'job.cancel', jobId });
        deny(enqueue, jobs, jobId, verdict.code, verdict.message);
        enqueue.assign({ jobs });
        return;
      }
      if (verdict.verdict === 'unload-first') {
        for (const kind of verdict.kinds) {
          revokePreloads(enqueue, jobs, kind, verdict.message);
          unload(enqueue, workers, kind, 'make_room', verdict.message);
        }
        jobs[jobId] = { ...job, phase: 'waiting' };
        enqueue.assign({ jobs, workers });
        return;
      }
      const { spec } = job;
      if (input.step === 'enhancer') {
        // An enhancer on the CPU: the job runs its enhancer step and holds no GPU; chat and TTS stay.
        const generation = context.starts + 1;
        workers.enhancer = loadingWorker('enhancer', generation, spec, verdict.plan);
        jobs[jobId] = { ...job, phase: 'running', worker: 'image', gpus: [], steps: { enhancer: generation, image: spec.enhancer?.image ? 'later' : null } };
        toQueue(enqueue, { type: 'job.dispatch', jobId });
        enqueue.emit({ type: 'gpu.granted', jobId, worker: 'image', generation, start: null, gpus: [], enhancer: { generation, plan: verdict.plan } });
        enqueue.assign({ jobs, workers, starts: generation });
        return;
      }
      const gpus = spec.kind === 'image' ? params.facts.gpus.map((g) => g.uuid) : verdict.plan.gpus;
      const enhancer = spec.kind === 'image' && spec.enhancer ? verdict.plan.enhancer : undefined;
      // image | enhancer on: the enhancer starts first, under the same reservation; the image
      // start's generation is taken now and given to the image worker once the enhancer answered.
      const first = context.starts + 1;
      const generation = enhancer ? first + 1 : first;
      if (enhancer) {
        workers.enhancer = loadingWorker('enhancer', first, spec, enhancer);
        const image = spec.enhancer?.image ? { generation, plan: verdict.plan } : null;
        jobs[jobId] = { ...job, phase: 'running', worker: spec.kind, gpus, steps: { enhancer: first, image } };
      } else {
        workers[spec.kind] = loadingWorker(spec.kind, generation, spec, verdict.plan);
        jobs[jobId] = { ...job, phase: 'running', worker: spec.kind, gpus };
        if (job.switchBound) enqueue.cancel(boundTimer(jobId));
      }
      toQueue(enqueue, { type: 'job.dispatch', jobId });
      const granted = { type: 'gpu.granted', jobId, worker: spec.kind, generation, start: verdict.plan, gpus } as const;
      enqueue.emit(enhancer ? { ...granted, enhancer: { generation: first, plan: enhancer } } : granted);
      enqueue.assign({ jobs, workers, starts: generation });
    }),
    checkFailed: enqueueActions(({ context, event, enqueue }) => {
      const jobId = context.checking;
      enqueue.assign({ checking: null });
      if (jobId === null || !context.jobs[jobId]) return;
      const jobs = { ...context.jobs };
      const reason = (event as { error?: unknown }).error;
      toQueue(enqueue, { type: 'job.cancel', jobId });
      deny(enqueue, jobs, jobId, 'start_check_failed', `the memory check before the worker start failed: ${reason instanceof Error ? reason.message : String(reason)}`);
      enqueue.assign({ jobs });
    }),
  },
}).createMachine({
  id: 'supervisor',
  context: ({ input }) => ({
    jobs: {},
    workers: { chat: emptyWorker('chat'), image: emptyWorker('image'), tts: emptyWorker('tts'), stt: emptyWorker('stt'), enhancer: emptyWorker('enhancer') },
    workerLimits: input.workers ?? {},
    checking: null,
    starts: 0,
    revisions: {},
    gpus: [],
    audio: { tts: 'auto', stt: 'auto' },
    accepting: true,
    unloadWaiters: [],
    listenerInput: input.listener,
    scheduling: { ...DEFAULT_SCHEDULING, ...input.scheduling },
    chatLoads: {},
    chatAnswers: {},
    limits: {
      maxWaiting: input.queue?.maxWaiting ?? QUEUE_LIMITS.maxWaiting,
      maxWaitMs: input.queue?.maxWaitMs ?? QUEUE_LIMITS.maxWaitMs,
      retryAfterSeconds: input.queue?.retryAfterSeconds ?? QUEUE_LIMITS.retryAfterSeconds,
    },
  }),
  // The worker machines live as long as the supervisor: the closing state waits for their unloads.
  invoke: WORKER_KINDS.map((kind) => ({
    id: WORKER_IDS[kind],
    systemId: WORKER_IDS[kind],
    src: WORKER_IDS[kind],
    input: ({ context }: { context: SupervisorContext }) => ({ ...context.workerLimits[kind], reportToParent: true }),
  })),
  initial: 'active',
  states: {
    active: {
      type: 'parallel',
      invoke: [
        {
          id: SYSTEM_IDS.listener,
          systemId: SYSTEM_IDS.listener,
          src: 'listener',
          input: ({ context }) => context.listenerInput,
          onDone: {
            target: 'closing',
            actions: ['closeDown'],
            description: 'the service ends once the listener is off: nothing waits any more, and every worker is unloaded (also those an admin test loaded while the endpoint was stopped)',
          },
        },
        {
          id: SYSTEM_IDS.queue,
          systemId: SYSTEM_IDS.queue,
          src: 'queue',
          input: ({ context }) => ({ ...context.limits, reportToParent: true }),
        },
      ],
      on: {
        'gpu.reserve': [
          {
            guard: 'nobodyWaitsAndSlotFree',
            actions: ['grantAtOnce'],
            description:
              'FIFO queue: nobody waits, and "the same profile may answer in parallel up to its configured slot count" has a slot free: the job runs at once, without entering the queue',
          },
          {
            actions: ['submit'],
            description: 'a job asks for its reservation: it waits in the FIFO queue (at most 16, at most 600 s)',
          },
        ],
        'job.queued': { actions: ['fromQueue', 'schedule'], description: 'the queue took the job: plan who runs next' },
        'job.rejected': {
          actions: ['fromQueue', 'schedule'],
          description: 'queue full, waited 600 s, its profile changed, or the endpoint stopped: the job is refused',
        },
        'job.removed': { actions: ['fromQueue', 'schedule'], description: 'a client that disconnected left the queue' },
        'gpu.release': [
          {
            guard: 'nobodyWaitsAndNothingToUnload',
            actions: ['release'],
            description:
              'the job ended (a stream after its last byte), and nobody waits for "its reservation goes to the next job": its chat slot is free, its worker stays loaded, and no plan is made',
          },
          {
            actions: ['release', 'schedule'],
            description: 'the job ended (a stream after its last byte): its reservation goes to the next job',
          },
        ],
        'job.cancel': {
          actions: ['release', 'schedule'],
          description: 'the client disconnected: it leaves the queue at once, or frees its running reservation',
        },
        'worker.started': { actions: ['workerReport'], description: 'the worker process exists: its pid is ours, not foreign' },
        'worker.loaded': { actions: ['workerReport', 'schedule'], description: 'the worker is ready' },
        'worker.unloaded': {
          actions: ['workerReport', 'replyUnloadWaiters', 'schedule'],
          description: 'the worker is gone: its GPUs and RAM are free for the next start',
        },
        'worker.lost': {
          actions: ['workerReport', 'replyUnloadWaiters', 'schedule'],
          description: 'an unload failed (the process outlived SIGKILL): the worker is lost, its memory stays reserved until it is gone',
        },
        'worker.exited': {
          actions: ['workerReport', 'replyUnloadWaiters', 'schedule'],
          description: 'the worker died: its running jobs fail with worker_failed and the next request reloads',
        },
        'gpu.inventory': {
          actions: ['inventory', 'schedule'],
          description: 'loaded | additional foreign GPU process during operation | unloaded: only the own chat worker is ended',
        },
        'profile.changed': {
          actions: ['profileChanged', 'schedule'],
          description: 'waiting requests of a changed or deactivated profile are rejected; a new revision unloads and restarts the worker',
        },
        'worker.buildChanged': {
          actions: ['buildChanged', 'schedule'],
          description: 'loaded | a new build | unloaded (spec 3.5, 9): an idle worker goes now, a busy one after its jobs; new jobs wait for the new build',
        },
        'endpoint.discard': { actions: ['discard'], description: 'endpoint stop: waiting requests are discarded; no new requests accepted' },
        'endpoint.opened': { actions: ['opened', 'schedule'], description: 'the inference listener is bound: new reservations are accepted' },
        'worker.stalled': {
          guard: 'stallHoldsOthers',
          actions: ['restartStalled', 'schedule'],
          description:
            'loaded | a request has had no token past its limit, the worker answers no status probe, and others wait | unloaded, then started again for them: the answers on it fail with worker_failed (beyond the spec: its 120 s silence limit ends a request, but not the grammar that holds the worker)',
        },
        'worker.unloadRequest': {
          actions: ['unloadRequest', 'schedule'],
          description: 'loaded | explicit unload in the chat test | no active requests | unloaded; with active requests the unload is rejected',
        },
        'audio.mode': {
          actions: ['audioMode', 'schedule'],
          description: 'audio memory policy (3.6): auto keeps a speech worker loaded after its job, per_request unloads it after each request',
        },
        'enhancer.done': {
          actions: ['enhancerDone', 'schedule'],
          description:
            'image | enhancer answered | the job holds every GPU | enhancer unloaded, image worker started: the enhancer ends before the image worker starts, and nothing else slips in between; an enhancer on the CPU held no GPU: the image step now waits for every GPU in its job\'s place',
        },
        'switch.bound': {
          actions: ['switchBound', 'schedule'],
          description:
            'a request for a different profile | its bound passed (swap-aware order) | | chats for the loaded profile no longer overtake it: it goes first once the running answers end ("cannot be overtaken indefinitely by new chats")',
        },
        'workers.unloadAll': {
          actions: ['unloadAll', 'replyUnloadWaiters'],
          description: 'endpoint stop: then workers are unloaded; own workers receive SIGTERM; TTS and STT workers too',
        },
      },
      states: {
        checks: {
          initial: 'idle',
          states: {
            idle: {
              always: { guard: 'checkPending', target: 'checking', description: 'memory check before every worker start, one at a time' },
            },
            checking: {
              on: {
                'check.abandoned': {
                  target: 'idle',
                  description: 'the job left while its check ran: the check is abandoned (its facts would belong to another job)',
                },
              },
              invoke: {
                src: 'gatherStartFacts',
                input: ({ context }) => checkInput(context)!,
                onDone: {
                  target: 'idle',
                  actions: [{ type: 'applyVerdict', params: ({ event }) => ({ facts: event.output }) }, 'schedule'],
                  description: 'resources free and memory check passes: the worker starts with the stored parameters',
                },
                onError: { target: 'idle', actions: ['checkFailed', 'schedule'], description: 'the facts could not be gathered: the job is refused' },
              },
            },
          },
        },
        gpuMode: {
          initial: 'llm',
          description: 'the GPU mode the spec names (3.3, 3.4, 3.6): what the GPUs serve now',
          states: {
            llm: {
              description:
                'LLM GPU mode: "a loaded chat profile may coexist with a loaded TTS worker while the 7 GiB condition holds"; an idle one of the two gives way to the other\'s start when it does not fit beside it (incompatible GPU profile change); TTS preloads only here',
              always: {
                guard: 'exclusiveImageMode',
                target: 'exclusiveImage',
                description: 'an image job holds every GPU: "the chat model is unloaded before generation", and "the speech model is unloaded before image generation"',
              },
            },
            exclusiveImage: {
              description: 'exclusive image mode: an image job (its enhancer, then its image) holds every GPU; chat and TTS starts wait until its processes are gone',
              always: { guard: 'llmModeAgain', target: 'llm', description: 'the image job ended and its image process is terminated completely' },
            },
          },
        },
        gpuWatch: {
          initial: 'idle',
          states: {
            idle: { always: { guard: 'gpuWatchNeeded', target: 'watching' } },
            watching: {
              description: 'a chat worker holds a GPU: foreign processes that appear there are noticed; a lost worker holds one: its end is noticed',
              always: { guard: 'nothingToWatch', target: 'idle', description: 'nothing of ours holds a GPU any more: nothing to watch' },
              invoke: { src: 'watchGpus' },
            },
          },
        },
      },
    },
    closing: {
      description: 'the service is ending: it waits until every worker has reported its unload (at most closingLimit)',
      always: { guard: 'allUnloaded', target: 'off' },
      after: { closingLimit: { target: 'off', description: 'a worker that never reports its unload does not keep the service from ending' } },
      on: {
        'gpu.reserve': { actions: 'submit', description: 'no new reservations while the service ends' },
        'worker.started': { actions: 'workerReport' },
        'worker.unloaded': { actions: 'workerReport' },
        'worker.lost': { actions: 'workerReport' },
        'worker.exited': { actions: 'workerReport' },
      },
    },
    off: { type: 'final', description: 'the service has ended' },
  },
});
