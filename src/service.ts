// The running service as routes and worker flows see it: the stores, the catalog, the supervisor
// and scheduler, the worker adapters, the operator's tests, the listener. src/compose.ts makes it.
import type { Config } from './config.js';
import type { EndpointStore } from './store/endpoint.js';
import type { ProfileStore } from './store/profiles.js';
import type { SecretStore } from './store/secrets.js';
import type { AudioPolicies } from './system/audioPolicy.js';
import type { BuildWatcher } from './system/catalog/builds.js';
import type { ChartFeed } from './system/observe/charts.js';
import type { Catalog } from './system/catalog/catalog.js';
import type { Counters } from './system/observe/counters.js';
import type { RecentRequests } from './system/observe/recentRequests.js';
import type { EnhancerInstalls } from './system/enhancers/enhancerInstalls.js';
import type { ModelFiles } from './system/models/modelFiles.js';
import type { ModelHub } from './system/models/modelHub.js';
import type { ModelPulls } from './system/models/modelPulls.js';
import type { UploadRoom } from './workers/uploadRoom.js';
import type { HostFacts } from './system/host.js';
import type { Inspection } from './system/observe/inspect.js';
import type { ListenerActor } from './system/listener.js';
import type { Logger } from './system/observe/log.js';
import type { LogTail } from './system/observe/logTail.js';
import type { Metrics } from './system/observe/metrics.js';
import type { Scheduler, SupervisorActor } from './system/scheduler.js';
import type { SessionStore } from './system/sessions.js';
import type { EndpointStatus } from './system/observe/console.types.js';
import type { Extensions } from './system/extensions.js';
import type { WorkerHooks } from './system/workers.js';
import type { ChatWorker } from './workers/chat/chat.js';
import type { ChatLimits } from './workers/chat/chatRequest.js';
import type { ChatTests } from './workers/chat/chatTests.js';
import type { ResponseMemory } from './workers/chat/responseMemory.js';
import type { ConsoleFeed } from './workers/consoleFeed.js';
import type { EnhancerWorker } from './workers/enhancer/enhancer.js';
import type { EnhancerPreviews } from './workers/enhancer/enhancerPreviews.js';
import type { ImageWorker } from './workers/image/image.js';
import type { ImageTests } from './workers/image/imageTests.js';
import type { SttWorker } from './workers/speech/stt.js';
import type { TtsWorker } from './workers/speech/tts.js';

export type { EndpointStatus };

export interface Service {
  config: Config;
  log: Logger;
  /** The last log lines as the logger wrote them (redacted), for the console. */
  logs: LogTail;
  secrets: SecretStore;
  endpoint: EndpointStore;
  /** The operator's switches for what goes beyond the specification, off by default (CONTRACT section 9). */
  extensions: Extensions;
  /** The Responses API's recent responses, in memory for a while, per API token (responseMemory.ts). */
  responseMemory: ResponseMemory;
  profiles: ProfileStore;
  catalog: Catalog;
  sessions: SessionStore;
  counters: Counters;
  /** The inference listener's last answers (numbers and names, no prompt or answer), for the console. */
  recent: RecentRequests;
  /** The Prometheus metrics of GET /metrics. */
  metrics: Metrics;
  workers: WorkerHooks;
  /** The root actor: reservations, the queue, the workers' load state. */
  supervisor: SupervisorActor;
  scheduler: Scheduler;
  /** Which build each worker runs; a new one on disk unloads it when idle (spec 3.5, 9). */
  builds: BuildWatcher;
  /** The chat worker (spec 3.2): its machine, the llama-server process, the connections of a loaded start. */
  chat: ChatWorker;
  /** The STT worker (spec 3.5): one engine process on the CPU, one recording at a time. */
  stt: SttWorker;
  /** The TTS worker (spec 3.4): espeak-ng on the CPU, ready for further requests once loaded. */
  tts: TtsWorker;
  /** The image worker (spec 3.3): one sd-cli process per image, on every GPU. */
  image: ImageWorker;
  /** The prompt enhancer (spec 4.7): llama-server with the installed enhancer, before an image. */
  enhancer: EnhancerWorker;
  /** The model files in the operator's folders, with facts and forecasts (CONTRACT section 10). */
  models: ModelFiles;
  /** A hub's repositories before a download: files, and a GGUF's forecast from range reads (CONTRACT section 10). */
  modelHub: ModelHub;
  /** Model files pulled from the hub into `<state>/models` (CONTRACT section 10): two at a time, resumed after a cut or a restart. */
  pulls: ModelPulls;
  /** The operator's image test (spec 3.3, 4.7): one job, in RAM only. */
  imageTests: ImageTests;
  /** The prompt enhancer's preview (spec 4.7): the last one, in RAM only. */
  enhancerPreviews: EnhancerPreviews;
  /** The audio memory policy per speech worker kind (spec 3.6). */
  audio: AudioPolicies;
  /** The chat worker's HTTP limits (spec 8). */
  chatLimits: ChatLimits;
  /** The operator's chat test (spec 2.5, 4.7): one job, in RAM only. */
  chatTests: ChatTests;
  /** What `GET /api/v1/events` streams to the console: a snapshot, then the changes. */
  consoleFeed: ConsoleFeed;
  /** The supervisor's child that owns the inference listener (spec 3.1), while the supervisor runs (it spawns it when it starts). */
  listener(): ListenerActor;
  inspection: Inspection;
  /** Every machine definition and every actor of a machine, for the console (always on). */
  charts: ChartFeed;
  /** OS, CPU, RAM, graphics and the state directory's disk, for the console (read at most once a minute). */
  host: HostFacts;
  /** Disk room for uploads: each accepted upload reserves its most until its job folder goes. */
  uploads: UploadRoom;
  /** The prompt enhancers' installs (CONTRACT section 8). */
  enhancers: EnhancerInstalls;
  /** Whether the inference listener takes new requests (the listener machine's `accepting` tag). */
  accepting(): boolean;
  /** The address the admin listener is bound to, once it listens. */
  adminAddress(): { host: string; port: number } | undefined;
  /** The inference listener's bound port (differs from the configured one only for port 0 in tests). */
  inferenceAddress(): { host: string; port: number } | undefined;
  /** running, stopping or stopped, from the listener machine. */
  state(): EndpointStatus['status'];
  status(): Promise<EndpointStatus>;
  /** SIGTERM path: stop accepting, let running answers finish (bounded), unload workers, close. */
  shutdown(): Promise<void>;
}
