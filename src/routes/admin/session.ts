// CONTRACT section 3: login, logout, token rotation and the password change on the admin listener.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Service } from '../../service.js';
import { DEVICE_COOKIE, DEVICE_TTL_MS, DEVICE_VALUE, loginSource, SESSION_COOKIE, SESSION_TTL_MS, SessionStore } from '../../system/sessions.js';
import { MIN_PASSWORD_LENGTH } from '../../store/secrets.js';
import { adminAuth, currentSession, requireAdminHeader, sessionFromCookie } from '../auth.js';
import { overTls } from '../host.js';

export const adminSessionRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  const { sessions, secrets } = service;

  /** The throttled password check (src/system/sessions.ts); `device` is the browser's device cookie, read only by the login itself. */
  const checkPassword = (request: FastifyRequest, password: string, device?: string) => sessions.checkPassword(secrets, { source: loginSource(request.ip), device }, password);

  /** The browser's device, if it carries a validly signed device cookie (whether the server still knows it is the throttle's question). */
  const deviceOf = (request: FastifyRequest): string | undefined => {
    const raw = request.cookies[DEVICE_COOKIE];
    const unsigned = raw ? request.unsignCookie(raw) : undefined;
    return unsigned?.valid && unsigned.value && DEVICE_VALUE.test(unsigned.value) ? unsigned.value : undefined;
  };

  /**
   * A new session under the current password in place of the request's own: its cookie and CSRF
   * token. The cookie lasts as long as the session does, from this login (Max-Age, and Expires for
   * clients that read only that one).
   */
  const openSession = (request: FastifyRequest, reply: FastifyReply) => {
    sessions.delete(sessionFromCookie(request, sessions)?.id);
    const session = sessions.create(secrets.passwordStamp);
    reply.setCookie(SESSION_COOKIE, session.id, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/',
      signed: true,
      maxAge: SESSION_TTL_MS / 1000,
      expires: new Date(session.createdAt + SESSION_TTL_MS),
      // Behind a TLS proxy the browser must never send the cookie over plain HTTP.
      secure: overTls(request, service.config.http.trustProxy),
    });
    return { csrfToken: session.csrfToken };
  };

  /**
   * The device cookie of a browser that has just proved the password: its own device while the
   * server knows it, else a new one under the password in force (a revoked one is not revived).
   */
  const keepDevice = (request: FastifyRequest, reply: FastifyReply, device?: string) => {
    const stamp = secrets.passwordStamp;
    if (stamp === null) return;
    const kept = device !== undefined && SessionStore.knowsDevice(device, stamp) ? device : SessionStore.newDevice(stamp);
    reply.setCookie(DEVICE_COOKIE, kept, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/api/v1/session',
      signed: true,
      maxAge: DEVICE_TTL_MS / 1000,
      secure: overTls(request, service.config.http.trustProxy),
    });
  };

  app.post(
    '/api/v1/session',
    { schema: { body: z.strictObject({ password: z.string().max(1024) }) }, onRequest: async (request) => requireAdminHeader(request) },
    async (request, reply) => {
      const device = deviceOf(request);
      await checkPassword(request, request.body.password, device);
      const answer = openSession(request, reply);
      // After the session cookie, which clients that keep one cookie read first.
      keepDevice(request, reply, device);
      return answer;
    },
  );

  const guarded = { onRequest: adminAuth(service) };

  // The console at page load: is its cookie still a session? If so, the page gets back the CSRF
  // token it kept only in memory. Same-origin reads only (no CORS, and the admin header cannot be
  // sent cross-site without a preflight), so another site cannot read the token. Not logged in is
  // an answer here, not a 401: the page asks before it knows.
  app.get('/api/v1/session', { onRequest: async (request) => requireAdminHeader(request) }, async (request) => {
    await secrets.refresh();
    const session = currentSession(request, sessions, secrets);
    if (!session) return { logged_in: false, password_set: secrets.hasPassword };
    return { logged_in: true, password_set: true, csrfToken: session.csrfToken };
  });

  app.delete('/api/v1/session', guarded, async (request, reply) => {
    sessions.delete(request.adminSession?.id);
    reply.clearCookie(SESSION_COOKIE, { path: '/', httpOnly: true, sameSite: 'strict', secure: overTls(request, service.config.http.trustProxy) });
    return reply.code(204).send();
  });

  app.post('/api/v1/token/rotate', { ...guarded, schema: { body: z.strictObject({}).nullish() } }, async () => {
    const token = await secrets.rotateToken();
    service.log.info('API token rotated');
    return { token };
  });

  // Every session opened under the old password ends (its stamp no longer matches), and every
  // device cookie is revoked (its mark no longer matches); the caller gets a new session and a new
  // device, so that the page stays logged in and its browser stays known.
  app.post(
    '/api/v1/password',
    {
      ...guarded,
      schema: {
        body: z.strictObject({
          current: z.string().max(1024),
          password: z.string().min(MIN_PASSWORD_LENGTH, `at least ${MIN_PASSWORD_LENGTH} characters`).max(1024),
        }),
      },
    },
    async (request, reply) => {
      await checkPassword(request, request.body.current);
      await secrets.setPassword(request.body.password);
      service.log.info('operator password changed: older sessions ended, device cookies revoked');
      const answer = openSession(request, reply);
      keepDevice(request, reply);
      return answer;
    },
  );
};
