// What the operator console reads beyond the spec's admin routes (types in
// src/system/console.types.ts): the machine definitions and their running actors for the
// state-chart view, the recent log lines and the host facts.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { LOG_LEVELS, LOG_TAIL_LINES, type LogLevelName } from '../../system/logTail.js';
import type { Service } from '../../workers/service.js';
import { adminAuth } from '../auth.js';

const logsQuery = z.strictObject({
  level: z.enum(Object.keys(LOG_LEVELS) as [LogLevelName, ...LogLevelName[]]).default('info'),
  limit: z.coerce.number().int().min(1).max(LOG_TAIL_LINES).default(200),
});

export const adminConsoleRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  app.get('/api/v1/machines', async () => ({ machines: service.charts.machines() }));

  app.get('/api/v1/actors', async () => ({ actors: service.charts.actors() }));

  app.get('/api/v1/host', async () => service.host.read());

  app.get('/api/v1/logs', { schema: { querystring: logsQuery } }, async (request) => ({ lines: service.logs.lines(request.query) }));
};
