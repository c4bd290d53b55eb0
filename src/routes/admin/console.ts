// What the operator console reads beyond the spec's admin routes (types in
// src/system/console.types.ts): the machine definitions and their running actors for the
// state-chart view.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../workers/service.js';
import { adminAuth } from '../auth.js';

export const adminConsoleRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  app.get('/api/v1/machines', async () => ({ machines: service.charts.machines() }));

  app.get('/api/v1/actors', async () => ({ actors: service.charts.actors() }));
};
