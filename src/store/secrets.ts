// `secrets.json` (CONTRACT sections 1-3, spec section 5): the operator password as a scrypt hash,
// the API token as a SHA-256 hash, and the key that signs session cookies. No secret is stored in
// plain text. The file is re-read when another process (`service-deck rotate-token`) replaced it,
// so a rotation takes effect for the next request.
import { hash, randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { errors } from '../errors.js';
import { fileStamp, readJsonFile, StateFileError, WriteQueue, writeJsonAtomic } from './files.js';

const scryptAsync = promisify(scrypt) as (
  password: string,
  salt: Buffer,
  keylen: number,
  options: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>;

const SCRYPT = { N: 2 ** 15, r: 8, p: 1, keylen: 32 } as const;
const SCRYPT_MAXMEM = 128 * SCRYPT.N * SCRYPT.r * 2;
export const MIN_PASSWORD_LENGTH = 8;
/**
 * The shortest API token the first start takes from SERVICE_DECK_API_TOKEN: a shorter one, such as
 * a single letter, is refused. A generated token has 46 characters, 256 random bits.
 */
export const MIN_TOKEN_LENGTH = 32;
const TOKEN_PREFIX = 'sd-';
/** A scrape token reads as one: it opens only GET /metrics on the admin listener. */
const METRICS_TOKEN_PREFIX = 'sdm-';

/** What a bearer token may not hold beyond whitespace: anything but printable ASCII (`!` to `~`), which a header value cannot carry as it is. */
const NOT_HEADER_TEXT = /[^\x21-\x7e]/u;
/** Control characters (C0, DEL, C1): no login field takes them. */
const CONTROL = /\p{Cc}/u;

/** A character as a message names it: its code point, and itself when it is visible. */
function characterName(char: string): string {
  const code = `U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  return CONTROL.test(char) ? `the control character ${code}` : `${JSON.stringify(char)} (${code})`;
}

/** A password or token given at first start that is too weak to store, or unusable: the message says what to do. */
export class WeakSecretError extends Error {
  override name = 'WeakSecretError';
}

const secretsSchema = z.looseObject({
  passwordHash: z.string().regex(/^scrypt\$\d+\$\d+\$\d+\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/).nullable(),
  tokenHash: z.string().regex(/^[0-9a-f]{64}$/).nullable(),
  /** The scrape token of GET /metrics, made by `service-deck rotate-metrics-token`; absent until then. */
  metricsTokenHash: z.string().regex(/^[0-9a-f]{64}$/).nullable().optional(),
  sessionKey: z.string().min(32),
});
type Secrets = z.output<typeof secretsSchema>;

/** One-shot: without a Hash object per call (the bearer check runs it on every request). */
export function sha256(text: string): Buffer {
  return hash('sha256', text, 'buffer');
}

/** The stored digests as bytes, decoded once per stored value instead of on every request. */
const storedDigests = new Map<string, Buffer>();

function storedDigest(hex: string): Buffer {
  let digest = storedDigests.get(hex);
  if (digest === undefined) {
    // Only the API and scrape tokens in force are ever kept; rotations replace them.
    if (storedDigests.size >= 4) storedDigests.clear();
    digest = Buffer.from(hex, 'hex');
    storedDigests.set(hex, digest);
  }
  return digest;
}

function hashMatches(presented: string, stored: string | null): boolean {
  if (stored === null) return false;
  return timingSafeEqual(sha256(presented), storedDigest(stored));
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptAsync(password, salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, maxmem: SCRYPT_MAXMEM });
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64'), hash.toString('base64')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [, n, r, p, salt, hash] = stored.split('$');
  if (!n || !r || !p || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scryptAsync(password, Buffer.from(salt, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: 128 * Number(n) * Number(r) * 2,
  });
  return timingSafeEqual(actual, expected);
}

/**
 * Password hashing is slow on purpose: each scrypt holds a libuv thread for about 100 ms. The
 * thread pool (4 threads) also serves the file reads of every request (the bearer check reads the
 * stamp of secrets.json), so a flood of logins must not fill it: at most `concurrency` hashes run
 * at once and `queue` wait; a further one is refused with 429 at once instead of queueing.
 */
export class HashGate {
  #running = 0;
  /** Tasks inside `task()` now, and the most there were at once (what a test of a flood reads). */
  #hashing = 0;
  #most = 0;
  readonly #waiting: Array<() => void> = [];

  constructor(
    readonly concurrency = 2,
    readonly queue = 8,
  ) {}

  get running(): number {
    return this.#running;
  }

  /** The most tasks that ran at once since the gate was made. */
  get most(): number {
    return this.#most;
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#running < this.concurrency) this.#running += 1;
    else if (this.#waiting.length < this.queue) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else throw errors.tooManyRequests('login_busy', 'Too many password checks at once: try again in a second.', 1);
    this.#hashing += 1;
    this.#most = Math.max(this.#most, this.#hashing);
    try {
      return await task();
    } finally {
      this.#hashing -= 1;
      // A waiting task takes over this one's place; otherwise the place is free.
      const next = this.#waiting.shift();
      if (next) next();
      else this.#running -= 1;
    }
  }
}

export function newApiToken(): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url');
}

/** A readable random password for unattended set-ups (the demo prints it once). */
export function randomPassword(): string {
  return randomBytes(12).toString('base64url');
}

export class SecretStore {
  readonly file: string;
  #secrets: Secrets;
  #stamp: string | undefined;
  readonly #writes = new WriteQueue();
  readonly #hashing = new HashGate();

  private constructor(file: string, secrets: Secrets, stamp: string | undefined) {
    this.file = file;
    this.#secrets = secrets;
    this.#stamp = stamp;
  }

  static async #read(file: string): Promise<Secrets | undefined> {
    const raw = await readJsonFile(file);
    if (raw === undefined) return undefined;
    const parsed = secretsSchema.safeParse(raw);
    if (!parsed.success) throw new StateFileError(file, `has unexpected content: ${z.prettifyError(parsed.error)}`);
    return parsed.data;
  }

  /**
   * Opens `secrets.json`; on first start the given password and token (from the environment)
   * become the stored ones. A secret that is to be generated and shown is not made here: the
   * first start makes it once it can show it (src/firstSecrets.ts).
   */
  static async open(dir: string, first: { password?: string; token?: string } = {}): Promise<{ store: SecretStore }> {
    const file = path.join(dir, 'secrets.json');
    const existing = await SecretStore.#read(file);
    const secrets: Secrets = existing ?? { passwordHash: null, tokenHash: null, sessionKey: randomBytes(32).toString('base64url') };
    let changed = existing === undefined;
    if (secrets.passwordHash === null && first.password !== undefined && first.password !== '') {
      if (first.password.length < MIN_PASSWORD_LENGTH) {
        throw new WeakSecretError(`SERVICE_DECK_ADMIN_PASSWORD must have at least ${MIN_PASSWORD_LENGTH} characters`);
      }
      const control = CONTROL.exec(first.password);
      if (control) {
        throw new WeakSecretError(
          `SERVICE_DECK_ADMIN_PASSWORD contains ${characterName(control[0])} at character ${control.index + 1} of ${first.password.length}: no one could type it into the console's login field; remove it (a carriage return or newline copied from a file is the usual cause), or leave the variable unset and run \`service-deck set-password\``,
        );
      }
      secrets.passwordHash = await hashPassword(first.password);
      changed = true;
    }
    if (secrets.tokenHash === null) {
      const token = first.token;
      if (token !== undefined && token !== '') {
        const space = /\s/.exec(token);
        if (space) {
          throw new WeakSecretError(
            `SERVICE_DECK_API_TOKEN contains whitespace (${JSON.stringify(space[0])} at character ${space.index + 1} of ${token.length}): a bearer token is one word, so no client could ever send this one; remove it (a trailing newline or space copied from a file is the usual cause), or leave the variable unset and a token is generated and shown once`,
          );
        }
        const unsendable = NOT_HEADER_TEXT.exec(token);
        if (unsendable) {
          throw new WeakSecretError(
            `SERVICE_DECK_API_TOKEN contains ${characterName(unsendable[0])} at character ${unsendable.index + 1} of ${token.length}: a bearer token travels in an HTTP header, which carries printable ASCII only (letters, digits and the punctuation from ! to ~), so no client could ever send this one; use such characters only, or leave the variable unset and a token is generated and shown once`,
          );
        }
        if (token.length < MIN_TOKEN_LENGTH) {
          throw new WeakSecretError(
            `SERVICE_DECK_API_TOKEN must have at least ${MIN_TOKEN_LENGTH} characters, it has ${token.length}: use a long random value (e.g. \`openssl rand -base64 33\`), or leave it unset and a token is generated and shown once`,
          );
        }
        secrets.tokenHash = sha256(token).toString('hex');
        changed = true;
      }
    }
    if (changed) await writeJsonAtomic(file, secrets);
    return { store: new SecretStore(file, secrets, fileStamp(file)) };
  }

  /**
   * Picks up a replacement written by another process (the CLI). A damaged or removed file keeps
   * the last good secrets in force; the problem is kept in `problem` (shown in the log and status).
   */
  async refresh(): Promise<void> {
    let stamp: string | undefined;
    let next: Secrets | undefined;
    try {
      stamp = fileStamp(this.file);
      if (stamp === this.#stamp) return;
      next = await SecretStore.#read(this.file);
    } catch (error) {
      this.problem = (error as Error).message;
      return;
    }
    this.#stamp = stamp;
    if (next === undefined) {
      this.problem = `${this.file} was removed: the secrets read at start stay in force`;
      return;
    }
    this.#secrets = next;
    this.problem = undefined;
  }

  /**
   * Whether the file on disk is still the one in force (its stamp is unchanged), checked without
   * a promise: each API request asks, and only a changed file needs `refresh()`.
   * False also when the file cannot be stat'ed: refresh() then records the problem.
   */
  unchanged(): boolean {
    try {
      return fileStamp(this.file) === this.#stamp;
    } catch {
      return false;
    }
  }

  /** Why the file on disk is not in force, if it is not. */
  problem: string | undefined;

  /**
   * Changes whenever the password changes (here or through `service-deck set-password`): a
   * session or a device cookie made under another password is no longer valid.
   */
  get passwordStamp(): string | null {
    return this.#secrets.passwordHash;
  }

  get hasPassword(): boolean {
    return this.#secrets.passwordHash !== null;
  }

  get hasToken(): boolean {
    return this.#secrets.tokenHash !== null;
  }

  get sessionKey(): string {
    return this.#secrets.sessionKey;
  }

  /** Constant-time check of a presented bearer token against the stored SHA-256 hash. */
  tokenMatches(presented: string): boolean {
    return hashMatches(presented, this.#secrets.tokenHash);
  }

  /** The same check for the scrape token of GET /metrics; the API token never matches it. */
  metricsTokenMatches(presented: string): boolean {
    return hashMatches(presented, this.#secrets.metricsTokenHash ?? null);
  }

  /** The most password hashes that ran at once since the start (the gate's bound holds it). */
  get mostHashesAtOnce(): number {
    return this.#hashing.most;
  }

  async passwordMatches(password: string): Promise<boolean> {
    const stored = this.#secrets.passwordHash;
    if (stored === null) return false;
    return this.#hashing.run(() => verifyPassword(password, stored));
  }

  #save(patch: Partial<Secrets>): Promise<void> {
    return this.#writes.run(async () => {
      await this.refresh();
      const next = { ...this.#secrets, ...patch };
      await writeJsonAtomic(this.file, next);
      this.#secrets = next;
      this.#stamp = fileStamp(this.file);
    });
  }

  async setPassword(password: string): Promise<void> {
    if (password.length < MIN_PASSWORD_LENGTH) throw new Error(`the password needs at least ${MIN_PASSWORD_LENGTH} characters`);
    await this.#save({ passwordHash: await this.#hashing.run(() => hashPassword(password)) });
  }

  /** Issues a new scrape token for GET /metrics; only its hash is kept. The old one stops working at once. */
  async rotateMetricsToken(): Promise<string> {
    const token = METRICS_TOKEN_PREFIX + randomBytes(32).toString('base64url');
    await this.#save({ metricsTokenHash: sha256(token).toString('hex') });
    return token;
  }

  /** Issues a new API token; only its hash is kept. The old token stops working at once. */
  async rotateToken(): Promise<string> {
    const token = newApiToken();
    await this.#save({ tokenHash: sha256(token).toString('hex') });
    return token;
  }
}
