// Authentication (spec section 5, CONTRACT section 3). The inference listener accepts only the
// bearer token, compared in constant time and re-read when rotated; it never looks at cookies.
// The admin listener accepts only its session cookie with `X-Service-Deck: 1` and, on every
// state-changing call, the session's CSRF token; it never looks at the bearer token.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { SecretStore } from '../store/secrets.js';
import { SESSION_COOKIE, SessionStore, type Session } from '../system/sessions.js';
import { errors, type ApiError } from '../errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    adminSession?: Session;
  }
}

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/** The bearer token a request presents (on the inference listener, the one bearerAuth accepted). */
export function bearerToken(request: FastifyRequest): string | undefined {
  return BEARER.exec(request.headers.authorization ?? '')?.[1];
}

/**
 * The inference listener's token check: undefined when the presented token is the one in force,
 * else the 401. The token file is stat'ed on every request, so a rotation by another process
 * takes effect at once; only when it changed is the answer a promise (the file is read again).
 * Synchronous otherwise: no promise on the hot path.
 */
export function bearerAuth(secrets: SecretStore): (request: FastifyRequest) => ApiError | undefined | Promise<ApiError | undefined> {
  return (request) => {
    const presented = bearerToken(request);
    if (!presented) return errors.invalidApiKey();
    const verdict = () => (secrets.tokenMatches(presented) ? undefined : errors.invalidApiKey('Invalid API token.'));
    return secrets.unchanged() ? verdict() : secrets.refresh().then(verdict);
  };
}

const STATE_CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Reads the signed session cookie; undefined when absent, forged or expired. */
export function sessionFromCookie(request: FastifyRequest, sessions: SessionStore): Session | undefined {
  const raw = request.cookies[SESSION_COOKIE];
  if (!raw) return undefined;
  const unsigned = request.unsignCookie(raw);
  return unsigned.valid && unsigned.value ? sessions.get(unsigned.value) : undefined;
}

/** The session of the cookie while it is valid: not expired, and no password change since its login. */
export function currentSession(request: FastifyRequest, sessions: SessionStore, secrets: SecretStore): Session | undefined {
  const session = sessionFromCookie(request, sessions);
  return session && session.passwordStamp === secrets.passwordStamp ? session : undefined;
}

export function requireAdminHeader(request: FastifyRequest): void {
  if (request.headers['x-service-deck'] !== '1') {
    throw errors.forbidden('header_required', 'Admin API calls need the header X-Service-Deck: 1.');
  }
}

/** The guard of every /api/v1 route except the login itself. */
export function adminAuth({ sessions, secrets }: { sessions: SessionStore; secrets: SecretStore }) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    requireAdminHeader(request);
    await secrets.refresh();
    const session = currentSession(request, sessions, secrets);
    if (!session) throw errors.notLoggedIn();
    if (STATE_CHANGING.has(request.method)) {
      const presented = request.headers['x-csrf-token'];
      if (!SessionStore.csrfMatches(session, typeof presented === 'string' ? presented : undefined)) {
        throw errors.forbidden('csrf_failed', 'Missing or wrong X-CSRF-Token: use the csrfToken from the login reply.');
      }
    }
    request.adminSession = session;
  };
}

/**
 * The guard of GET /metrics: the scrape token as a bearer (`service-deck
 * rotate-metrics-token`), or an operator's session cookie. The API token is not a scrape token:
 * it is refused like any wrong one.
 */
export function metricsAuth({ sessions, secrets }: { sessions: SessionStore; secrets: SecretStore }) {
  return async (request: FastifyRequest): Promise<void> => {
    await secrets.refresh();
    const authorization = request.headers.authorization;
    if (authorization !== undefined) {
      const presented = BEARER.exec(authorization)?.[1];
      if (presented && secrets.metricsTokenMatches(presented)) return;
      throw errors.invalidApiKey('Invalid scrape token: send the token of `service-deck rotate-metrics-token` as the bearer.');
    }
    if (!currentSession(request, sessions, secrets)) {
      throw errors.invalidApiKey('GET /metrics needs the scrape token (`service-deck rotate-metrics-token`) as the bearer, or an admin session.');
    }
  };
}
