// Admin sessions (CONTRACT section 3): a random session id in a signed, HttpOnly, SameSite=Strict
// cookie, and a CSRF token per session. Sessions live in memory only: a restart logs the operator
// out. Failed logins are counted per client address so that guessing the password is slow.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';

export const SESSION_COOKIE = 'sd_session';
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
const LOGIN_WINDOW_MS = 60_000;
const LOGIN_ATTEMPTS = 10;

export interface Session {
  id: string;
  csrfToken: string;
  createdAt: number;
  /** The password the session was opened with (its hash): a password change ends the session. */
  passwordStamp: string | null;
}

export class SessionStore {
  readonly #sessions = new LRUCache<string, Session>({ max: 1000, ttl: SESSION_TTL_MS, updateAgeOnGet: true });
  readonly #failures = new LRUCache<string, number>({ max: 10_000, ttl: LOGIN_WINDOW_MS });

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

  /** Seconds to wait before the next login attempt from this address, or 0. */
  loginBlockedFor(address: string): number {
    const failures = this.#failures.get(address) ?? 0;
    if (failures < LOGIN_ATTEMPTS) return 0;
    return Math.max(1, Math.ceil(this.#failures.getRemainingTTL(address) / 1000));
  }

  loginFailed(address: string): void {
    const failures = (this.#failures.get(address) ?? 0) + 1;
    this.#failures.set(address, failures, { noUpdateTTL: failures > 1 });
  }

  loginSucceeded(address: string): void {
    this.#failures.delete(address);
  }
}
