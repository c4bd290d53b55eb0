// The console's worker tools (beyond the specification's table of routes, which names only the chat
// test's unload): the explicit unload of any worker kind with the spec's rule (3.2: refused with
// 409 `active_requests` while a job runs on it), each kind's recent stderr lines (bounded,
// redacted: src/system/observe/stderrLines.ts), and the inference listener's recent answers
// (numbers and names only: src/system/observe/recentRequests.ts).
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WORKER_KINDS, type WorkerKind } from '../../../machines/supervisor/index.js';
import { errors } from '../../errors.js';
import type { Service } from '../../service.js';
import { unloadWorker } from '../../system/unload.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';

const kindParams = z.strictObject({ kind: z.string() });
const emptyBody = z.strictObject({}).nullish();

/** The worker kind a path names; 404 for any other. */
function workerKind(kind: string): WorkerKind {
  const known = WORKER_KINDS.find((k) => k === kind);
  if (!known) throw errors.notFound('worker_not_found', `No worker ${JSON.stringify(kind)}: the workers are ${WORKER_KINDS.join(', ')}.`);
  return known;
}

export const adminWorkerRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  app.post('/api/v1/workers/:kind/unload', { schema: { params: kindParams, body: emptyBody } }, async (request, reply) => {
    const { unloaded } = await unloadWorker(service.supervisor, workerKind(request.params.kind), clientGone(reply));
    return reply.code(unloaded ? 200 : 202).send({ unloaded, status: await service.status() });
  });

  app.get('/api/v1/workers/:kind/stderr', { schema: { params: kindParams } }, async (request) => service.workers.stderr.view(workerKind(request.params.kind)));

  app.get('/api/v1/requests', async () => ({ requests: service.recent.list(), limit: service.recent.limit }));
};
