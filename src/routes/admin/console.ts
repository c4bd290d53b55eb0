// What the operator console reads beyond the spec's admin routes (types in
// src/system/observe/console.types.ts): the machine definitions and their running actors for the
// state-chart view, the recent log lines, the host facts, and the events stream (server-sent
// events framed by eventStream() in src/workers/consoleFeed.ts) that keeps the page current.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { LOG_LEVELS, LOG_TAIL_LINES, type LogLevelName } from '../../system/observe/logTail.js';
import type { Service } from '../../service.js';
import { eventStream } from '../../workers/consoleFeed.js';
import { logAccess } from '../access.js';
import { adminAuth } from '../auth.js';

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
    // A stream lasts only as long as the session that opened it: a logout elsewhere, a password
    // change or the session's expiry ends it (the page then shows its login).
    const sessionId = request.adminSession?.id;
    const body = await eventStream(service.consoleFeed, {
      stillValid: () => {
        const session = sessionId === undefined ? undefined : service.sessions.peek(sessionId);
        return session !== undefined && session.passwordStamp === service.secrets.passwordStamp;
      },
      waiting: () => reply.raw.writableLength,
      log: service.log,
      closed: () => {
        if (reply.raw.writableEnded) return;
        // The client went away: its connection may stay half open, so it is ended here, and since
        // Fastify runs onResponse only for an answer sent whole, the access line is written here.
        reply.raw.destroy();
        logAccess(request, reply);
      },
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
