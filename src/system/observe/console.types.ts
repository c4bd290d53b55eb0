// The one home of the admin API's view types: what the operator console (console/, a browser page)
// reads from the admin listener. The documented routes' answers are declared where they are made
// and named here once (the re-exports below); the console's own views (the machine definitions it
// draws, the running actors it highlights, the log lines it streams and the events of
// `GET /api/v1/events`) are declared here. The page imports only this file, as types, so nothing
// of the server reaches the bundle, and a server shape that changes fails the page's type check.
export type { EndpointStatus } from './status.js';
export type { SupervisedWorker } from './diagnostics.js';
export type { AudioPolicyView } from '../audioPolicy.js';
export type { InstallPlan, InstallView } from '../enhancers/enhancerInstalls.js';
export type { PullView } from '../models/modelPulls.js';
import type { PullView } from '../models/modelPulls.js';
export type { ChatTestJob } from '../../workers/chat/chatTests.js';
export type { ImageTestJob } from '../../workers/image/imageTests.js';
export type { EnhancerPreview } from '../../workers/enhancer/enhancerPreviews.js';
export type { ModelFileView, ModelFilesView } from '../models/modelFiles.js';
export type { HubFilesView, HubForecastView } from '../models/modelHub.js';
export type { ModelFacts, ModelForecast } from '../models/modelForecast.js';

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
