// Spec 4.7, the endpoint routes: status, start, stop, address and publication, and the extensions
// beyond the specification (CONTRACT section 9). Each route sends one event to the listener machine
// (or one call to the profile store or the extensions) and maps the outcome.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ListenerEmitted, ListenerOutcome } from '../../../machines/listener/index.js';
import { ask } from '../../system/ask.js';
import type { Service } from '../../service.js';
import { ProfileError } from '../../store/profiles.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';
import { errors, type ApiError } from '../../errors.js';

// A bodiless POST arrives as null; `{}` is accepted too.
const emptyBody = z.strictObject({}).nullish();
const START_REPLY_MS = 30_000;
const STOP_REPLY_MS = 15_000;

function failure(outcome: Extract<ListenerOutcome, { ok: false }>): ApiError {
  switch (outcome.code) {
    case 'port_out_of_range':
      return errors.invalidValue('port', outcome.message);
    case 'listen_failed':
      return errors.unavailable('listen_failed', outcome.message);
    default:
      return errors.conflict(outcome.code, outcome.message);
  }
}

export const adminEndpointRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  /** Sends a listener event and answers with the status; 202 when the machine is still on its way. */
  async function command(event: Parameters<typeof ask>[2], timeoutMs: number, signal: AbortSignal) {
    const listener = service.listener();
    const replied = await ask<typeof listener.logic, ListenerEmitted>(listener, 'endpoint.reply', event, { timeoutMs, signal });
    if (replied && !replied.outcome.ok) throw failure(replied.outcome);
    // What the machine remembered is on disk before the operator hears that it happened.
    await service.endpoint.flushed();
    return { done: replied !== undefined, status: await service.status() };
  }

  app.get('/api/v1/endpoint', async () => service.status());

  app.post('/api/v1/endpoint/start', { schema: { body: emptyBody } }, async (request, reply) => {
    const { done, status } = await command({ type: 'endpoint.start' }, START_REPLY_MS, clientGone(reply));
    return reply.code(done ? 200 : 202).send(status);
  });

  app.post('/api/v1/endpoint/stop', { schema: { body: emptyBody } }, async (request, reply) => {
    const { done, status } = await command({ type: 'endpoint.stop' }, STOP_REPLY_MS, clientGone(reply));
    return reply.code(done ? 200 : 202).send(status);
  });

  app.post(
    '/api/v1/endpoint/config',
    {
      schema: {
        body: z
          .strictObject({
            port: z.number().int().min(1).max(65535).optional(),
            host: z.union([z.ipv4(), z.ipv6(), z.literal('localhost')]).optional(),
          })
          .refine((b) => b.port !== undefined || b.host !== undefined, 'give a port (and optionally a host)'),
      },
    },
    async (request, reply) => {
      const event = { type: 'endpoint.config' as const, ...request.body };
      const { status } = await command(event, STOP_REPLY_MS, clientGone(reply));
      return status;
    },
  );

  // CONTRACT section 9: what goes beyond the specification, each switch off by default. Allowed
  // while the listener runs; the next request sees it.
  app.post('/api/v1/endpoint/extensions', { schema: { body: z.strictObject({ responses: z.boolean() }) } }, async (request) => ({
    extensions: await service.extensions.set(request.body),
  }));

  app.post(
    '/api/v1/endpoint/profile',
    { schema: { body: z.strictObject({ id: z.string().min(1).max(100), enabled: z.boolean() }) } },
    async (request) => {
      try {
        const published = await service.profiles.setPublished(request.body.id, request.body.enabled);
        const profile = service.profiles.get(request.body.id);
        return { published, profile: profile ? await service.catalog.view(profile) : null };
      } catch (error) {
        if (error instanceof ProfileError && error.code === 'not_found') throw errors.notFound('profile_not_found', error.message);
        throw error;
      }
    },
  );
};
