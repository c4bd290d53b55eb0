// GET /metrics after chat requests against the real llama-server on the tiny generated model:
// the tokens of a buffered answer (its `usage`) and of a stream without `include_usage`
// (llama-server's `timings` in its last event), the generation speed of each from the worker's
// timings, the first-token time, and nothing of the prompt or the model's answer in the output.
import OpenAI from 'openai';
import t from 'tap';
import { SecretStore } from '../../src/store/secrets.js';
import { build, tempDir, TOKEN } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { sample } from '../helpers/metrics.js';

t.test('a real chat worker: tokens, speed and first token of a buffered answer and a stream', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'tiny', category: 'chat', params: { model, context: 2048 } });
  const id = ((await created.json()) as { id: string }).id;
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  const prompt = 'PROMPT-okapi-5521 tell me about the moon';

  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 32 });
  t.equal(answer.usage?.completion_tokens, 32);
  const promptTokens = answer.usage?.prompt_tokens ?? 0;
  t.ok(promptTokens > 0);
  let streamed = '';
  const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: prompt }], max_tokens: 24, stream: true });
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';

  const { store } = await SecretStore.open(b.stateDir);
  const scrapeToken = await store.rotateMetricsToken();
  const response = await fetch(`${b.adminUrl}/metrics`, { headers: { authorization: `Bearer ${scrapeToken}` } });
  t.equal(response.status, 200);
  const text = await response.text();
  const chat = 'route="/v1/chat/completions",model="tiny"';
  t.equal(sample(text, `service_deck_completion_tokens_total{${chat}}`), 32 + 24, 'the usage of the answer and the timings of the stream');
  // The stream's prompt is the same: cached or computed, llama-server's timings count it whole.
  t.equal(sample(text, `service_deck_prompt_tokens_total{${chat}}`), 2 * promptTokens);
  t.equal(sample(text, `service_deck_tokens_per_second_count{${chat}}`), 2, 'a speed for each answer');
  t.ok((sample(text, `service_deck_tokens_per_second_sum{${chat}}`) ?? 0) > 0);
  t.equal(sample(text, `service_deck_time_to_first_token_seconds_count{${chat}}`), 2);
  t.equal(sample(text, `service_deck_http_requests_total{listener="inference",${chat},code="200"}`), 2);
  t.notMatch(text, 'okapi', 'no prompt');
  // The tiny model writes one printable character a token: 24 or 32 of them are long enough that
  // finding one in the output can only mean it was written there.
  for (const said of [answer.choices[0]?.message.content ?? '', streamed]) {
    t.ok(said.trim().length >= 12, `the answer is long enough to look for (${JSON.stringify(said)})`);
    t.notOk(text.includes(said.trim()), 'no answer');
  }
});
