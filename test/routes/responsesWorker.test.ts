// The Responses door on the chat completion path, against the stand-in llama-server
// (test/fixtures/fake-llama-server.mjs), which misbehaves on demand: a client that leaves
// mid-stream frees the slot at once; the worker's error event, the SSE limit and a silent worker
// end the answer with the service's own error (response.failed in a stream, the contract's error
// body otherwise), never llama-server's text; and the answers are measured under their own route.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { CHAT_LIMITS, type ChatLimits } from '../../src/workers/chat/chatRequest.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { sample } from '../helpers/metrics.js';
import { matchesSchema } from '../helpers/openapi.js';
import { until } from '../helpers/until.js';

/** Short limits for the tests of the limits (the slow stand-in's 3 s stream runs under the spec's own). */
const SHORT = { ...CHAT_LIMITS, idleMs: 1_000, streamMs: 1_000, diagnosisWaitMs: 2_000 };
const PROMPT = 'PROMPT-zebra-4711';

/** The service with a published one-slot profile `fake` on the stand-in in `mode`; its request events (open, closed, finished) in `events`. */
async function setUp(t: Test, mode: string, chatLimits: ChatLimits = CHAT_LIMITS): Promise<Built & { events: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const events = path.join(dir, 'events');
  const wrapper = await fakeLlamaServerIn(dir, mode, events);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' }, chatLimits });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model, slots: 1 } });
  const { id } = (await created.json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  // An extension beyond the specification, off by default (CONTRACT section 9).
  await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true });
  return Object.assign(b, { events });
}

const queue = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: unknown[]; waiting: unknown[] } }).queue;
const ask = (b: Built, stream: boolean) => b.api('POST', '/v1/responses', { model: 'fake', input: PROMPT, stream });

/** A stream's events, each checked against ResponseStreamEvent. */
function eventsOf(t: Test, text: string): Array<{ type: string; response?: { status: string; error: { code: string; message: string } | null } }> {
  const events = text
    .trim()
    .split('\n\n')
    .map((event) => JSON.parse(event.slice(event.indexOf('data: ') + 6)) as { type: string; response?: { status: string; error: { code: string; message: string } | null } });
  events.forEach((event, i) => matchesSchema(t, 'ResponseStreamEvent', event, `event ${i} (${event.type}) matches ResponseStreamEvent`));
  return events;
}

t.test('a client that leaves mid-stream frees the slot at once; the next request runs', async (t) => {
  const b = await setUp(t, 'slow');
  const controller = new AbortController();
  const response = await fetch(`${b.apiUrl()}/v1/responses`, {
    method: 'POST',
    signal: controller.signal,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fake', input: PROMPT, stream: true }),
  });
  t.equal(response.status, 200);
  // Read until the first text delta came: the worker is mid-stream (30 tokens, one per 100 ms).
  const reader = response.body!.getReader();
  let seen = '';
  while (!seen.includes('response.output_text.delta')) seen += new TextDecoder().decode((await reader.read()).value);
  t.equal((await queue(b)).running.length, 1, 'the answer holds the only slot');
  const left = Date.now();
  controller.abort();
  await until('the slot to be freed', async () => ((await queue(b)).running.length === 0 ? true : undefined), 2_500);
  const freedMs = Date.now() - left;
  t.ok(freedMs < 2_500, `freed ${freedMs} ms after the client left, before the worker's stream would have ended`);
  // The stand-in notes the closed connection a moment after the service let go of it.
  const noted = await until('the worker to see its connection closed', async () => {
    const lines = (await readFile(b.events, 'utf8')).trim().split('\n');
    return lines.length > 1 ? lines : undefined;
  }, 2_500);
  t.same(noted, ['open', 'closed'], "the worker's connection was closed before its answer was whole");

  const next = await ask(b, true);
  const events = eventsOf(t, await next.text());
  t.match(events.at(-1), { type: 'response.incomplete', response: { status: 'incomplete' } }, 'the next request gets its whole answer');
});

