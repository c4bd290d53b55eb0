// Events, context and input of the supervisor (spec 1, 3, 3.7, 7, 8): the root actor that shares
// the GPUs and the RAM between the chat, image, TTS and STT workers through reservations.
import type { ListenerInput } from '../listener/index.js';
import type { JobSource, QueueInput } from '../queue/index.js';
import type { AudioKind, AudioMode } from '../../src/store/audioPolicy.record.js';

export type JobKind = 'chat' | 'image' | 'tts' | 'stt';
/**
 * One worker of each kind exists at a time; its kind names it. The prompt enhancer (spec 4.7) is a
 * worker without jobs of its own: it runs inside an image job's reservation, before its image.
 */
export type WorkerKind = JobKind | 'enhancer';
export const WORKER_KINDS: readonly WorkerKind[] = ['chat', 'image', 'tts', 'stt', 'enhancer'];

/**
 * The prompt enhancer step of an image job (spec 4.7): which installed model rewrites the prompt
 * before the image worker starts (`image: true`), or only answers a preview (`image: false`).
 */
export interface EnhancerStep {
  task: 't2i' | 'i2i';
  /** The installed GGUF files: the language model, and the projector for reference images. */
  model: string;
  mmproj: string | null;
  context: number;
  /** Whether an image follows under the same reservation (false: the console's preview). */
  image: boolean;
  /**
   * Where the enhancer runs (CONTRACT section 8): `auto`, every GPU with CPU offload; `cpu`, no GPU
   * at all (`-ngl 0`, no CUDA device visible); or a GPU UUID, that GPU with CPU offload.
   */
  device: string;
}

/** A request for a reservation: what the route (or an admin test) took from its profile snapshot. */
export interface JobSpec {
  id: string;
  kind: JobKind;
  /** `api`: an inference request; `test`: the operator's chat or image test; `preload`: the warm audio policy (3.6). */
  source: JobSource;
  profileId: string;
  /** The revision of the snapshot the job took when it was accepted (spec 2.1 rule 6). */
  revision: number;
  /** chat: the profile's slot count, the parallel answers one loaded worker gives. */
  slots: number;
  /** tts: `cpu` or the UUID of the designated GPU. */
  device: string;
  /** When resources are busy: wait in the queue (the API) or be refused at once (the GUI image test). */
  whenBusy: 'wait' | 'refuse';
  /** The frozen profile snapshot, opaque to the supervisor: the start check reads the model from it. */
  profile: unknown;
  /** When the route submitted it (the adapter's clock), for the waited time in diagnostics. */
  at: number;
  /** image: the prompt enhancer runs first under the same reservation (spec 4.7). */
  enhancer?: EnhancerStep | null;
}

/**
 * `lost`: its unload failed (the process outlived SIGKILL): its memory stays reserved until the GPU
 * probe no longer shows its process, or the process ends.
 */
export type WorkerState = 'unloaded' | 'loading' | 'loaded' | 'unloading' | 'lost';

/** The memory a worker start is predicted to need (spec 7: a prediction, not a proof). */
export interface Forecast {
  ramMiB: number;
  /** Per GPU UUID. */
  gpuMiB: Record<string, number>;
  /** How the numbers were reached, for the diagnostics. */
  basis: string;
}

