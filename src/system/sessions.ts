// Admin sessions (CONTRACT section 3): a random session id in a signed, HttpOnly, SameSite=Strict
// cookie, and a CSRF token per session. Sessions live in memory only: a restart logs the operator
// out. A session lasts SESSION_TTL_MS from its login, whether it is used or not, and its cookie
// says the same (Max-Age and Expires from the login): the browser and the server drop it
// together, and a stolen cookie is worth at most 12 h. A logout or a password change ends it
// sooner; a new login (or a password change, for its caller) opens a new one.
//
// The login throttle makes guessing the password slow. An attempt is counted before its password
// is checked (scrypt takes a while: counted after, a parallel flood would all be checked), and
// taken back when the password was right. Three counts, each against one attack
// (docs/operations.md, The login throttle):
// - per source, where every loopback address is one source (any local process can send from
//   127.0.0.2): one client guessing.
// - per device: a browser that logged in before carries a signed device cookie. While the server
//   knows it (it made it, at a login under the password in force: the cookie carries a mark of
//   that password), its attempts are counted for that device instead of its source, so the
//   operator gets through a block that another local process caused (the device cookie idea of
//   OWASP's "Slow Down Online Guessing Attacks with Device Cookies"). A device the server does not
//   know (never issued, or revoked by a password change) counts against its source, like no
//   cookie at all.
// - globally, every attempt, device or not: many clients guessing together. Past GLOBAL_ATTEMPTS
//   in a window an attempt without a known device waits a short backoff (not a lock: whoever comes
//   between two guesses gets in); past GLOBAL_CEILING no password is checked until the window
//   ends. Attempts without a known device cannot reach the ceiling, so a flood from other clients
//   never locks out the operator's browser; however many device cookies someone holds, all
//   attempts together stay bounded.
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { errors } from '../errors.js';

export const SESSION_COOKIE = 'sd_session';
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;
export const DEVICE_COOKIE = 'sd_device';
export const DEVICE_TTL_MS = 90 * 24 * 60 * 60 * 1000;
export const LOGIN_WINDOW_MS = 60_000;
/** Wrong passwords per source, and per device, in a window. */
export const LOGIN_ATTEMPTS = 10;
/** Wrong passwords from all clients together in a window; beyond, one attempt without a known device per backoff. */
export const GLOBAL_ATTEMPTS = 30;
export const GLOBAL_BACKOFF_MS = 2_000;
/**
 * Wrong passwords from all clients together, known devices included, in a window; beyond, none is
 * checked until the window ends. Attempts without a known device reach at most GLOBAL_ATTEMPTS
 * plus one per backoff; above that the ceiling leaves two devices' budgets, so only guesses with
 * device cookies the server issued can reach it.
 */
export const GLOBAL_CEILING = GLOBAL_ATTEMPTS + LOGIN_WINDOW_MS / GLOBAL_BACKOFF_MS + 2 * LOGIN_ATTEMPTS;

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|::ffff:127\.\d+\.\d+\.\d+)$/i;

/** What a login attempt from this address is counted for: every loopback address is one source. */
export function loginSource(address: string): string {
  if (LOOPBACK.test(address)) return 'loopback';
  return address.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1');
}

/** Who tries: the source address, and the device cookie of an earlier login when the browser has one. */
export interface LoginClient {
  source: string;
  /** The browser's signed device cookie; it counts only while the server knows it (checkPassword asks). */
  device?: string | undefined;
}

/** The mark of a password on a device id: a password change makes every earlier mark wrong. */
const deviceMark = (passwordStamp: string, id: string) => hash('sha256', `${passwordStamp}\0${id}`, 'base64url');

