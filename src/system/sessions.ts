// Admin sessions (CONTRACT section 3): a random session id in a signed, HttpOnly, SameSite=Strict
// cookie, and a CSRF token per session. Sessions live in memory only: a restart logs the operator
// out.
//
// The login throttle makes guessing the password slow. An attempt is counted before its password
// is checked (scrypt takes a while: counted after, a parallel flood would all be checked), and
// taken back when the password was right. It is counted per source, where every loopback address
// is one source (any local process can send from 127.0.0.2), and globally, where too many wrong
// passwords from everywhere make each further attempt wait a moment (a short backoff, not a lock:
// whoever comes between two guesses gets in). A browser that logged in before carries a signed
// device cookie; its attempts are counted for that device alone, so the operator gets through a
// block that another local process or the global flood caused (the device cookie idea of OWASP's
// "Slow Down Online Guessing Attacks with Device Cookies").
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { errors } from '../errors.js';

export const SESSION_COOKIE = 'sd_session';
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
export const DEVICE_COOKIE = 'sd_device';
export const DEVICE_TTL_MS = 90 * 24 * 60 * 60 * 1000;
export const LOGIN_WINDOW_MS = 60_000;
/** Wrong passwords per source, and per device, in a window. */
export const LOGIN_ATTEMPTS = 10;
/** Wrong passwords from all sources together in a window; beyond, one attempt per backoff. */
export const GLOBAL_ATTEMPTS = 30;
export const GLOBAL_BACKOFF_MS = 2_000;

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|::ffff:127\.\d+\.\d+\.\d+)$/i;

/** What a login attempt from this address is counted for: every loopback address is one source. */
export function loginSource(address: string): string {
  if (LOOPBACK.test(address)) return 'loopback';
  return address.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1');
}

/** Who tries: the source address, and the device id of an earlier login when the browser has one. */
export interface LoginClient {
  source: string;
  device?: string | undefined;
}

interface Window {
  count: number;
  since: number;
}

const attemptKey = (client: LoginClient) => (client.device === undefined ? `source:${client.source}` : `device:${client.device}`);

export interface Session {
  id: string;
  csrfToken: string;
  createdAt: number;
  /** The password the session was opened with (its hash): a password change ends the session. */
  passwordStamp: string | null;
}

export class SessionStore {
  readonly #sessions = new LRUCache<string, Session>({ max: 1000, ttl: SESSION_TTL_MS, updateAgeOnGet: true });
  readonly #attempts = new LRUCache<string, Window>({ max: 10_000 });
  readonly #global: Window & { last: number } = { count: 0, since: 0, last: 0 };

  constructor(private readonly now: () => number = Date.now) {}

  create(passwordStamp: string | null): Session {
    const session = {
      id: randomBytes(32).toString('base64url'),
      csrfToken: randomBytes(32).toString('base64url'),
      createdAt: Date.now(),
      passwordStamp,
    };
    this.#sessions.set(session.id, session);
    return session;
  }

  get(id: string | undefined): Session | undefined {
    return id ? this.#sessions.get(id) : undefined;
  }

  /** The session without counting this as use (an open events stream must not keep it alive). */
  peek(id: string | undefined): Session | undefined {
    return id ? this.#sessions.peek(id) : undefined;
  }

  delete(id: string | undefined): void {
    if (id) this.#sessions.delete(id);
  }

  static csrfMatches(session: Session, presented: string | undefined): boolean {
    if (!presented) return false;
    const a = Buffer.from(session.csrfToken);
    const b = Buffer.from(presented);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** A device id for a browser that has just logged in (it goes into the device cookie). */
  static newDevice(): string {
    return randomBytes(16).toString('base64url');
  }

  #window(key: string, now: number): Window {
    const current = this.#attempts.get(key);
    return current && now - current.since < LOGIN_WINDOW_MS ? current : { count: 0, since: now };
  }

  /**
   * Counts a login attempt before its password is checked: 0, or the seconds to wait when the
   * client is over its limit (then nothing is counted and the password must not be checked).
   */
  loginAttempt(client: LoginClient): number {
    const now = this.now();
    const key = attemptKey(client);
    const own = this.#window(key, now);
    if (own.count >= LOGIN_ATTEMPTS) return Math.max(1, Math.ceil((own.since + LOGIN_WINDOW_MS - now) / 1000));
    if (client.device === undefined) {
      const global = this.#global;
      if (now - global.since >= LOGIN_WINDOW_MS) Object.assign(global, { count: 0, since: now });
      if (global.count >= GLOBAL_ATTEMPTS && now < global.last + GLOBAL_BACKOFF_MS) return Math.max(1, Math.ceil((global.last + GLOBAL_BACKOFF_MS - now) / 1000));
      global.count += 1;
      global.last = now;
    }
    this.#attempts.set(key, { count: own.count + 1, since: own.since });
    return 0;
  }

  /** The password was right, or was never checked: the attempt counted by loginAttempt is taken back. */
  loginTakenBack(client: LoginClient): void {
    const own = this.#attempts.get(attemptKey(client));
    if (own && own.count > 0) own.count -= 1;
    if (client.device === undefined && this.#global.count > 0) this.#global.count -= 1;
  }

  /**
   * A login's password check, throttled: the attempt is counted first, then the password checked;
   * a wrong one stays counted, and too many make the client wait (429 too_many_attempts). An
   * attempt whose password was never checked (no password set, too many checks at once) is taken
   * back, as is a right one.
   */
  async checkPassword(secrets: PasswordCheck, client: LoginClient, password: string): Promise<void> {
    const blockedFor = this.loginAttempt(client);
    if (blockedFor > 0) throw errors.tooManyRequests('too_many_attempts', 'Too many wrong passwords: wait and try again.', blockedFor);
    let correct = false;
    try {
      await secrets.refresh();
      if (!secrets.hasPassword) throw errors.passwordNotSet();
      correct = await secrets.passwordMatches(password);
    } catch (error) {
      this.loginTakenBack(client);
      throw error;
    }
    if (!correct) throw errors.wrongPassword();
    this.loginTakenBack(client);
  }
}

/** What a login's password check needs of the secrets store. */
export interface PasswordCheck {
  refresh(): Promise<unknown>;
  readonly hasPassword: boolean;
  passwordMatches(password: string): Promise<boolean>;
}
