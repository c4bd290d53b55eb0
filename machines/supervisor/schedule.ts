// Which waiting job runs next (spec 3.2-3.7, 8), as a pure function of the supervisor's context.
// The supervisor calls `plan()` after every event that can free or claim a resource and carries
// out the steps it returns; tests call it directly.
//
// The rules, each from the spec:
// - FIFO (3.7). A job may start before an earlier waiting job only when the two need nothing in
//   common, so no waiting job is ever overtaken on a resource it waits for. One exception, bounded
//   as spec 3.2 bounds it ("a waiting switch cannot be overtaken indefinitely by new chats"): under
//   the swap-aware order, while a chat for another profile waits for the chat worker to switch,
//   later chats for the loaded profile may still take its free slots, until the switch has waited
//   its bound (`switchBound`, set by the supervisor when the job is queued) or the loaded profile
//   has no request left in the queue; then the switch goes first and nothing overtakes it. Chats
//   of one profile keep their order among themselves; a chat behind a waiting image job or image
//   step never overtakes (`overtakerBehind`); images, TTS and STT keep the FIFO order. Under the
//   `strict` order (no `switchBound`), later chats queue behind a waiting switch.
//   A chat overtakes a switch only if its profile's answers, at their measured p95 (`chatAnswers`;
//   unmeasured: 600 s, the stream limit), end by the switch's wait limit less
//   SWITCH_DEADLINE_MARGIN_MS even when the chat starts at the very end of the bound
//   (`overtakeEndsInTime`, CONTRACT 9). The 600 s wait limit itself stays absolute for every job
//   (3.7): an overtaker that runs far past its profile's p95 can still make the switch expire.
// - "The same profile may answer in parallel up to its configured slot count" (3.2); a request for
//   a different profile or a new revision unloads the own worker first, once its answers ended
//   ("streaming keeps the model reservation until the output ends").
// - "An image job needs both GPUs free. The chat model is unloaded before generation" (3.3), and
//   "the speech model is unloaded before image generation" (3.2, 3.4).
// - A loaded chat profile and a loaded TTS worker coexist (3.4); whether the memory allows it is
//   the memory check's question (fit.ts), asked before every worker start, one start at a time.
//   Where it does not, an idle one of the two gives way to the other's start (the incompatible GPU
//   profile change of 3.2 and 3.4, `unloadableFor`); a busy one never does.
// - One STT job at a time (3.5, 4.6); one TTS job at a time on its one worker.
// - The GUI image test reports a conflict instead of waiting (3.3, 7).
// - The prompt enhancer (4.7) runs inside an image job's reservation, before its image, and is
//   unloaded once its job has its answer or ended. On the GPUs (`auto` or a GPU UUID) it holds
//   chat and TTS off like the image worker. On the CPU (CONTRACT 8: "chat and TTS are not unloaded
//   for it") the job takes its reservation in two steps: the enhancer first, beside a loaded chat
//   or TTS worker that goes on answering; then, once the enhancer answered, its image step waits
//   for every GPU in the job's own place in the FIFO order.
// - Audio memory policy (3.6): `auto` and `warm` keep a speech worker loaded after its job;
//   `per_request` unloads it after each request. A preload (the warm policy, a reload after a
//   save) waits behind every request that needs its worker, and a TTS preload also behind every
//   request that needs the GPU memory (a waiting chat or image job, `PRELOAD_YIELDS`); it holds up
//   none. So a TTS preload waits while an image job waits or runs ("TTS preloads only in the LLM
//   GPU mode"), and its memory check never unloads anything of ours.
import type { JobRecord, JobSpec, SupervisorContext, UnloadCode, WorkerKind, WorkerRecord } from './supervisor.types.js';
import { SWITCH_DEADLINE_MARGIN_MS, UNMEASURED_ANSWER_MS, WORKER_KINDS } from './supervisor.types.js';

