// The page's state, as signals: what the service pushed last on the events stream (status, audio
// policy, actors, log lines, the two test jobs, the model pulls) and the session. Views read these;
// only the event stream (live.ts) and the actions write them. Nothing here is stored: a reload
// starts empty, and the chat test's history lives only in this page's memory (spec 4.7).
import { signal } from '@preact/signals';
import type { ActorView, LogLineView, RecentRequestView } from '../../src/system/observe/console.types.js';
import type { AudioPolicyView, ChatTestJob, EndpointStatus, EnhancersView, ImageTestJob, PullView } from './types.js';

export type SessionState = 'checking' | 'out' | 'in';
export const session = signal<SessionState>('checking');
/** False until an operator password exists (`service-deck set-password`): the login says so. */
export const passwordSet = signal(true);

export type Connection = 'connecting' | 'live' | 'lost';
export const connection = signal<Connection>('connecting');

export const status = signal<EndpointStatus | null>(null);
export const audioPolicy = signal<AudioPolicyView | null>(null);
export const actors = signal<ReadonlyMap<string, ActorView>>(new Map());
export const logs = signal<readonly LogLineView[]>([]);
export const chatTest = signal<ChatTestJob | null>(null);
export const imageTest = signal<(ImageTestJob & { has_image?: boolean }) | null>(null);
export const enhancers = signal<EnhancersView | null>(null);
/** The model pulls, newest first, as the service pushed them last; null until the first push. */
export const pulls = signal<readonly PullView[] | null>(null);
/** The inference listener's recent answers, oldest first (the service keeps 200). */
export const requests = signal<readonly RecentRequestView[]>([]);
export const REQUESTS_KEEP = 200;

/** The last lines the page keeps (the service keeps 500). */
export const LOG_KEEP = 1000;

/** Short messages for the operator (a 409 explained, a saved profile), newest last. */
export interface Notice {
  id: number;
  kind: 'error' | 'info';
  text: string;
}
export const notices = signal<readonly Notice[]>([]);
let noticeId = 0;
export function notify(kind: Notice['kind'], text: string): void {
  const id = ++noticeId;
  notices.value = [...notices.value.slice(-4), { id, kind, text }];
  setTimeout(() => dismiss(id), kind === 'error' ? 12_000 : 5_000);
}
export function dismiss(id: number): void {
  notices.value = notices.value.filter((n) => n.id !== id);
}

export function resetLive(): void {
  status.value = null;
  audioPolicy.value = null;
  actors.value = new Map();
  logs.value = [];
  chatTest.value = null;
  imageTest.value = null;
  enhancers.value = null;
  pulls.value = null;
  requests.value = [];
}