t.test("the worker's error event mid-stream: response.failed with the service's summary, not the worker's text", async (t) => {
  const b = await setUp(t, 'error');
  const response = await ask(b, true);
  t.equal(response.status, 200);
  const events = eventsOf(t, await response.text());
  t.same(
    events.map((e) => e.type),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added', 'response.output_text.delta', 'response.failed'],
    'the text so far, then response.failed',
  );
  const failed = events.at(-1)?.response;
  t.match(failed, { status: 'failed', error: { code: 'server_error', message: /internal error/ } });
  t.notMatch(failed?.error?.message ?? '', /unordered_map|last read|zebra/, `no C++ text and no request text in "${failed?.error?.message}"`);
  t.match(b.logLines.join(''), /unordered_map::at/, "the log has the worker's text");
  t.notMatch(b.logLines.join(''), /zebra/, "but not the request's");
  await until('the reservation given back', async () => ((await queue(b)).running.length === 0 ? true : undefined), 5_000);
});

t.test('the SSE limit ends a stream with response.failed; a silent worker is a 502 before the stream', async (t) => {
  const endless = await setUp(t, 'endless', SHORT);
  const streamed = await ask(endless, true);
  const events = eventsOf(t, await streamed.text());
  t.match(events.at(-1), { type: 'response.failed', response: { error: { code: 'server_error', message: /limit for running SSE output/ } } }, 'the 1 s limit ended it');
  t.ok(events.filter((e) => e.type === 'response.output_text.delta').length > 3, 'after the deltas that came');
  t.equal((await queue(endless)).running.length, 0, 'the reservation is given back');

  const silent = await setUp(t, 'silent', SHORT);
  const answer = await ask(silent, false);
  t.equal(answer.status, 502);
  t.match(await answer.json(), { error: { code: 'worker_failed', message: /no data for 1 s \(timeout\)/ } }, "the chat route's error body");
});

t.test("a worker chunk of another shape ends the stream with response.failed and closes the worker's connection", async (t) => {
  const b = await setUp(t, 'shape');
  const response = await ask(b, true);
  t.equal(response.status, 200);
  const events = eventsOf(t, await response.text());
  t.same(events.map((e) => e.type).slice(-2), ['response.output_text.delta', 'response.failed'], 'the token before it, then the end');
  t.match(events.at(-1)?.response, { status: 'failed', error: { code: 'server_error', message: /shape this door cannot read as a chat completion/ } });
  const noted = await until('the worker to see its connection closed', async () => {
    const lines = (await readFile(b.events, 'utf8')).trim().split('\n');
    return lines.length > 1 ? lines : undefined;
  }, 10_000);
  t.same(noted, ['open', 'closed'], "the worker's endless stream was ended, not read to its limit");
  await until('the reservation to be given back', async () => ((await queue(b)).running.length === 0 ? true : undefined), 10_000);
  t.pass('the reservation is given back');
});

t.test('answers are measured under /v1/responses: first token, tokens and speed, as for chat completions', async (t) => {
  const b = await setUp(t, 'slow');
  const streamed = await ask(b, true);
  t.equal(streamed.status, 200);
  t.match(await streamed.text(), /response\.incomplete/);
  const text = await (await fetch(`${b.adminUrl}/metrics`, { headers: { cookie: b.session().cookie } })).text();
  const route = 'route="/v1/responses",model="fake"';
  t.equal(sample(text, `service_deck_http_requests_total{listener="inference",${route},code="200"}`), 1);
  t.equal(sample(text, `service_deck_time_to_first_token_seconds_count{${route}}`), 1);
  t.equal(sample(text, `service_deck_prompt_tokens_total{${route}}`), 5, "the worker's usage");
  t.equal(sample(text, `service_deck_completion_tokens_total{${route}}`), 30);
  t.equal(sample(text, `service_deck_tokens_per_second_sum{${route}}`), 10, "the worker's timings");
  t.notMatch(text, 'zebra', 'no prompt in a label');
});
