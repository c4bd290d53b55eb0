// The official `openai` client against the real service with the real llama-server on a tiny
// generated model: JSON and streamed answers validated against OpenAI's schema, tools and
// structured output, profile swaps, revisions, slots, a killed worker, and the reasoning headers.
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { openapiErrors } from '../helpers/openapi.js';

interface Status {
  workers: Array<{ kind: string; profile_id: string | null; state: string; pid: number | null; generation?: number }>;
}

async function setUp(t: Test, profiles: Array<{ name: string; slots?: number; context?: number }>) {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const ids: Record<string, string> = {};
  for (const p of profiles) {
    const response = await b.admin('POST', '/api/v1/profiles', { name: p.name, category: 'chat', params: { model, context: p.context ?? 2048, slots: p.slots ?? 1 } });
    t.equal(response.status, 201, `profile ${p.name} created`);
    const id = ((await response.json()) as { id: string }).id;
    ids[p.name] = id;
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  }
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  return { b, client, ids, model, dir };
}

async function chatWorker(b: Built) {
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
  return status.workers.find((w) => w.kind === 'chat');
}

t.test('JSON and streamed answers through the openai client validate against the schema', async (t) => {
  const { b, client } = await setUp(t, [{ name: 'tiny' }]);
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12 });
  t.same(openapiErrors('CreateChatCompletionResponse', answer), [], 'the JSON answer matches CreateChatCompletionResponse');
  t.equal(answer.model, 'tiny', 'model is the profile name');
  t.equal(answer.usage?.completion_tokens, 12);
  t.equal(answer.choices[0]?.finish_reason, 'length');

  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 8,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let usage: unknown;
  for await (const chunk of stream) {
    chunks += 1;
    t.same(openapiErrors('CreateChatCompletionStreamResponse', chunk), [], `chunk ${chunks} matches CreateChatCompletionStreamResponse`);
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  t.ok(chunks >= 8, `the stream came in chunks (${chunks})`);
  t.ok(text.length > 0);
  t.match(usage, { completion_tokens: 8 }, 'the final chunk carries usage');
  const worker = await chatWorker(b);
  t.equal(worker?.state, 'loaded', 'the worker stays loaded after the answers');
});
