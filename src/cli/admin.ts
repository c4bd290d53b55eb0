// The running service of a state directory, as the `service-deck` command reaches it: `admin.json`
// says where its admin listener is, and the command talks to it on loopback through the
// documented admin API (CONTRACT section 3): log in with the operator password, make the calls
// with the session cookie, `X-Service-Deck: 1` and the CSRF token, log out.
import { readAdminRecord, type AdminRecord } from '../store/adminRecord.js';
import { SESSION_COOKIE } from '../system/sessions.js';
import { CliError } from './errors.js';

/** How long one admin call may take (the status probes the GPUs; a start waits up to 30 s). */
const CALL_TIMEOUT_MS = 40_000;
/** How long the check that the listener answers may take. */
const PROBE_TIMEOUT_MS = 5_000;

export type Located =
  | { running: true; record: AdminRecord; url: string }
  /** `note`: why an `admin.json` that is there does not count (its process is gone, nothing answers). */
  | { running: false; note: string | null };

/** The admin listener's URL: a wildcard address is reached on loopback, IPv6 in brackets. */
export function adminUrl(record: Pick<AdminRecord, 'host' | 'port'>): string {
  let host = record.host;
  if (host === '0.0.0.0') host = '127.0.0.1';
  if (host === '::') host = '::1';
  return `http://${host.includes(':') ? `[${host}]` : host}:${record.port}`;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether the service of this state directory runs, and where its admin API answers. */
export async function locateService(stateDir: string): Promise<Located> {
  const record = await readAdminRecord(stateDir);
  if (!record) return { running: false, note: null };
  if (!processAlive(record.pid)) return { running: false, note: `admin.json names process ${record.pid}, which has ended (a service that was killed)` };
  const url = adminUrl(record);
  try {
    await fetch(`${url}/api/v1/session`, { headers: { 'x-service-deck': '1' }, signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message;
    return { running: false, note: `admin.json names process ${record.pid}, but nothing answers at ${url} (${cause})` };
  }
  return { running: true, record, url };
}

/** A refused admin call: the HTTP status and the OpenAI error body's code and message. */
export class AdminApiError extends CliError {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
  ) {
    super(message);
  }
}

/** fetch, with a network failure or a timeout said in words instead of a stack trace. */
async function send(url: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, { ...init, signal: AbortSignal.timeout(CALL_TIMEOUT_MS) });
  } catch (error) {
    if ((error as Error).name === 'TimeoutError') throw new CliError(`${url} did not answer within ${CALL_TIMEOUT_MS / 1000} s`);
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    throw new CliError(`cannot reach ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`);
  }
}

/** The refusal in words: the service's message, then the status, code and field it names. */
async function refusal(response: Response, what: string): Promise<AdminApiError> {
  let body: { error?: { message?: string; code?: string | null; param?: string | null } } = {};
  try {
    body = (await response.json()) as typeof body;
  } catch {
    // Not the OpenAI error body: the status says enough.
  }
  const code = body.error?.code ?? null;
  const param = body.error?.param ? `, field ${body.error.param}` : '';
  const message = `${what}: ${body.error?.message ?? 'no error body'} (HTTP ${response.status}${code ? ` ${code}` : ''}${param})`;
  return new AdminApiError(response.status, code, message);
}

export class AdminSession {
  private constructor(
    readonly url: string,
    readonly cookie: string,
    readonly csrf: string,
  ) {}

  static async open(url: string, password: string): Promise<AdminSession> {
    const response = await send(`${url}/api/v1/session`, {
      method: 'POST',
      headers: { 'x-service-deck': '1', 'content-type': 'application/json' },
      body: JSON.stringify({ password }),
    });
    if (response.status !== 200) throw await refusal(response, 'login refused');
    const cookie = response.headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`))?.split(';')[0];
    const { csrfToken } = (await response.json()) as { csrfToken: string };
    if (!cookie) throw new CliError(`login at ${url} gave no session cookie`);
    return new AdminSession(url, cookie, csrfToken);
  }

  /** One call; an answer other than 2xx is an AdminApiError with the service's message. */
  async call<T>(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { 'x-service-deck': '1', cookie: this.cookie };
    if (method !== 'GET') headers['x-csrf-token'] = this.csrf;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const response = await send(`${this.url}${path}`, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    if (!response.ok) throw await refusal(response, `${method} ${path}`);
    return (response.status === 204 ? undefined : await response.json()) as T;
  }

  /** Logs out; a failure here changes nothing for the operator (the session expires on its own). */
  async close(): Promise<void> {
    await this.call('DELETE', '/api/v1/session').catch(() => undefined);
  }
}

/** Logs in, runs `work` with the session, and logs out whatever happened. */
export async function withAdminSession<T>(url: string, password: string, work: (session: AdminSession) => Promise<T>): Promise<T> {
  const session = await AdminSession.open(url, password);
  try {
    return await work(session);
  } finally {
    await session.close();
  }
}