/** How a worker is started, decided by the memory check (spec 8). */
export interface StartPlan {
  /** GPUs the worker occupies, in UUID order; empty on the CPU. */
  gpus: string[];
  /** chat: `-ngl`, the GPU layer count (null on the CPU). */
  gpuLayers: number | null;
  /** chat: the most layers the fit could give: the block count plus the output layer, or the profile's `gpuLayers`. */
  gpuLayerLimit: number | null;
  /** chat: `-ts`, the split ratios over `gpus` (null: one GPU or CPU). */
  tensorSplit: number[] | null;
  /** chat: `-ot` tensor overrides reported by the build's own fit. */
  overrides: string[];
  forecast: Forecast;
  /** Per GPU: what the probe saw free, the reserve kept, what the start could use, and the forecast (MiB). */
  gpuBudget: Array<{ uuid: string; freeMiB: number; reserveMiB: number; availableMiB: number; forecastMiB: number }>;
  /** RAM: what may be used before the reserve, the reserve, and the forecast (MiB). */
  ramBudget: { availableMiB: number; reserveMiB: number; forecastMiB: number; limitedBy: string };
  /** Foreign compute processes seen on the GPUs at the start check (none on `gpus`). */
  foreignAtStart: number[];
  /** How the GPU layer count was found: stored, shallow search (steps), the build's fit, or CPU. */
  fit: string;
  /**
   * chat on GPUs without a fixed split: `used` when the build's llama-fit-params chose the
   * parameters, `not_installed` when the build has none and the layer count is our own estimate;
   * null where it is not asked (CPU only, a fixed split, other workers).
   */
  fitTool: 'used' | 'not_installed' | null;
  /** image with an enhancer step: where the enhancer runs first (the build's fit over every GPU, CPU offload for the rest). */
  enhancer?: StartPlan;
}

/**
 * The supervisor's order to a worker machine to start (`worker.start`), sent with the grant that
 * planned it: which start it is, the profile snapshot of the job that got the grant (opaque here:
 * the worker machine reads its launch from it), and the memory check's plan.
 */
export interface WorkerStart {
  generation: number;
  profileId: string;
  revision: number;
  profile: unknown;
  plan: StartPlan;
  /** The GPUs the start may use: its plan's, or every GPU of an image job's reservation. */
  gpus: string[];
  /** An enhancer start: its image job's enhancer step (the model, the task, the projector); null otherwise. */
  enhancer: EnhancerStep | null;
}

export interface WorkerRecord {
  kind: WorkerKind;
  state: WorkerState;
  /**
   * Which start this is (0 while unloaded). The grant that starts a worker names it, the unload
   * command names it, and every worker report must name it: a late report about an earlier start
   * can never change a later one.
   */
  generation: number;
  profileId: string | null;
  revision: number | null;
  /** chat: parallel answers of the loaded profile. */
  slots: number;
  pid: number | null;
  plan: StartPlan | null;
  /**
   * Why it goes as soon as no job uses it (a newer revision was saved, the profile was deleted, its
   * program has a new build: spec 3.2, 3.5, 9), or null while it may take new jobs.
   */
  stale: { code: 'profile_changed' | 'new_build'; reason: string } | null;
  /** Why it was last unloaded or how it ended, for the status. */
  last: string | null;
}

export type JobPhase = 'submitted' | 'waiting' | 'checking' | 'running';

export interface JobRecord {
  spec: JobSpec;
  phase: JobPhase;
  /** The worker it holds while running. */
  worker: WorkerKind | null;
  /** The GPUs its reservation covers while running. */
  gpus: string[];
  /** Its place in the queue's FIFO order once the queue took it (`job.queued`): a lower ticket waited first. */
  ticket?: number;
  /**
   * A chat job under the swap-aware order: how long chats for another loaded profile may overtake
   * it (set when it is queued), and whether that bound has passed (then nothing overtakes it).
   */
  switchBound?: { ms: number; reached: boolean };
  /**
   * image with an enhancer step: the enhancer start it holds, and what follows once the enhancer
   * has answered (`enhancer.done`); null otherwise. `image` is
   * - `{ generation, plan }`: an enhancer on the GPUs; the job holds every GPU from its grant, and
   *   its image start was planned with it;
   * - `later`: an enhancer on the CPU; the job holds no GPU while it runs (chat and TTS stay), and
   *   its image step needs its own admission once the enhancer answered;
   * - `due`: that image step waits for every GPU, in the job's place in the FIFO order;
   * - null: no image follows (a preview), or its start was granted.
   */
  steps?: { enhancer: number; image: { generation: number; plan: StartPlan } | 'later' | 'due' | null } | null;
}