/** A device cookie's value: a random id and the mark of the password its login proved. */
export const DEVICE_VALUE = /^([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

interface Window {
  count: number;
  since: number;
}

const attemptKey = (client: LoginClient) => (client.device === undefined ? `source:${client.source}` : `device:${client.device}`);

/** Whole seconds from now until `at`, at least 1 (a Retry-After). */
const secondsUntil = (at: number, now: number) => Math.max(1, Math.ceil((at - now) / 1000));

export interface Session {
  id: string;
  csrfToken: string;
  createdAt: number;
  /** The password the session was opened with (its hash): a password change ends the session. */
  passwordStamp: string | null;
}

export class SessionStore {
  // Aged from the login only: reading a session never lengthens it (no updateAgeOnGet).
  readonly #sessions = new LRUCache<string, Session>({ max: 1000, ttl: SESSION_TTL_MS });
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

  /** The session, for an open events stream's check of whether it still lasts. */
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

  /**
   * A device for a browser that has just proved the password whose stamp is given: the value of its
   * device cookie (which is signed as well, so only the service makes one).
   */
  static newDevice(passwordStamp: string): string {
    const id = randomBytes(16).toString('base64url');
    return `${id}.${deviceMark(passwordStamp, id)}`;
  }

  /**
   * Whether the server knows a device: made at a login under the password in force. Revoked by
   * every password change, whoever made it (the console, `service-deck set-password`, a hand edit).
   */
  static knowsDevice(device: string, passwordStamp: string | null): boolean {
    const [, id, mark] = DEVICE_VALUE.exec(device) ?? [];
    return id !== undefined && passwordStamp !== null && mark === deviceMark(passwordStamp, id);
  }

  #window(key: string, now: number): Window {
    const current = this.#attempts.get(key);
    return current && now - current.since < LOGIN_WINDOW_MS ? current : { count: 0, since: now };
  }

  /**
   * Counts a login attempt before its password is checked: 0, or the seconds to wait when the
   * client is over a limit (then nothing is counted and the password must not be checked). A
   * `client.device` here is one the server knows: it is counted instead of the source and does
   * not wait the global backoff, but it counts globally like every attempt and stops at the
   * ceiling like every attempt.
   */
  loginAttempt(client: LoginClient): number {
    const now = this.now();
    const key = attemptKey(client);
    const own = this.#window(key, now);
    if (own.count >= LOGIN_ATTEMPTS) return secondsUntil(own.since + LOGIN_WINDOW_MS, now);
    const global = this.#global;
    if (now - global.since >= LOGIN_WINDOW_MS) Object.assign(global, { count: 0, since: now });
    if (global.count >= GLOBAL_CEILING) return secondsUntil(global.since + LOGIN_WINDOW_MS, now);
    if (client.device === undefined && global.count >= GLOBAL_ATTEMPTS && now < global.last + GLOBAL_BACKOFF_MS) {
      return secondsUntil(global.last + GLOBAL_BACKOFF_MS, now);
    }
    global.count += 1;
    global.last = now;
    this.#attempts.set(key, { count: own.count + 1, since: own.since });
    return 0;
  }

  /** The password was right, or was never checked: the attempt counted by loginAttempt is taken back. */
  loginTakenBack(client: LoginClient): void {
    const own = this.#attempts.get(attemptKey(client));
    if (own && own.count > 0) own.count -= 1;
    if (this.#global.count > 0) this.#global.count -= 1;
  }

  /**
   * A login's password check, throttled: the attempt is counted first, then the password checked;
   * a wrong one stays counted, and too many make the client wait (429 too_many_attempts). An
   * attempt whose password was never checked (no password set, too many checks at once) is taken
   * back, as is a right one.
   */
  async checkPassword(secrets: PasswordCheck, client: LoginClient, password: string): Promise<void> {
    // Read before counting: whether the device is known depends on the password in force, which
    // another process (`service-deck set-password`) may have changed.
    await secrets.refresh();
    const known = client.device !== undefined && SessionStore.knowsDevice(client.device, secrets.passwordStamp);
    const counted: LoginClient = known ? client : { source: client.source };
    const blockedFor = this.loginAttempt(counted);
    if (blockedFor > 0) throw errors.tooManyRequests('too_many_attempts', 'Too many wrong passwords: wait and try again.', blockedFor);
    let correct = false;
    try {
      if (!secrets.hasPassword) throw errors.passwordNotSet();
      correct = await secrets.passwordMatches(password);
    } catch (error) {
      this.loginTakenBack(counted);
      throw error;
    }
    if (!correct) throw errors.wrongPassword();
    this.loginTakenBack(counted);
  }
}

/** What a login's password check needs of the secrets store. */
export interface PasswordCheck {
  refresh(): Promise<unknown>;
  readonly hasPassword: boolean;
  passwordMatches(password: string): Promise<boolean>;
  /** The password in force (its hash): the mark a known device carries. */
  readonly passwordStamp: string | null;
}
