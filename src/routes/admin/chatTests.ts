// Spec 4.7, the chat test routes: the current job, start, cancel and the explicit unload. The
// job runs through the same scheduler and chat worker as the API (src/workers/chat/chatTests.ts); the
// profile needs no publication, but it must be an executable chat profile. Prompt and answer
// stay in RAM: nothing here logs them.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { waitFor } from 'xstate';
import { z } from 'zod';
import type { SupervisorEmitted } from '../../../machines/supervisor/index.js';
import { ask } from '../../system/ask.js';
import { CHAT_TEST_APIS, CHAT_TEST_MAX_TOKENS } from '../../workers/chat/chatTests.js';
import type { Service } from '../../service.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';
import { errors } from '../../errors.js';
import { testProfile } from './testProfile.js';

const emptyBody = z.strictObject({}).nullish();
const UNLOAD_REPLY_MS = 15_000;
/** How long the unload answer waits for the process to end before it answers 202 (still unloading). */
const UNLOAD_WAIT_MS = 30_000;

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
    const replied = await ask<typeof service.supervisor.logic, Extract<SupervisorEmitted, { type: 'supervisor.reply' }>>(
      service.supervisor,
      'supervisor.reply',
      { type: 'worker.unloadRequest', kind: 'chat' },
      { timeoutMs: UNLOAD_REPLY_MS, signal: clientGone(reply) },
    );
    if (!replied) throw errors.unavailable('supervisor_timeout', 'The scheduler did not answer the unload in time.');
    if (!replied.outcome.ok) throw errors.conflict(replied.outcome.code, replied.outcome.message);
    // The answer comes once the process is gone (SIGTERM, then SIGKILL after the grace).
    const gone = await waitFor(service.supervisor, (s) => s.context.workers.chat.state === 'unloaded', { timeout: UNLOAD_WAIT_MS }).then(
      () => true,
      () => false,
    );
    return reply.code(gone ? 200 : 202).send({ unloaded: gone, status: await service.status() });
  });
};