/** A GPU as the probe last saw it, with its compute processes. */
export interface GpuView {
  uuid: string;
  memoryTotalMiB: number;
  memoryFreeMiB: number;
  processes: Array<{ pid: number; usedMiB: number }>;
}

export type DenialCode =
  | 'queue_full'
  | 'queue_timeout'
  | 'profile_changed'
  | 'endpoint_stopped'
  | 'resources_busy'
  | 'insufficient_memory'
  | 'image_busy'
  | 'start_check_failed'
  /** The image job's prompt enhancer cannot start (its model cannot be read): 502 enhancer_failed (4.7). */
  | 'enhancer_failed';

/** `runtime_missing`: the worker's program was gone when its start ran (removed after the catalog's check). */
/**
 * `insufficient_memory` and `start_check_failed`: the memory check of a running image job's own
 * image step (after an enhancer on the CPU) refused its start.
 */
export type RevocationCode = 'resources_busy' | 'worker_failed' | 'endpoint_stopped' | 'runtime_missing' | 'insufficient_memory' | 'start_check_failed';

/**
 * Why the supervisor unloads a worker, as a code: the metrics count by it. The `reason` beside it
 * says the same in words for the log and the status (it names profiles, pids and GPUs).
 */
export const UNLOAD_CODES = [
  'make_room',
  'profile_switch',
  'profile_changed',
  'new_build',
  'image_job',
  'image_done',
  'enhancer_done',
  'per_request',
  'foreign_process',
  'operator',
  'endpoint_stop',
  'shutdown',
  'stalled',
] as const;
export type UnloadCode = (typeof UNLOAD_CODES)[number];

/** The outcome of one start check: the facts the adapters gathered, judged by `decideStart`. */
export type StartVerdict =
  | { verdict: 'start'; plan: StartPlan }
  | { verdict: 'refuse'; code: 'resources_busy' | 'insufficient_memory' | 'start_check_failed' | 'enhancer_failed'; message: string }
  /** It would fit once these idle workers of ours are unloaded (an incompatible GPU profile change). */
  | { verdict: 'unload-first'; kinds: WorkerKind[]; message: string };

/**
 * How chats for the loaded profile may overtake a waiting switch (spec 3.2: "cannot be overtaken
 * indefinitely by new chats"). `swap-aware`: while a chat for another profile waits, requests for
 * the loaded profile still take its free slots, until the switch has waited `switchMaxWaitMs` (or
 * the switch target's own last measured load time, if longer; never more than
 * SWITCH_MAX_WAIT_CAP_MS) or the loaded profile has nothing queued; `strict`: FIFO, a waiting
 * switch holds every later chat back.
 */
export interface SchedulingPolicy {
  order: 'swap-aware' | 'strict';
  switchMaxWaitMs: number;
}

export const DEFAULT_SCHEDULING: SchedulingPolicy = { order: 'swap-aware', switchMaxWaitMs: 30_000 };

/**
 * The longest a waiting switch may be overtaken (CONTRACT 9), whatever the setting or the measured
 * load: well below the queue's 600 s wait, so that steady traffic for the loaded profile can delay
 * a switch but never turn it into a queue_timeout. A larger setting is refused at start.
 */
export const SWITCH_MAX_WAIT_CAP_MS = 120_000;

/**
 * What a switch needs between the end of the answers it waits for and its grant: the chat worker's
 * unload (SIGTERM, 10 s of grace, 10 s more after SIGKILL) and the memory check. A chat overtakes a
 * switch only if its profile's answers are expected to end this long before the switch's wait
 * limit. The wait limit itself (600 s, spec 3.7) is never held or lengthened for a switch.
 */
export const SWITCH_DEADLINE_MARGIN_MS = 30_000;

