// GET /metrics (Prometheus text, for the scrape token or an operator's session),
// GET /livez and GET /readyz (no authentication; only ok or not ok and a reason code) on the
// admin listener. The numbers are src/system/observe/metrics.ts's, the judgements src/system/observe/health.ts's.
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { liveness, readiness, type Health } from '../../system/observe/health.js';
import type { Service } from '../../service.js';
import { metricsAuth } from '../auth.js';

function answer(reply: FastifyReply, health: Health) {
  reply.header('cache-control', 'no-store');
  return health.ok ? reply.code(200).send({ status: 'ok' }) : reply.code(503).send({ status: 'not_ok', reason: health.reason });
}

export const adminMetricsRoutes: FastifyPluginAsync<{ service: Service }> = async (app, { service }) => {
  app.get('/metrics', { onRequest: metricsAuth(service) }, async (_request, reply) => {
    const text = await service.metrics.text();
    return reply.header('cache-control', 'no-store').type(service.metrics.contentType).send(text);
  });

  app.get('/livez', async (_request, reply) => answer(reply, liveness(service.supervisor)));

  app.get('/readyz', async (_request, reply) =>
    answer(
      reply,
      await readiness({
        stateDir: service.config.stateDir,
        listener: service.listener() as ReturnType<Service['listener']> | undefined,
        wantsRunning: service.endpoint.record.running,
        supervisor: service.supervisor,
      }),
    ),
  );
};
