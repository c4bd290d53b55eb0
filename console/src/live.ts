// The one event stream the page keeps open while logged in (GET /api/v1/events): the server
// pushes the status, the audio policy, each actor's state, log lines, the two test jobs and the
// model pulls as they change; the page never polls. A dropped stream is reopened after a growing
// pause (1 s to 15 s).
import type { ActorView, ConsoleEvents, LogLineView, RecentRequestView } from '../../src/system/observe/console.types.js';
import { ApiError, api, setCsrfToken, sse } from './api.js';
import { LOG_KEEP, REQUESTS_KEEP, actors, enhancers, requests, passwordSet, audioPolicy, chatTest, connection, imageTest, logs, pulls, resetLive, session, status } from './state.js';

let controller: AbortController | null = null;

function apply(event: string, data: string): void {
  const value = JSON.parse(data) as unknown;
  switch (event) {
    case 'status':
      status.value = value as typeof status.value;
      break;
    case 'audio-policy':
      audioPolicy.value = value as typeof audioPolicy.value;
      break;
    case 'actor': {
      const actor = value as ActorView;
      const next = new Map(actors.value);
      // An actor the service forgot (a queue's expiry timer that ended) leaves the list.
      if (actor.gone) next.delete(actor.id);
      else next.set(actor.id, actor);
      actors.value = next;
      break;
    }
    case 'log': {
      const line = value as LogLineView;
      const current = logs.value;
      // A reconnect sends the recent lines again: keep each sequence number once.
      if (current.length > 0 && line.seq <= current[current.length - 1]!.seq) break;
      logs.value = current.length >= LOG_KEEP ? [...current.slice(current.length - LOG_KEEP + 1), line] : [...current, line];
      break;
    }
    case 'chat-test':
      chatTest.value = (value as { job: typeof chatTest.value }).job;
      break;
    case 'image-test':
      imageTest.value = (value as { job: typeof imageTest.value }).job;
      break;
    case 'enhancers':
      enhancers.value = value as typeof enhancers.value;
      break;
    case 'pulls':
      pulls.value = (value as ConsoleEvents['pulls']).pulls;
      break;
    case 'request': {
      const record = value as RecentRequestView;
      const current = requests.value;
      // A reconnect sends the recent ones again: keep each sequence number once.
      if (current.length > 0 && record.seq <= current[current.length - 1]!.seq) break;
      requests.value = [...current.slice(Math.max(0, current.length - REQUESTS_KEEP + 1)), record];
      break;
    }
    default:
      break;
  }
}

async function follow(signal: AbortSignal): Promise<void> {
  let pause = 1000;
  while (!signal.aborted) {
    connection.value = 'connecting';
    try {
      let first = true;
      for await (const { event, data } of sse('/api/v1/events', signal)) {
        // Each connection starts with a whole snapshot: actors that ended meanwhile are not in it.
        if (first) actors.value = new Map();
        first = false;
        connection.value = 'live';
        pause = 1000;
        apply(event, data);
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status === 401) return;
    }
    if (signal.aborted) return;
    connection.value = 'lost';
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 15_000);
  }
}

export function startLive(): void {
  stopLive();
  controller = new AbortController();
  void follow(controller.signal);
}

export function stopLive(): void {
  controller?.abort();
  controller = null;
  resetLive();
}

/** At page load: a session cookie from before the reload is still good if the service says so. */
export async function resumeSession(): Promise<void> {
  try {
    const answer = await api<{ logged_in: boolean; password_set: boolean; csrfToken?: string }>('GET', '/api/v1/session', undefined, { auth: false });
    passwordSet.value = answer.password_set;
    if (!answer.logged_in || !answer.csrfToken) {
      session.value = 'out';
      return;
    }
    setCsrfToken(answer.csrfToken);
    session.value = 'in';
    startLive();
  } catch {
    session.value = 'out';
  }
}

export async function login(password: string): Promise<void> {
  const { csrfToken } = await api<{ csrfToken: string }>('POST', '/api/v1/session', { password }, { auth: false });
  setCsrfToken(csrfToken);
  session.value = 'in';
  startLive();
}

export async function logout(): Promise<void> {
  try {
    await api('DELETE', '/api/v1/session');
  } finally {
    loggedOut();
  }
}

export function loggedOut(): void {
  setCsrfToken(null);
  stopLive();
  session.value = 'out';
}
