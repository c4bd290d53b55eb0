// POST /v1/responses: OpenAI's Responses API on the chat profiles, a second door to the chat worker
// beside chat completions (chat.ts; what both share is chatDoor.ts). It goes beyond the
// specification, so it is off until an operator turns it on (CONTRACT section 9). The route
// validates the strict request (src/workers/chat/responses.schema.ts), resolves the profile as chat
// completions do, and sends the chat completion request it stands for
// (src/workers/chat/responses.ts) the same way: the same queue, reservation, limits,
// abort-on-leave and metrics. The answer comes back as OpenAI's Response: one JSON object, or a
// stream of its events, relayed as the worker's chunks come. Unless the request says `store: false`,
// the Response is kept in memory for a while for the token that asked (responseMemory.ts), and
// `previous_response_id`, `item_reference` items and `GET /v1/responses/{id}` read it from there.
import type { FastifyPluginAsync, onRequestHookHandler } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { errors } from '../../errors.js';
import type { Service } from '../../service.js';
import { extensionOffMessage } from '../../system/extensions.js';
import { CHAT_LIMITS, type ChatLimits } from '../../workers/chat/chatRequest.js';
import { upstreamBody } from '../../workers/chat/chat.schema.js';
import { chatRequestOf, ResponseAnswer } from '../../workers/chat/responses.js';
import { responsesRequestSchema } from '../../workers/chat/responses.schema.js';
import { bearerToken } from '../auth.js';
import { clientGone } from '../client.js';
import { measureAnswer } from '../metrics.js';
import { answerChat, chatProfile, reasoningHeaders } from './chatDoor.js';

/**
 * The operator's switch (CONTRACT section 9), off by default: while it is off the route answers as
 * an unknown one does (404, the OpenAI error body) and nothing else of this door runs. A route's
 * own onRequest hook comes after the listener's (the Host check, the token) and before the body is
 * read, so no body is parsed and no profile looked up.
 */
function offUnlessTurnedOn(service: Pick<Service, 'extensions'>, route?: string): onRequestHookHandler {
  return (request, reply, done) => done(service.extensions.isOn('responses') ? undefined : errors.notFound('unknown_route', extensionOffMessage('responses', route)));
}

export const responsesRoutes: FastifyPluginAsync<{ service: Service; limits?: ChatLimits }> = async (base, { service, limits = CHAT_LIMITS }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/responses', { onRequest: offUnlessTurnedOn(service), schema: { body: responsesRequestSchema } }, async (request, reply) => {
    // First, so that a client that leaves at any later point is noticed.
    const signal = clientGone(reply);
    const body = request.body;
    const profile = await chatProfile(service, body.model);
    // The listener's token check let the request in: it has one.
    const token = bearerToken(request) ?? '';
    const memory = service.responseMemory;
    // What previous_response_id and the item references name, in their place (400 when not kept).
    const recalled = memory.recall(token, body);
    const chat = chatRequestOf(recalled.request);
    // The usage always comes at a stream's end: response.completed carries it.
    const upstream = upstreamBody(chat, profile, { includeUsage: true });
    const store = body.store !== false && memory.enabled;
    const previous = body.previous_response_id ?? null;
    const answer = new ResponseAnswer(body, profile.name, upstream, { store, ...(store ? { onEnd: (response) => memory.keep(token, response, recalled.own, previous) } : {}) });
    return answerChat(service, limits, request, reply, signal, {
      profile,
      upstream,
      stream: body.stream === true,
      headers: reasoningHeaders(chat.reasoning_effort),
      json: (completion) => {
        // Measured as the worker wrote it: its usage and timings are the chat completion's.
        measureAnswer(service.metrics, service.profiles, request, reply, completion);
        return answer.completion(completion);
      },
      events: () => answer,
      promptField: 'input',
    });
  });

  // A kept Response, for the token that made it; like OpenAI's, a 404 when there is none.
  const responseId = z.strictObject({ id: z.string().min(1) });
  app.get('/v1/responses/:id', { onRequest: offUnlessTurnedOn(service, 'GET /v1/responses/{id}'), schema: { params: responseId } }, async (request, reply) => {
    const { id } = request.params;
    const kept = service.responseMemory.response(bearerToken(request) ?? '', id);
    if (kept === undefined) throw errors.notFound('response_not_found', service.responseMemory.forgotten(`The response ${id}`));
    return reply.type('application/json').send(kept);
  });
};
