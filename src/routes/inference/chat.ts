// Spec 4.2: POST /v1/chat/completions, JSON or SSE. The route validates the strict request,
// resolves the published profile (its snapshot is kept for the whole request), fills the
// profile's sampling defaults, and hands the request to the scheduler and the chat worker
// (src/workers/chat/chatRequest.ts; the lease's failure path is src/workers/lease.ts). A buffered answer is relayed as the worker wrote it; a stream is
// relayed chunk by chunk, never buffered. A client that goes away cancels its queued job, or
// closes the worker connection so llama-server frees the slot.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../service.js';
import type { ChatProfile } from '../../workers/chat/chat.js';
import { bufferedAnswer, CHAT_LIMITS, completeAnswer, openChat, relayStream, type ChatLimits } from '../../workers/chat/chatRequest.js';
import { clientGone } from '../client.js';
import { chatStreamTap } from '../metrics.js';
import { chatRequestSchema, effectiveEffort, upstreamBody, type ChatRequest } from '../../workers/chat/chat.schema.js';

/** Spec 4.2: the three headers of an answer whose request set a reasoning effort. */
export function reasoningHeaders(requested: ChatRequest['reasoning_effort']): Record<string, string> {
  const effective = effectiveEffort(requested);
  if (effective === null || requested === undefined || requested === null) return {};
  return {
    'x-service-reasoning-requested': requested,
    'x-service-reasoning-effective': effective,
    'x-service-reasoning-semantics': 'model-template-hint',
  };
}

export const chatRoutes: FastifyPluginAsync<{ service: Service; limits?: ChatLimits }> = async (base, { service, limits = CHAT_LIMITS }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/chat/completions', { schema: { body: chatRequestSchema } }, async (request, reply) => {
    // First, so that a client that leaves at any later point is noticed.
    const signal = clientGone(reply);
    const body = request.body;
    // Known at once when nothing the profile needs changed since it was last checked.
    const profile = (service.catalog.readyNow('chat', body.model) ?? (await service.catalog.require('chat', body.model))) as ChatProfile;
    const stream = body.stream === true;
    const opened = await openChat(service, profile, upstreamBody(body, profile), { source: 'api', stream, signal, limits });
    const headers = reasoningHeaders(body.reasoning_effort);
    if (!stream || opened.response.statusCode !== 200) {
      // The answer, or the worker's error, is in memory: the worker's part is done.
      const answer = await bufferedAnswer(opened, signal, limits, request.log, profile);
      return reply.code(200).headers(headers).type('application/json').send(completeAnswer(answer));
    }

    // SSE: the headers go out with the worker's first chunk, then every chunk as it comes; the
    // reservation is kept until the end.
    // The output stream measures itself for the metrics as the events pass (no extra stream per token).
    const out = chatStreamTap(service.metrics, service.profiles, request, reply);
    void relayStream(opened, out, { limits, signal, log: request.log, profile }).finally(() => opened.lease.release());
    return reply
      .code(200)
      .headers({ ...headers, 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
      .type('text/event-stream; charset=utf-8')
      .send(out);
  });
};
