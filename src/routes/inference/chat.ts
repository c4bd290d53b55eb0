// Spec 4.2: POST /v1/chat/completions, JSON or SSE. The route validates the strict request,
// resolves the published profile (its snapshot is kept for the whole request), fills the
// profile's sampling defaults, and hands the request to the scheduler and the chat worker
// (chatDoor.ts, src/workers/chat/chatRequest.ts; the lease's failure path is src/workers/lease.ts).
// A buffered answer is relayed as the worker wrote it; a stream is relayed chunk by chunk, never
// buffered. A client that goes away cancels its queued job, or closes the worker connection so
// llama-server frees the slot.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../service.js';
import { CHAT_LIMITS, completeAnswer, type ChatLimits } from '../../workers/chat/chatRequest.js';
import { clientGone } from '../client.js';
import { chatRequestSchema, upstreamBody } from '../../workers/chat/chat.schema.js';
import { answerChat, chatProfile, reasoningHeaders } from './chatDoor.js';

export const chatRoutes: FastifyPluginAsync<{ service: Service; limits?: ChatLimits }> = async (base, { service, limits = CHAT_LIMITS }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/chat/completions', { schema: { body: chatRequestSchema } }, async (request, reply) => {
    // First, so that a client that leaves at any later point is noticed.
    const signal = clientGone(reply);
    const body = request.body;
    const profile = await chatProfile(service, body.model);
    return answerChat(service, limits, request, reply, signal, {
      profile,
      upstream: upstreamBody(body, profile),
      stream: body.stream === true,
      headers: reasoningHeaders(body.reasoning_effort),
      json: completeAnswer,
      promptField: 'messages',
    });
  });
};