export type Step =
  /** The job runs now on a worker that is loaded (or loading) with its profile. */
  | { do: 'grant'; jobId: string; worker: WorkerKind }
  /** The job needs its worker started: check memory first. */
  | { do: 'check'; jobId: string }
  /**
   * An idle worker of ours must go: a switch, an image job, a stale one (a new revision of its
   * profile, a new build of its program), a finished image, an enhancer whose job has its answer,
   * a speech worker under `per_request`.
   */
  | { do: 'unload'; kind: WorkerKind; code: UnloadCode; reason: string }
  /** The GUI image test found the reservation busy. */
  | { do: 'refuse'; jobId: string; code: 'image_busy'; message: string };

export type PlanView = Pick<SupervisorContext, 'jobs' | 'workers' | 'checking' | 'audio' | 'chatAnswers' | 'limits'>;

/** What the swap-aware exception reads: the workers, and what the overtaking rule measures against. */
type SwitchView = Pick<PlanView, 'workers' | 'chatAnswers' | 'limits'>;

/**
 * The jobs in the queue, in its FIFO order: those waiting or in their memory check, by the ticket
 * the queue gave each (the queue keeps the order; the supervisor keeps no copy of it).
 */
export function waitingOrder(jobs: Record<string, JobRecord>): string[] {
  return byTicket(jobs, (job) => job.phase !== 'running');
}

/** The jobs `include` picks, in the queue's order (their tickets). */
function byTicket(jobs: Record<string, JobRecord>, include: (job: JobRecord) => boolean): string[] {
  const queued: Array<[string, number]> = [];
  for (const id in jobs) {
    const job = jobs[id]!;
    if (include(job) && job.ticket !== undefined) queued.push([id, job.ticket]);
  }
  return queued.sort((a, b) => a[1] - b[1]).map(([id]) => id);
}

/** The resources a job claims, for the no-overtaking rule. */
const NEEDS: Record<JobSpec['kind'], readonly string[]> = {
  chat: ['llm'],
  image: ['llm', 'tts', 'image'],
  tts: ['tts'],
  stt: ['stt'],
};

/** An image job whose prompt enhancer runs on the CPU: its enhancer step holds no GPU. */
export const enhancerOnCpu = (spec: JobSpec): boolean => spec.kind === 'image' && spec.enhancer?.device === 'cpu';

/** A running image job that holds no GPU: its enhancer runs on the CPU (`later`), or its image step waits (`due`). */
export function holdsNoGpu(job: JobRecord): boolean {
  const image = job.steps?.image;
  return job.phase === 'running' && (image === 'later' || image === 'due');
}

/** A running image job whose image step waits for every GPU, after its enhancer on the CPU answered. */
export const imageStepDue = (job: JobRecord): boolean => job.phase === 'running' && job.steps?.image === 'due';

/** What a queued job claims: a waiting image job with an enhancer on the CPU only the image reservation, for its enhancer step. */
function needsOf(job: JobRecord): readonly string[] {
  return job.phase !== 'running' && enhancerOnCpu(job.spec) ? ['image'] : NEEDS[job.spec.kind];
}

/** A job `plan()` still has to place: waiting, submitted or in its memory check, or an image step waiting for the GPUs. */
const queuedNow = (job: JobRecord): boolean => job.phase !== 'running' || imageStepDue(job);

/** The order `plan()` serves: the queue's (`waitingOrder`), with every image step that waits for the GPUs in its job's place. */
const planOrder = (jobs: Record<string, JobRecord>): string[] => byTicket(jobs, queuedNow);

/** Whether anyone is queued (see `queuedNow`). */
function anyQueued(jobs: Record<string, JobRecord>): boolean {
  for (const id in jobs) if (queuedNow(jobs[id]!)) return true;
  return false;
}

/** `busy`: a running job holds what this one needs (not only an idle worker of ours being unloaded). */
type Admission = { type: 'grant' } | { type: 'start' } | { type: 'wait'; busy: boolean; unload?: Array<{ kind: WorkerKind; code: UnloadCode; reason: string }> };

const BUSY: Admission = { type: 'wait', busy: true };
const FREEING: Admission = { type: 'wait', busy: false };

