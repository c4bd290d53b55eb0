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
export type { ModelFileView, ModelFilesView, HubForecastView, ModelFacts, ModelForecast, PullView } from '../../src/system/observe/console.types.js';
export type HubFileView = HubFilesView['files'][number];
