// The one home of the admin API's view types: what the operator console (console/, a browser page)
// reads from the admin listener. The modules that make these answers (the status, the audio policy,
// the enhancer installs, the operator's tests) import their shapes from here, and this file imports
// nothing of the server but two plain declarations (the stored profile and the audio policy
// record), so the page's type check reads the answers' shapes and not the service that makes them.
// The smaller unions below (worker kinds, job sources, the GPU probe) repeat the server's; the
// producers assign their own values to these shapes, so a server union that grows fails its type check.
// The page imports only this file, as types: nothing of the server reaches the bundle, and a shape
// that changes fails the page's type check. (The console's eslint rule keeps it that way.)
import type { AudioKind, AudioMode } from '../../store/audioPolicy.record.js';
import type { ProfileView } from '../../store/profile.schema.js';

/** The worker kinds: the four job kinds, and the prompt enhancer that runs before an image. */
export type WorkerKindView = 'chat' | 'image' | 'tts' | 'stt' | 'enhancer';

/** A worker's status line, as its adapter describes it while it is loaded. */
export interface WorkerStatus {
  kind: WorkerKindView;
  profile_id: string | null;
  state: string;
  pid: number | null;
  gpus: string[];
  /** When its running start began: the adapter sent the start the grant asked for. */
  since: string | null;
}

/** The request counters since the start: all, failed, refused, and per route. */
export interface CounterSnapshot {
  requests: number;
  errors: number;
  rejected: number;
  by_route: Record<string, number>;
}

/** Which build of its program a worker start runs; `replaced_by` once a new one is on disk. */
export interface BuildStatus {
  runtime: string;
  path: string;
  fingerprint: string;
  /** Set once a new build was found: the worker goes when idle. */
  replaced_by: { path: string; fingerprint: string } | null;
}

/** The prompt enhancer's tasks: text to image and image to image. */
export type EnhancerTaskView = 't2i' | 'i2i';

/** A GPU as the probe found it (nvidia-smi, or the simulated inventory), with the processes on it. */
export interface GpuView {
  uuid: string;
  name: string;
  memoryTotalMiB: number;
  memoryFreeMiB: number;
  processes: Array<{ pid: number; usedMiB: number; /** Started by this service (one of its workers). */ own: boolean }>;
}

export interface EndpointStatus {
  status: 'running' | 'stopping' | 'stopped';
  host: string;
  port: number;
  remembered_running: boolean;
  /**
   * The ports the inference listener may use, and where that range comes from (src/config.ts,
   * PortRangeSource: an option, the saved range, the environment, or the native default): a saved port outside it keeps the listener stopped (`saved_port_out_of_range`).
   */
  port_range: { first: number; last: number; from: 'option' | 'saved' | 'env' | 'native' };
  /** The operator's switches for what goes beyond the specification, each off by default (CONTRACT section 9). */
  extensions: { responses: boolean };
  error: { code: string; message: string } | null;
  /**
   * While the endpoint stops: since when, and what it waits for before the workers are unloaded
   * (requests on the inference listener whose answer is not over, and jobs that hold a
   * reservation, admin tests included). Null otherwise.
   */
  stop: { since: string; open_requests: number; running_jobs: number } | null;
  /** Set while secrets.json on disk is damaged and the last good secrets stay in force. */
  secrets_problem: string | null;
  counters: CounterSnapshot;
  /** The GPU mode (spec 3.3, 3.4): `llm` (chat and TTS may share the GPUs), or `exclusive_image` while an image job holds them. */
  gpu_mode: 'llm' | 'exclusive_image';
  workers: WorkerStatus[];
  queue: QueueStatus;
  profiles: ProfileView[];
  gpus: GpuView[];
  /** Where the GPUs were read from; `failed` when a simulated inventory could not be read. */
  gpu_probe: { source: 'nvidia-smi' | 'simulated' | 'none' | 'failed'; problem: string | null };
  memory: MemoryStatus;
}