const loadedOrLoading = (w: WorkerRecord) => w.state === 'loaded' || w.state === 'loading';

/**
 * The requests running on a worker kind. A warm preload (3.6) does not count: it only waits for
 * the start it asked for, so a request may join that start, and the worker is idle for anyone who
 * needs it gone (the preload is then revoked).
 */
export function runningOn(jobs: Record<string, JobRecord>, kind: WorkerKind): number {
  let count = 0;
  for (const job of Object.values(jobs)) if (job.phase === 'running' && job.worker === kind && job.spec.source !== 'preload') count += 1;
  return count;
}

/** Running preload jobs on a worker kind: revoked when that worker is unloaded for someone else. */
export function preloadsOn(jobs: Record<string, JobRecord>, kind: WorkerKind): string[] {
  return Object.entries(jobs).flatMap(([id, job]) => (job.phase === 'running' && job.worker === kind && job.spec.source === 'preload' ? [id] : []));
}

/** Whether a running image job still holds the enhancer start `generation`. */
export function enhancerHeld(jobs: Record<string, JobRecord>, generation: number): boolean {
  return Object.values(jobs).some((job) => job.phase === 'running' && job.steps?.enhancer === generation);
}

/** What a waiting request may need that a preload of this kind steps aside for: a GPU TTS worker competes with chat and images for memory. */
const PRELOAD_YIELDS: Record<'tts' | 'stt', readonly string[]> = { tts: ['tts', 'llm', 'image'], stt: ['stt'] };

/** The GPU worker a chat or TTS start shares the GPUs with in the LLM GPU mode (3.4). */
const GPU_NEIGHBOUR: Partial<Record<JobSpec['kind'], WorkerKind>> = { chat: 'tts', tts: 'chat' };

/**
 * Idle workers of ours that a start may unload when it does not fit beside them: the incompatible
 * GPU profile change of spec 3.2 and 3.4, both ways. An idle TTS worker gives way to a chat start,
 * and an idle chat worker to a TTS start. A preload unloads nothing of ours.
 */
export function unloadableFor(view: PlanView, job: JobSpec): WorkerKind[] {
  const neighbour = GPU_NEIGHBOUR[job.kind];
  if (!neighbour || job.source === 'preload') return [];
  return loadedOrLoading(view.workers[neighbour]) && runningOn(view.jobs, neighbour) === 0 ? [neighbour] : [];
}

/**
 * The exclusive image mode (spec 3.3, 3.4): an image job holds the GPUs, or its image process or
 * an enhancer on the GPUs is not yet gone. Chat and TTS starts wait it out; otherwise the GPUs are
 * in the LLM GPU mode, where a chat profile and the TTS worker may share them. An image job whose
 * enhancer runs on the CPU holds no GPU until its image step. The supervisor's `gpuMode` region
 * shows it.
 */
export function exclusiveImageMode(view: Pick<PlanView, 'jobs' | 'workers'>): boolean {
  for (const id in view.jobs) {
    const job = view.jobs[id]!;
    if (job.phase === 'running' && job.worker === 'image' && !holdsNoGpu(job)) return true;
  }
  const enhancer = view.workers.enhancer;
  const enhancerOnGpus = enhancer.state !== 'unloaded' && (enhancer.plan === null || enhancer.plan.gpus.length > 0);
  return view.workers.image.state !== 'unloaded' || enhancerOnGpus;
}

/** An image reservation: no chat or TTS answer runs where the GPUs are wanted, and the workers in `gone` are unloaded first. */
function imageAdmission(view: PlanView, gone: readonly WorkerKind[]): Admission {
  const { workers, jobs } = view;
  if (gone.includes('chat') && runningOn(jobs, 'chat') + runningOn(jobs, 'tts') > 0) return BUSY;
  const unload = gone.filter((k) => loadedOrLoading(workers[k])).map((kind) => ({ kind, code: 'image_job' as const, reason: 'an image job needs every GPU' }));
  if (unload.length > 0) return { type: 'wait', busy: false, unload };
  return Object.values(workers).some((w) => w.state === 'unloading') ? FREEING : { type: 'start' };
}