/**
 * How long an answer of a chat profile not yet measured is taken to hold its slot: the longest a
 * stream may run (spec 8: running SSE output ends after 600 s). So chats for a profile without
 * measured answers never overtake a switch.
 */
export const UNMEASURED_ANSWER_MS = 600_000;

/** How many recent answers per chat profile the overtaking rule's p95 is taken over. */
export const ANSWER_WINDOW = 20;

export interface SupervisorInput {
  listener: ListenerInput;
  queue?: Omit<QueueInput, 'reportToParent'>;
  scheduling?: Partial<SchedulingPolicy>;
  /** The worker machines' limits (tests shorten the load limit and the grace before SIGKILL). */
  workers?: Partial<Record<WorkerKind, WorkerLimits>>;
}

/** What a worker machine is invoked with beside its report to the supervisor. */
export interface WorkerLimits {
  loadTimeLimitMs?: number;
  terminationGraceMs?: number;
  /** How long a process may outlive SIGKILL before it is lost. */
  killLimitMs?: number;
}

/** The audio memory policy's mode per speech worker kind (spec 2.4, 3.6). */
export type { AudioKind, AudioMode };

export interface SupervisorContext {
  jobs: Record<string, JobRecord>;
  workers: Record<WorkerKind, WorkerRecord>;
  /** The worker machines' limits, from the input. */
  workerLimits: Partial<Record<WorkerKind, WorkerLimits>>;
  /** The job whose worker start is checked (one check at a time; the `checks` region runs it). */
  checking: string | null;
  /** How many worker starts were granted: the source of each start's generation. */
  starts: number;
  /** The latest revision seen per profile (null: deleted); an older snapshot is refused. */
  revisions: Record<string, number | null>;
  gpus: GpuView[];
  /** How long the speech workers stay loaded (3.6): `per_request` unloads after each request. */
  audio: Record<AudioKind, AudioMode>;
  /** False between an endpoint stop's discard and the end of its unload: new reservations are refused. */
  accepting: boolean;
  /** Routes waiting for every worker to be unloaded (endpoint stop). */
  unloadWaiters: string[];
  listenerInput: ListenerInput;
  limits: { maxWaiting: number; maxWaitMs: number; retryAfterSeconds: number };
  scheduling: SchedulingPolicy;
  /**
   * Per chat profile: how long its last worker start took to load (its engine's own measure) and
   * for which revision. A switch to that profile and revision is bounded by it if longer than the
   * setting; another revision may load a different model, so its measure does not count for it.
   */
  chatLoads: Record<string, { revision: number; ms: number }>;
  /**
   * Per chat profile: how long its last answers (at most ANSWER_WINDOW, of one revision) held their
   * slot, from grant to release, as the adapter measured them. A chat overtakes a waiting switch
   * only if their p95 ends before the switch's wait limit.
   */
  chatAnswers: Record<string, { revision: number; ms: number[] }>;
}