export interface PlanStatus {
  gpu_layers: number | null;
  gpu_layer_limit: number | null;
  tensor_split: number[] | null;
  /** How the GPU layer count was found, in words (with the plain note when the build's fit tool is missing). */
  fit: string;
  /**
   * chat on GPUs without a fixed split: `used` (the build's llama-fit-params chose), `not_installed`
   * (it is missing: the layer count is the service's own estimate); null where it is not asked.
   */
  fit_tool: 'used' | 'not_installed' | null;
  forecast: { ram_mib: number; gpu_mib: Record<string, number>; basis: string; note: 'prediction' };
  gpu_budget: Array<{ uuid: string; free_mib: number; reserve_mib: number; available_mib: number; forecast_mib: number }>;
  ram_budget: { available_mib: number; reserve_mib: number; forecast_mib: number; limited_by: string };
}

export interface JobStatus {
  job_id: string;
  kind: 'chat' | 'image' | 'tts' | 'stt';
  profile_id: string;
  revision: number;
  /** Who asked: the inference API, the operator's test, or the audio policy's preload. */
  source: 'api' | 'test' | 'preload';
  /** waiting, checking (the memory check of its worker start), starting (its worker loads), running. */
  phase: 'waiting' | 'checking' | 'starting' | 'running';
  position: number | null;
  waited_ms: number;
  running_ms: number | null;
  reservation: { worker: WorkerKindView | null; gpus: string[] };
  /** The memory check's plan of the worker this job runs on (forecast, reserves, RAM budget, layers). */
  memory: PlanStatus | null;
  /** An image job: the steps its image process has done, as it printed them. */
  progress: { step: number; steps: number } | null;
  /**
   * Why it waits where the order is not plain FIFO: a switch that chats for the loaded profile
   * overtake (swap-aware order), or an image job's image step after its enhancer on the CPU.
   */
  reason: string | null;
}

export interface QueueStatus {
  waiting: JobStatus[];
  running: JobStatus[];
}

export interface SupervisedWorker extends WorkerStatus {
  revision: number | null;
  slots: number;
  active_jobs: number;
  /** Why it was last unloaded or how it ended. */
  last: string | null;
  plan: PlanStatus | null;
  /** The build of its program it runs; `replaced_by` once a new one is on disk (it goes when idle). */
  build: BuildStatus | null;
  /** Why it will be unloaded as soon as it is idle (a new revision, a new build), or null. */
  stale: string | null;
}

export interface MemoryStatus {
  ram: Record<string, number | string | null>;
  gpu_reserve_mib: Array<{ uuid: string; reserve_mib: number }>;
  note: string;
}

export interface AudioPolicyError {
  kind: AudioKind;
  profile_id: string | null;
  /** runtime_missing, not_executable, profile_missing, insufficient_memory, resources_busy, queue_full, queue_timeout, worker_failed. */
  code: string;
  message: string;
  /** Failed preloads in a row (0: the selection cannot be tried now, e.g. while the endpoint is stopped). */
  attempts: number;
}

export interface AudioPolicyView {
  settings: Array<{ kind: AudioKind; mode: AudioMode; profile_id: string | null }>;
  errors: AudioPolicyError[];
  /** Where each kind's policy stands: auto, per_request, or warm (dormant, preloading, held, failed). */
  states: Record<AudioKind, string>;
}

export type InstallState = 'not_installed' | 'installing' | 'installed' | 'failed' | 'cancelled';

/** CONTRACT section 8's Install, plus the file being fetched. */
export interface InstallView {
  repo: string;
  state: InstallState;
  bytes_done: number;
  bytes_total: number | null;
  error: string | null;
  /** The file being downloaded now (installing only). */
  file: string | null;
}

/**
 * What an install of a task would download, asked of the hub before it starts (HEAD requests, no
 * byte of a file moves), beside the free disk: the console shows it on the Install button and asks
 * before a large download.
 */
