// What the operator console reads beyond the spec's admin routes (types in
// src/system/observe/console.types.ts): the machine definitions and their running actors for the
// state-chart view, the recent log lines, the host facts, and the events stream (server-sent
// events, src/workers/consoleFeed.ts) that keeps the page current.
import { PassThrough } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { LOG_LEVELS, LOG_TAIL_LINES, type LogLevelName } from '../../system/observe/logTail.js';
import type { Service } from '../../service.js';
import { logAccess } from '../access.js';
import { adminAuth } from '../auth.js';

/**
 * What an events stream may have waiting for a client that does not read (bytes): past it the
 * stream ends, and the page reconnects and gets a fresh snapshot instead of the backlog.
 */
export const EVENTS_BACKLOG_LIMIT = 4 * 1024 * 1024;
/** How often an open stream checks that its session still holds (logout, password change, expiry). */
const SESSION_CHECK_MS = 2_000;

const logsQuery = z.strictObject({
  level: z.enum(Object.keys(LOG_LEVELS) as [LogLevelName, ...LogLevelName[]]).default('info'),
  limit: z.coerce.number().int().min(1).max(LOG_TAIL_LINES).default(200),
});

export const adminConsoleRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  // Open streams end when the admin listener closes: a shutdown never waits for a page.
  app.addHook('preClose', async () => service.consoleFeed.close());

  app.get('/api/v1/events', async (request, reply) => {
    const feed = service.consoleFeed;
    const body = new PassThrough();
    const keepAlive = setInterval(() => body.write(': keep-alive\n\n'), feed.timing.keepAliveMs);
    // A stream lasts only as long as the session that opened it: a logout elsewhere, a password
    // change or the session's expiry ends it (the page then shows its login).
    const sessionId = request.adminSession?.id;
    const stillValid = () => {
      const session = sessionId === undefined ? undefined : service.sessions.peek(sessionId);
      return session !== undefined && session.passwordStamp === service.secrets.passwordStamp;
    };
    const sessionCheck = setInterval(() => {
      if (!stillValid()) body.end();
    }, SESSION_CHECK_MS);
    let remove = () => {};
    body.once('close', () => {
      clearInterval(keepAlive);
      clearInterval(sessionCheck);
      remove();
      if (reply.raw.writableEnded) return;
      // The client went away: its connection may stay half open, so it is ended here, and since
      // Fastify runs onResponse only for an answer sent whole, the access line is written here.
      reply.raw.destroy();
      logAccess(request, reply);
    });
    remove = await feed.open({
      send: (name, data) => {
        if (body.writableEnded) return;
        if (body.writableLength + reply.raw.writableLength > EVENTS_BACKLOG_LIMIT) {
          service.log.warn({ route: '/api/v1/events' }, 'an events stream fell behind by more than 4 MiB: it is ended, the page reconnects');
          body.end();
          return;
        }
        body.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
      },
      end: () => body.end(),
    });
    return reply
      .type('text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
      .send(body);
  });

  app.get('/api/v1/machines', async () => ({ machines: service.charts.machines() }));

  app.get('/api/v1/actors', async () => ({ actors: service.charts.actors() }));

  app.get('/api/v1/host', async () => service.host.read());

  app.get('/api/v1/logs', { schema: { querystring: logsQuery } }, async (request) => ({ lines: service.logs.lines(request.query) }));
};
