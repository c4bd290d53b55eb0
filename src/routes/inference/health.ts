// Spec 4.1: GET /health, the listener's health, behind the same bearer token as every route.
import type { FastifyPluginAsync } from 'fastify';
import type { Service } from '../../service.js';

export const healthRoutes: FastifyPluginAsync<{ service: Service }> = async (app, { service }) => {
  app.get('/health', async () => ({ status: 'ok', endpoint: service.state() }));
};