export interface InstallPlan {
  task: EnhancerTaskView;
  repo: string;
  revision: string;
  /** Each recipe file: its size as the hub states it (null: it states none), and what of it is in the store already. */
  files: Array<{ path: string; bytes: number | null; bytes_on_disk: number }>;
  /** Every file's size together; null when the hub states no size for one of them (the install would be refused). */
  bytes_total: number | null;
  /** Already in the store: complete files of the stated size, and partial downloads an install resumes. */
  bytes_on_disk: number;
  bytes_to_download: number | null;
  /** Free bytes on the filesystem of the store (statfs); null when it cannot be read. */
  free_bytes: number | null;
  /** Kept free beyond the download (DISK_MARGIN_BYTES). */
  margin_bytes: number;
  /** Whether the download and the margin fit the free disk; null when either is unknown. */
  fits: boolean | null;
  /** Why it does not fit or cannot be told, for people; null when it fits. */
  reason: string | null;
  /**
   * The hub's failure when it could not be asked (unreachable, or it refused a file): the sizes are
   * then unknown. An answer, not an error status: the console asks on every page view, and a
   * machine without internet is an ordinary case, not a failed request.
   */
  hub_error: string | null;
}

export interface Throughput {
  tokens: number;
  ms: number;
  tokens_per_second: number;
}

export interface ChatTestUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Prompt tokens the worker reused from its cache (part of prompt_tokens, not of prefill). */
  cached_tokens: number | null;
}

export type ChatTestPhase = 'waiting' | 'starting' | 'running' | 'done' | 'cancelled' | 'failed';

export interface ChatTestJob {
  id: string;
  profile_id: string;
  revision: number;
  /** The door it went through: `/v1/chat/completions` or `/v1/responses`. */
  api: 'chat_completions' | 'responses';
  phase: ChatTestPhase;
  max_tokens: number;
  /** The streamed answer so far (RAM only). */
  answer: string;
  /** Chat completions' finish_reason; through the Responses API, the Response's incomplete reason or status. */
  finish_reason: string | null;
  timings: { prefill: Throughput | null; generation: Throughput | null };
  usage: ChatTestUsage | null;
  error: { code: string | null; message: string } | null;
  /** Position in the queue while waiting. */
  position: number | null;
  started_at: string;
  finished_at: string | null;
}

export type ImageTestPhase = 'waiting' | 'running' | 'done' | 'cancelled' | 'failed';

export interface ImageTestJob {
  id: string;
  profile_id: string;
  revision: number;
  phase: ImageTestPhase;
  /** Steps done by the image process, as it printed them. */
  progress: { step: number; steps: number } | null;
  /** Size and the metadata chunks removed, once done. */
  result: { size: string; removed_chunks: string[] } | null;
  /** The image (PNG, base64) once done; RAM only. */
  b64_png: string | null;
  error: { code: string | null; message: string } | null;
  /**
   * The prompt enhancer (4.7): `ran` (the profile's enhancer rewrote the prompt), `preview` (the
   * operator accepted a preview's suggestion or kept the original: not enhanced again), or `off`.
   */
  enhancer: 'ran' | 'preview' | 'off';
  /** The enhancer's rewrite the image was made from, and its suggested shape (RAM only; only a suggestion). */
  enhanced: { prompt: string; wh_ratio: number | null } | null;
  started_at: string;
  finished_at: string | null;
}

export interface EnhancerPreview {
  profile_id: string;
  revision: number;
  task: EnhancerTaskView;
  /** How many reference images it read (i2i). */
  images: number;
  original: string;
  suggestion: string;
  /** Only a suggestion: the profile's resolution is never changed by it. */
  wh_ratio: number | null;
  created_at: string;
}

export type PullState = 'downloading' | 'done' | 'failed' | 'cancelled';

/** CONTRACT section 10's Pull, and how it goes: its rate, whether it waits for a transfer slot, the verified sha256, when it began and last changed. */
export interface PullView {
  id: string;
  repo: string;
  revision: string;
  path: string;
  state: PullState;
  /** Bytes on disk: of the partial file while downloading (or waiting), of the file once done. */
  bytes_done: number;
  /** The size the hub stated. */
  bytes_total: number;
  error: string | null;
  /** The absolute path of the file once done, else null. */
  file: string | null;
  /** Bytes per second over the last few seconds (modelPulls.ts, RATE_WINDOW_MS) while it transfers; null otherwise. */
  rate_bytes_per_s: number | null;
  /** Downloading, and waiting for one of the transfer slots (modelPulls.ts, MAX_TRANSFERS). */
  waiting: boolean;
  /** The file's sha256 once done (hashed while it was downloaded, or taken from a verified copy). */
  sha256: string | null;
  created_at: string;
  updated_at: string;
}

