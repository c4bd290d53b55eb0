// The JSON the admin API answers, typed by the server's own declarations from their one home,
// src/system/observe/console.types.ts (type-only imports: nothing of the server is bundled). When a server shape changes, the page's type check says so.
import type {
  AudioPolicyView,
  ChatTestJob,
  EndpointStatus,
  EnhancerPreview,
  HubFilesView,
  ImageTestJob,
  InstallView,
  RecentRequestView,
  SupervisedWorker,
  WorkerStderrView,
} from '../../src/system/observe/console.types.js';

export type { SupervisedWorker, EndpointStatus, AudioPolicyView, ChatTestJob, ImageTestJob, HubFilesView };
export type ProfileView = EndpointStatus['profiles'][number];
export type WorkerView = EndpointStatus['workers'][number];
export type Category = ProfileView['category'];
export type { InstallView, EnhancerPreview, RecentRequestView, WorkerStderrView };
export type { InstallPlan } from '../../src/system/observe/console.types.js';
/** GET /api/v1/prompt-enhancers and the `enhancers` event: each task's install and the last preview. */
export interface EnhancersView {
  t2i: InstallView;
  i2i: InstallView;
  preview: EnhancerPreview | null;
}
/** POST /api/v1/prompt-enhancers/preview answers the preview without its bookkeeping. */
export type PreviewAnswer = Pick<EnhancerPreview, 'original' | 'suggestion' | 'wh_ratio' | 'task'>;
export type { ModelFileView, ModelFilesView, HubForecastView, ModelFacts, ModelForecast } from '../../src/system/observe/console.types.js';
export type HubFileView = HubFilesView['files'][number];
/** One download of a hub file into the model folder (`GET /api/v1/model-pulls`), newest first. */
export interface PullView {
  id: string;
  repo: string;
  revision: string;
  path: string;
  state: 'downloading' | 'done' | 'failed' | 'cancelled';
  bytes_done: number;
  bytes_total: number | null;
  error: string | null;
  /** The absolute path of the file once done. */
  file: string | null;
  rate_bytes_per_s: number | null;
  /** Queued behind the pulls that hold the download slots. */
  waiting: boolean;
  sha256: string | null;
  created_at: string;
  updated_at: string;
}