/** Whether the image step of a running image job (its enhancer on the CPU has answered) can take every GPU now. */
export function admitImageStep(view: PlanView): Admission {
  return imageAdmission(view, ['chat', 'tts', 'image', 'enhancer']);
}

/** The p95 of measured answer times (nearest rank): of 20, the second longest. */
function answerP95(ms: readonly number[]): number {
  const sorted = [...ms].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(sorted.length * 0.95) - 1)] ?? UNMEASURED_ANSWER_MS;
}

/**
 * Whether an answer of the loaded profile, started as late as the switch's bound allows, is
 * expected to end (its measured p95, or 600 s while unmeasured) by the switch's wait limit less
 * the margin the switch itself needs. The bound stands in for "now": a chat overtakes only before
 * the bound, so the rule holds for every overtake, without a clock, at the cost of at most the
 * bound.
 */
function overtakeEndsInTime(view: SwitchView, bound: number): boolean {
  const chat = view.workers.chat;
  const measured = chat.profileId === null ? undefined : view.chatAnswers[chat.profileId];
  const answer = measured?.revision === chat.revision ? answerP95(measured.ms) : UNMEASURED_ANSWER_MS;
  return bound + answer <= view.limits.maxWaitMs - SWITCH_DEADLINE_MARGIN_MS;
}

/**
 * A waiting chat job that may still be overtaken by chats for the loaded profile: it needs the chat
 * worker switched to its profile or revision, its bound has not passed, and the loaded profile's
 * answers end in time for it (`overtakeEndsInTime`).
 */
function overtakableSwitch(view: SwitchView, job: JobRecord): boolean {
  if (job.spec.kind !== 'chat' || job.spec.source === 'preload' || !job.switchBound || job.switchBound.reached) return false;
  const chat = view.workers.chat;
  return loadedOrLoading(chat) && !chat.stale && !matches(chat, job.spec) && overtakeEndsInTime(view, job.switchBound.ms);
}

/** A waiting request that the loaded (or loading) chat worker can answer. */
function forLoadedChat(view: Pick<PlanView, 'workers'>, job: JobRecord): boolean {
  const chat = view.workers.chat;
  return job.phase === 'waiting' && job.spec.kind === 'chat' && job.spec.source !== 'preload' && loadedOrLoading(chat) && matches(chat, job.spec);
}

/**
 * Whether a request for the loaded chat profile waits after `order[index]` that may overtake it:
 * one before any later job that holds the chat worker's GPUs in the FIFO order (an image, an image
 * step, a switch past its bound), as those keep their place.
 */
function overtakerBehind(view: SwitchView & Pick<PlanView, 'jobs'>, order: string[], index: number): boolean {
  for (const id of order.slice(index + 1)) {
    const job = view.jobs[id];
    if (!job) continue;
    if (forLoadedChat(view, job)) return true;
    if (needsOf(job).includes('llm') && !(job.phase === 'waiting' && overtakableSwitch(view, job))) return false;
  }
  return false;
}

/**
 * The waiting switches that chats for the loaded profile overtake now (swap-aware order): each
 * waits behind the loaded profile's requests until its bound. For the status's reason.
 */
export function overtakenSwitches(view: SwitchView & Pick<PlanView, 'jobs'>): string[] {
  const order = planOrder(view.jobs);
  const overtaken: string[] = [];
  for (const [index, id] of order.entries()) {
    const job = view.jobs[id]!;
    if (job.phase === 'waiting' && overtakableSwitch(view, job)) {
      if (overtakerBehind(view, order, index)) overtaken.push(id);
      else break;
    } else if (needsOf(job).includes('llm')) break;
  }
  return overtaken;
}

const matches = (w: WorkerRecord, job: JobSpec) => w.profileId === job.profileId && w.revision === job.revision && !w.stale;