/** One state node of a machine definition, as the state-chart view draws it. */
export interface StateNodeView {
  /** The node's full id (`listener.stopping.draining`), unique in its machine. */
  id: string;
  /** The node's own key (`draining`); the machine's id for the root. */
  key: string;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** The key of the initial child (compound nodes), else null. */
  initial: string | null;
  tags: string[];
  /** Child nodes in definition order. */
  states: StateNodeView[];
  transitions: TransitionView[];
}

export interface TransitionView {
  /** The event type (`endpoint.start`), `always` for eventless, `after 30000ms` for delays, `done`/`error` for invoke results. */
  event: string;
  /** Full ids of the target nodes; empty for a transition that stays (actions only). */
  targets: string[];
  /** The guard's name, if any. */
  guard: string | null;
  reenter: boolean;
}

/** A machine definition: the same object the actors run, walked into plain data. */
export interface MachineView {
  id: string;
  root: StateNodeView;
}

/** One event an actor received, reduced to what is safe to show: its type, its sender and when. */
export interface ActorEventView {
  type: string;
  source: string | null;
  at: string;
}

/** A running (or ended) actor of a machine: its id, its machine, where it is and what it received last. */
export interface ActorView {
  /** The actor's system id (`listener`, `worker.chat`) or its id. */
  id: string;
  /** The id of its machine definition (a key of `GET /api/v1/machines`). */
  machine: string;
  /** The full ids of the active state nodes, leaves and their ancestors. */
  active: string[];
  /** The snapshot value as XState gives it (`{ stopping: 'draining' }`). */
  value: unknown;
  status: 'active' | 'done' | 'error' | 'stopped';
  /** The last events, oldest first (at most 25). */
  events: ActorEventView[];
  updated_at: string;
  /** True on the last event of an actor the service forgets (it ended and has no system id). */
  gone?: boolean;
}

/** One log line as pino wrote it (already redacted), parsed. */
export interface LogLineView {
  /** A sequence number, increasing, for the page's keys and resumption. */
  seq: number;
  time: number;
  level: number;
  msg: string;
  /** The remaining fields (component, route, status, err, …). */
  fields: Record<string, unknown>;
}

/**
 * Host facts for the hardware view (systeminformation, cached a minute). A part that could not be
 * read is null (graphics: empty) and named in `unavailable`.
 */
export interface HostView {
  os: { platform: string; distro: string; release: string; kernel: string; arch: string; hostname: string } | null;
  cpu: { manufacturer: string; brand: string; cores: number; physicalCores: number; speedGHz: number } | null;
  memory: { totalBytes: number; availableBytes: number } | null;
  graphics: { vendor: string; model: string; driverVersion: string | null; vramMiB: number | null }[];
  /** Free space where the state directory lives (enhancer downloads go there too). */
  disk: { mount: string; sizeBytes: number; availableBytes: number } | null;
  node: string;
  read_at: string;
  /** The parts that could not be read this time: `os`, `cpu`, `memory`, `graphics`, `disk`. */
  unavailable: string[];
}

/** One line a worker process wrote to its stderr, as the console shows it: redacted and cut (stderrLines.ts). */
export interface StderrLineView {
  /** Increasing per worker kind, for the page's keys. */
  seq: number;
  /** When the service read it (ISO). */
  at: string;
  /** The worker start (generation) that wrote it. */
  generation: number;
  text: string;
}

/** `GET /api/v1/workers/<kind>/stderr`: a worker kind's last stderr lines, oldest first. */
export interface WorkerStderrView {
  kind: 'chat' | 'image' | 'tts' | 'stt' | 'enhancer';
  lines: StderrLineView[];
  /** At most this many lines are kept, each at most `line_chars` characters. */
  limit: number;
  line_chars: number;
}