export type SupervisorEvent =
  /** A job asks for its reservation; it waits in the queue until granted or denied. */
  | { type: 'gpu.reserve'; job: JobSpec }
  /**
   * The job has ended (a streamed chat after its last byte): its reservation is free. `heldMs`: how
   * long it held it, from its grant (the adapter's clock).
   */
  | { type: 'gpu.release'; jobId: string; heldMs?: number }
  /** The client went away: a waiting job leaves the queue, a running one releases (`heldMs` as for `gpu.release`). */
  | { type: 'job.cancel'; jobId: string; heldMs?: number }
  /** From the queue child (reportToParent). `ticket`: the job's place in the queue's FIFO order. */
  | { type: 'job.queued'; jobId: string; position: number; ticket: number }
  | { type: 'job.rejected'; jobId: string; code: 'queue_full' | 'queue_timeout' | 'profile_changed' | 'endpoint_stopped'; retryAfterSeconds?: number }
  | { type: 'job.removed'; jobId: string }
  | { type: 'job.dispatched'; jobId: string }
  /** From the worker adapters, each about the start `generation` (from the grant or the unload command). */
  | { type: 'worker.started'; kind: WorkerKind; generation: number; pid: number }
  /** `loadMs`: how long the start took from its spawn to ready, as its engine measured it. */
  | { type: 'worker.loaded'; kind: WorkerKind; generation: number; loadMs?: number }
  | { type: 'worker.unloaded'; kind: WorkerKind; generation: number }
  /** Its process outlived SIGKILL: the worker is lost, its memory stays reserved. */
  | { type: 'worker.lost'; kind: WorkerKind; generation: number; pid: number | null }
  | { type: 'worker.exited'; kind: WorkerKind; generation: number; cause: string; message: string }
  /** From the GPU watcher: the probe's latest view. */
  | { type: 'gpu.inventory'; gpus: GpuView[] }
  /** A profile got a new revision (revision), was deleted (null), or lost or gained its publication. */
  | { type: 'profile.changed'; profileId: string; revision: number | null; published: boolean }
  | { type: 'worker.buildChanged'; kind: WorkerKind; generation: number; reason: string }
  /** Endpoint stop, step 1: waiting jobs are discarded and new reservations refused. */
  | { type: 'endpoint.discard'; requestId: string }
  /** Endpoint stop, last step: every worker is unloaded. */
  | { type: 'workers.unloadAll'; requestId: string }
  /** The inference listener is bound (again). */
  | { type: 'endpoint.opened' }
  /** The audio memory policy of a speech worker kind changed (3.6). */
  | { type: 'audio.mode'; kind: AudioKind; mode: AudioMode }
  /** The chat test's explicit unload (3.2): rejected while requests are active. */
  | { type: 'worker.unloadRequest'; kind: WorkerKind; requestId: string }
  /**
   * A running job's worker has given it no token past the job's limit and answers no status probe:
   * one answer holds it (a grammar that exploded). The job's adapter sends it again while it lasts;
   * `message` is what every job on the worker fails with when it is restarted.
   */
  | { type: 'worker.stalled'; kind: WorkerKind; generation: number; jobId: string; message: string }
  /** An image job's enhancer has answered (4.7): it is ended, and the job's image start follows. */
  | { type: 'enhancer.done'; jobId: string }
  /** A waiting chat job's overtaking bound has passed (swap-aware order): nothing overtakes it any more. */
  | { type: 'switch.bound'; jobId: string }
  /** Raised by the supervisor itself: the job under check left. */
  | { type: 'check.abandoned' };

export type SupervisorEmitted =
  | { type: 'job.queued'; jobId: string; position: number }
  /**
   * `generation`: the worker start the job runs on (a new one when `start` is set). `enhancer`: the
   * start of the prompt enhancer that runs first (image jobs with an enhancer step); with an
   * enhancer on the CPU the grant holds no GPU, and `generation` and `start` are the enhancer's.
   * `step: 'image'`: a second grant for the same job once its enhancer answered, with the image
   * start it runs on.
   */
  | {
      type: 'gpu.granted';
      jobId: string;
      worker: WorkerKind;
      generation: number;
      start: StartPlan | null;
      gpus: string[];
      enhancer?: { generation: number; plan: StartPlan };
      step?: 'image';
    }
  | { type: 'gpu.denied'; jobId: string; code: DenialCode; message: string; retryAfterSeconds?: number }
  /** A running job loses its reservation (foreign GPU process, worker died, endpoint stop). */
  | { type: 'gpu.revoked'; jobId: string; code: RevocationCode; message: string }
  /** A command for the worker adapters: unload this worker (own processes get SIGTERM). */
  | { type: 'worker.unload'; kind: WorkerKind; generation: number; code: UnloadCode; reason: string }
  | { type: 'supervisor.reply'; requestId: string; outcome: { ok: true } | { ok: false; code: 'active_requests'; message: string } };
