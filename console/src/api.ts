// The page's only way to the service: the documented admin API on its own origin, with the
// session cookie (set by the login, HttpOnly), the header X-Service-Deck: 1 on every call and the
// session's CSRF token on every state-changing call. The page never sees the API token, except
// once, when the operator rotates it.

/** An error answer of the admin API (the OpenAI error body), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

let csrfToken: string | null = null;
/** Called when the service says the session is gone (401): the page shows the login again. */
let onLoggedOut: () => void = () => {};

export function setCsrfToken(token: string | null): void {
  csrfToken = token;
}
export function onSessionLost(handler: () => void): void {
  onLoggedOut = handler;
}

const STATE_CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export function headers(method: string, extra: Record<string, string> = {}): Record<string, string> {
  const out: Record<string, string> = { 'X-Service-Deck': '1', ...extra };
  if (STATE_CHANGING.has(method) && csrfToken) out['X-CSRF-Token'] = csrfToken;
  return out;
}

async function errorOf(response: Response): Promise<ApiError> {
  const text = await response.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: { message?: string; code?: string | null; param?: string | null } };
    if (body.error?.message) return new ApiError(response.status, body.error.message, body.error.code ?? null, body.error.param ?? null);
  } catch {
    // not JSON: fall through
  }
  return new ApiError(response.status, `${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`);
}

/** One admin call, answered as it came: a JSON body is sent as JSON, a form as multipart. */
export async function request(method: string, path: string, body?: unknown, init: { signal?: AbortSignal; auth?: boolean } = {}): Promise<Response> {
  const form = body instanceof FormData;
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(method, body === undefined || form ? {} : { 'Content-Type': 'application/json' }),
      body: body === undefined ? null : form ? body : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
      ...(init.signal ? { signal: init.signal } : {}),
    });
  } catch (error) {
    if ((error as Error).name === 'AbortError') throw error;
    throw new ApiError(0, `The service did not answer: ${(error as Error).message}`);
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401 && init.auth !== false) onLoggedOut();
    throw error;
  }
  return response;
}

/** One admin call; resolves with the parsed JSON (undefined for 204), rejects with an ApiError. */
export async function api<T = unknown>(method: string, path: string, body?: unknown, init: { signal?: AbortSignal; auth?: boolean } = {}): Promise<T> {
  const response = await request(method, path, body, init);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

export interface SseEvent {
  event: string;
  data: string;
}

/**
 * Reads a server-sent event stream with fetch (EventSource cannot send the admin header): yields
 * each event as it arrives until the stream ends or the signal aborts.
 */
export async function* sse(path: string, signal: AbortSignal): AsyncGenerator<SseEvent> {
  const response = await fetch(path, { headers: headers('GET', { Accept: 'text/event-stream' }), credentials: 'same-origin', cache: 'no-store', signal });
  if (!response.ok || !response.body) {
    const error = await errorOf(response);
    if (response.status === 401) onLoggedOut();
    throw error;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += value;
    for (;;) {
      const end = pending.search(/\r?\n\r?\n/);
      if (end < 0) break;
      const block = pending.slice(0, end);
      pending = pending.slice(end).replace(/^\r?\n\r?\n/, '');
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const content = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') event = content;
        else if (field === 'data') data.push(content);
      }
      if (data.length > 0) yield { event, data: data.join('\n') };
    }
  }
}

export const message = (error: unknown): string => (error instanceof Error ? error.message : String(error));