/**
 * One answered request of the inference listener, as the recent-requests view shows it: what was
 * asked of which profile, how it ended and how fast. Never the prompt or the answer.
 */
export interface RecentRequestView {
  /** Increasing, for the page's keys. */
  seq: number;
  /** The request id (the `x-request-id` header it was answered with). */
  id: string;
  /** When the answer ended (ISO). */
  at: string;
  method: string;
  route: string;
  /** The profile name the request named, when it is a stored profile; else null. */
  profile: string | null;
  status: number;
  /** The error code of a refused or failed answer, else null. */
  code: string | null;
  /** From the request's arrival to its answer's end. */
  duration_ms: number;
  /** Time waited in the queue for a reservation (chat), else null. */
  queue_ms: number | null;
  /** From the request's arrival to the answer's first byte (a stream's first event), chat only. */
  ttft_ms: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  /** Generated tokens per second as the worker measured them (no load or queue time in it). */
  tokens_per_second: number | null;
  stream: boolean | null;
}

/**
 * The server-sent events of `GET /api/v1/events` (event name → data). On connect the stream sends
 * one of each as a snapshot (`actor` once per actor, `log` for the recent lines), then each as it
 * changes.
 */
export interface ConsoleEvents {
  status: unknown;
  'audio-policy': unknown;
  actor: ActorView;
  log: LogLineView;
  'chat-test': { job: unknown };
  /** The image test job without its image (`b64_png` null, `has_image` true once done). */
  'image-test': { job: unknown };
  /** The prompt enhancers' installs, as `GET /api/v1/prompt-enhancers` (progress included). */
  enhancers: unknown;
  /** The model pulls, as `GET /api/v1/model-pulls` (progress included). */
  pulls: { pulls: PullView[] };
  /** One answered inference request (the snapshot sends the recent ones, oldest first). */
  request: RecentRequestView;
}

// The model files, a hub's files and forecast (CONTRACT section 10): made in src/system/models/.

/** A model file's facts (null fields: the file does not say). */
export interface ModelFacts {
  architecture: string | null;
  /** Weights in all tensors (general.parameter_count when the file states it). */
  parameters: number | null;
  /** The ggml type that holds most of the block weights (Q4_K, Q8_0, F16, ...). */
  quantization: string | null;
  context_length: number | null;
  chat_template: boolean;
}

/** The memory check's answer for a chat worker of the model at `context` on today's inventory. */
export interface ModelForecast {
  /** The memory check would start it (with `gpu_layers` of `layer_count` on the GPUs, the rest in RAM). */
  fits: boolean;
  gpu_layers: number;
  gpus: Array<{ uuid: string; bytes: number }>;
  ram_bytes: number;
  /** Why it does not fit, or what it gives up (layers left in RAM); null when every layer is on a GPU, or there is no GPU. */
  reason: string | null;
  /** The context forecast: the profile default 8192, at most the model's own. */
  context: number;
  /** Every layer there is to place: the blocks and the output layer. */
  layer_count: number;
  /** The forecast in one sentence for people ("fits on GPU 0 with every layer at 8192 tokens"). */
  summary: string;
}

export type ModelFormat = 'gguf' | 'whisper' | 'unknown';

/** One model file as `GET /api/v1/model-files` lists it. */
export interface ModelFileView {
  path: string;
  bytes: number;
  format: ModelFormat;
  facts: ModelFacts | null;
  forecast: ModelForecast | null;
  error: string | null;
}

export interface ModelFilesView {
  files: ModelFileView[];
  /** What the walk could not do: a folder missing or unreadable, a limit reached. */
  problems: string[];
}

export interface HubFileView {
  path: string;
  bytes: number;
  sha256: string | null;
  format: ModelFormat;
}

export interface HubFilesView {
  repo: string;
  revision: string;
  files: HubFileView[];
}

export interface HubForecastView {
  facts: ModelFacts;
  forecast: ModelForecast | null;
  /** Why there is no forecast (the header lacks what the memory check needs), else null. */
  error: string | null;
  /** Header bytes received from the hub for this answer. */
  header_bytes: number;
}
