// Spec 4.7, the chat test routes: the current job, start, cancel and the explicit unload. The
// job runs through the same scheduler and chat worker as the API (src/workers/chat/chatTests.ts); the
// profile needs no publication, but it must be an executable chat profile. Prompt and answer
// stay in RAM: nothing here logs them.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { unloadWorker } from '../../system/unload.js';
import { CHAT_TEST_APIS, CHAT_TEST_MAX_TOKENS } from '../../workers/chat/chatTests.js';
import type { Service } from '../../service.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';
import { errors } from '../../errors.js';
import { testProfile } from './testProfile.js';

const emptyBody = z.strictObject({}).nullish();

const startBody = z.strictObject({
  profile_id: z.string().min(1),
  messages: z
    .array(z.strictObject({ role: z.enum(['system', 'user', 'assistant']), content: z.string() }))
    .min(1, 'at least one message'),
  max_tokens: z.number().int().min(1).max(CHAT_TEST_MAX_TOKENS, `at most ${CHAT_TEST_MAX_TOKENS}`).default(512),
  /** The door: chat completions, or OpenAI's Responses API. */
  api: z.enum(CHAT_TEST_APIS).default('chat_completions'),
});

export const adminChatTestRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));
  const tests = service.chatTests;

  app.get('/api/v1/chat-tests', async () => ({ job: tests.current() }));

  app.post('/api/v1/chat-tests/start', { schema: { body: startBody } }, async (request, reply) => {
    const { profile_id: id, messages, max_tokens: maxTokens, api } = request.body;
    const profile = await testProfile(service, id, 'chat');
    if (tests.running()) throw errors.conflict('chat_test_running', 'A chat test is running: cancel it or wait for its end.');
    // A test of a door that clients cannot use would tell the operator nothing about the endpoint.
    if (api === 'responses' && !service.extensions.isOn('responses')) {
      throw errors.conflict('extension_off', "The Responses API is off on this endpoint (it goes beyond the specification): turn it on first (the overview's Extensions, or POST /api/v1/endpoint/extensions), or test through chat completions.");
    }
    const job = tests.start(profile, messages, maxTokens, api);
    return reply.code(202).send({ job });
  });

  app.post('/api/v1/chat-tests/cancel', { schema: { body: emptyBody } }, async () => {
    const cancelled = tests.cancel();
    await tests.settled();
    return { cancelled, job: tests.current() };
  });

  app.post('/api/v1/chat-tests/unload', { schema: { body: emptyBody } }, async (request, reply) => {
    const { unloaded } = await unloadWorker(service.supervisor, 'chat', clientGone(reply));
    return reply.code(unloaded ? 200 : 202).send({ unloaded, status: await service.status() });
  });
};