/** Whether one job can run now, given the workers and the running jobs. */
export function admit(view: PlanView, job: JobSpec): Admission {
  const { workers, jobs } = view;
  const anyUnloading = Object.values(workers).some((w) => w.state === 'unloading');
  const worker = workers[job.kind];
  const running = runningOn(jobs, job.kind);

  if (job.kind === 'image') {
    // One image reservation at a time, whatever step its job is in.
    if (running > 0) return BUSY;
    // An enhancer on the CPU starts beside chat and TTS: only an idle image or enhancer process goes.
    return enhancerOnCpu(job) ? imageAdmission(view, ['image', 'enhancer']) : imageAdmission(view, ['chat', 'tts', 'image', 'enhancer']);
  }
  if ((job.kind === 'chat' || job.kind === 'tts') && exclusiveImageMode(view)) return BUSY;
  if (worker.state === 'unloading' || worker.state === 'lost') return FREEING;
  // Memory is in flux while our own workers unload: the check waits until they are gone.
  if (worker.state === 'unloaded') return anyUnloading ? FREEING : { type: 'start' };
  if (matches(worker, job)) {
    const capacity = job.kind === 'chat' ? worker.slots : 1;
    return running < capacity ? { type: 'grant' } : BUSY;
  }
  if (running > 0) return BUSY;
  const { code, reason } = worker.stale ?? { code: 'profile_switch' as const, reason: `switch to profile ${job.profileId} (revision ${job.revision})` };
  return { type: 'wait', busy: false, unload: [{ kind: job.kind, code, reason }] };
}

/**
 * Whether a job runs at once, without waiting in the queue (3.7): nobody waits, is submitted or is
 * in its memory check, so it overtakes no one (FIFO), and `admit` grants it: its worker is loaded
 * (or loading) with its profile and revision and has a slot free (3.2). A job that needs a worker
 * start always goes through the queue: its memory check takes time, and it waits meanwhile.
 */
export function runsAtOnce(view: PlanView, job: JobSpec): boolean {
  if (view.checking !== null || anyQueued(view.jobs)) return false;
  return admit(view, job).type === 'grant';
}

/**
 * Whether releasing `jobId` leaves `plan()` nothing to do, so the release skips it (3.7): nobody
 * waits, is submitted or is in its memory check, so there is no one to grant and FIFO has nobody
 * to serve; the released job ran on the chat worker, which stays (a chat worker is unloaded when
 * idle only when it is stale: a new revision of its profile, a new build of its program); and
 * every other worker is down or going, so none of them falls due for an idle unload. In any other
 * case `plan()` decides, as for every release.
 */
export function releaseLeavesNothingToPlan(view: PlanView, jobId: string): boolean {
  if (view.checking !== null || anyQueued(view.jobs)) return false;
  const job = view.jobs[jobId];
  if (job?.phase !== 'running' || job.worker !== 'chat' || job.spec.kind !== 'chat' || view.workers.chat.stale) return false;
  for (const kind of WORKER_KINDS) if (kind !== 'chat' && loadedOrLoading(view.workers[kind])) return false;
  return true;
}

export function plan(view: PlanView): Step[] {
  const steps: Step[] = [];
  // A hypothetical copy: grants in this pass count against the slots of later jobs.
  const jobs: Record<string, JobRecord> = { ...view.jobs };
  const workers = { ...view.workers };
  const unloading = new Set<WorkerKind>();
  const unload = (kind: WorkerKind, code: UnloadCode, reason: string) => {
    if (unloading.has(kind)) return;
    unloading.add(kind);
    workers[kind] = { ...workers[kind], state: 'unloading' };
    steps.push({ do: 'unload', kind, code, reason });
  };

  // Workers nobody uses any more: a stale one (new revision, new build), an image process whose
  // image is done, an enhancer whose job let it go, a speech worker under `per_request`.
  for (const w of Object.values(view.workers)) {
    if (!loadedOrLoading(w) || runningOn(jobs, w.kind) > 0) continue;
    if (w.stale) unload(w.kind, w.stale.code, w.stale.reason);
    else if (w.kind === 'enhancer') {
      // The enhancer lives only inside its image job's reservation (4.7).
      if (!enhancerHeld(jobs, w.generation)) unload(w.kind, 'enhancer_done', 'its image job ended: the enhancer is not kept loaded');
    } else if (w.kind === 'image') unload(w.kind, 'image_done', 'the image is done: one image process per image');
    else if ((w.kind === 'tts' || w.kind === 'stt') && view.audio[w.kind] === 'per_request') {
      unload(w.kind, 'per_request', 'audio memory policy per_request: unloaded after its request');
    }
  }
  // What waiting jobs other than preloads need: a preload steps aside for them.
  const order = planOrder(view.jobs);
  const wanted = new Set<string>();
  for (const id of order) {
    const job = jobs[id];
    if ((job?.phase === 'waiting' || (job && imageStepDue(job))) && job.spec.source !== 'preload') for (const need of needsOf(job)) wanted.add(need);
  }

  const blocked = new Set<string>();
  // A switch that chats for the loaded profile overtake: only those may still pass on `llm`.
  let overtaken = false;
  let checkTaken = view.checking !== null;
  const switches = { workers, chatAnswers: view.chatAnswers, limits: view.limits };
  for (const [index, id] of order.entries()) {
    const job = jobs[id];
    if (!job) continue;
    const needs = needsOf(job);
    if (job.phase === 'waiting' && !blocked.has('llm') && overtakableSwitch(switches, job) && overtakerBehind({ ...switches, jobs }, order, index)) {
      overtaken = true;
      continue;
    }
    if (overtaken && needs.includes('llm') && !forLoadedChat({ workers }, job)) {
      // Behind an overtaken switch: another switch within its own bound waits too, without holding
      // up the loaded profile's chats; anything else that needs the chat worker's GPUs holds them.
      if (!(job.phase === 'waiting' && overtakableSwitch(switches, job))) for (const need of needs) blocked.add(need);
      continue;
    }
    // An image step waits in its job's place; its reservation is held, so it is never refused.
    const step = imageStepDue(job);
    if (step ? view.checking === id : job.phase !== 'waiting') {
      for (const need of needs) blocked.add(need);
      continue;
    }
    const refuse = job.spec.whenBusy === 'refuse' && !step;
    // A preload yields: what it waits for stays free for the jobs behind it.
    const yields = job.spec.source === 'preload';
    if (needs.some((need) => blocked.has(need))) {
      if (refuse) steps.push({ do: 'refuse', jobId: id, code: 'image_busy', message: 'the image reservation is busy: earlier jobs wait for it' });
      else if (!yields) for (const need of needs) blocked.add(need);
      continue;
    }
    // Never ahead of a request: while any request waits for the same worker, or (TTS) for the GPU
    // memory a chat or image start needs, the preload waits. So a TTS preload waits out the image mode.
    if (yields && (PRELOAD_YIELDS[job.spec.kind as 'tts' | 'stt'] ?? needs).some((need) => wanted.has(need))) continue;
    const now = { ...switches, jobs, checking: view.checking, audio: view.audio };
    const admission = step ? admitImageStep(now) : admit(now, job.spec);
    if (admission.type === 'grant') {
      jobs[id] = { ...job, phase: 'running', worker: job.spec.kind };
      steps.push({ do: 'grant', jobId: id, worker: job.spec.kind });
      continue;
    }
    if (admission.type === 'start' && !checkTaken) {
      checkTaken = true;
      steps.push({ do: 'check', jobId: id });
    } else if (admission.type === 'wait' && refuse && admission.busy) {
      steps.push({ do: 'refuse', jobId: id, code: 'image_busy', message: 'the image reservation is busy: a running job holds it' });
      continue;
    } else if (admission.type === 'wait') {
      for (const u of admission.unload ?? []) unload(u.kind, u.code, u.reason);
    }
    if (!yields) for (const need of needs) blocked.add(need);
  }
  return steps;
}
