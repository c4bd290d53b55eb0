// The chat route's worker limits (spec 4.2, 8) and failures, against a stand-in llama-server
// (test/fixtures/fake-llama-server.mjs) that can misbehave on demand: a buffered answer over
// 16 MiB, a worker that goes silent (120 s, shortened here), an SSE stream that runs past its
// limit (600 s, shortened here), an error event in a running stream, and a worker that crashes
// with a model error.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { build, failureOf, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { CHAT_LIMITS } from '../../src/workers/chat/chatRequest.js';
import { until } from '../helpers/until.js';

const limits = { ...CHAT_LIMITS, idleMs: 1_000, streamMs: 1_000, diagnosisWaitMs: 2_000 };

/** The service, with the stand-in's request events (open, closed, finished) in `events`. */
async function setUp(t: Test, mode: string, chatLimits = limits): Promise<Built & { events: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const events = path.join(dir, 'events');
  const wrapper = await fakeLlamaServerIn(dir, mode, events);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_SECRET_PROBE: 'do-not-pass', LLAMA_ARG_API_KEY: 'extra-key' }, chatLimits });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return Object.assign(b, { events });
}

const running = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: unknown[] } }).queue.running.length;
const ask = (b: Built, stream = false) => b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], ...(stream ? { stream: true } : {}) });

t.test("without an override the service runs with the spec's own limits: 120 s without data, 600 s of SSE output, 16 MiB buffered", async (t) => {
  // The tests below shorten the limits; this one reads the limits a real start resolves, which
  // both the API route and the chat test are given (the tests below prove they honour them).
  const b = await build(t, { login: false, env: { SERVICE_DECK_GPUS: 'none' } });
  const spec = { idleMs: 120_000, streamMs: 600_000, bufferedBytes: 16 * 1024 * 1024 };
  t.match(b.service.chatLimits, spec, 'the API route: spec 8');
  t.match(b.service.chatTests.limits, spec, 'the chat test: the same limits');
  t.equal(b.service.chatTests.limits, b.service.chatLimits, 'one limits object for both');
});

t.test('a buffered answer over 16 MiB fails cleanly', async (t) => {
  const b = await setUp(t, 'huge');
  const response = await ask(b);
  t.equal(response.status, 502);
  const body = (await response.json()) as { error: { code: string; message: string; type: string } };
  t.same([body.error.type, body.error.code], ['server_error', 'response_too_large']);
  t.match(body.error.message, /16 MiB/);
  t.equal(await running(b), 0, 'the reservation is given back');
});

t.test('a worker that sends no data within the idle limit ends the request', async (t) => {
  const b = await setUp(t, 'silent');
  const started = Date.now();
  const response = await ask(b);
  const elapsed = Date.now() - started;
  t.equal(response.status, 502);
  const body = (await response.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'worker_failed');
  t.match(body.error.message, /no data for 1 s \(timeout\)/, 'the 1 s idle limit ended it');
  // Bounds a loaded machine cannot miss: not before the limit, and far below the default 120 s.
  t.ok(elapsed >= 1_000 && elapsed < 60_000, `it ended at the limit (${elapsed} ms), not before and not at the default limit`);
  t.equal(await running(b), 0);
});

t.test('running SSE output ends at its limit with an error event', async (t) => {
  const b = await setUp(t, 'endless');
  const response = await ask(b, true);
  t.equal(response.status, 200);
  t.equal(response.headers.get('x-accel-buffering'), 'no');
  const text = await response.text();
  t.match(text, /^data: \{/, 'chunks were relayed');
  const last = text.trim().split('\n\n').at(-1) ?? '';
  t.match(JSON.parse(last.replace(/^data: /, '')), { error: { code: 'worker_failed', type: 'server_error', message: /limit for running SSE output/ } }, 'the stream ends with an error event');
  t.equal(await running(b), 0, 'the reservation is given back after the stream');
});

t.test('an error event after an event the worker cut off halfway stands on its own', async (t) => {
  const b = await setUp(t, 'cut');
  const response = await ask(b, true);
  t.equal(response.status, 200);
  const events = (await response.text()).split('\n\n').filter((e) => e.trim() !== '');
  const last = events.at(-1) ?? '';
  t.match(JSON.parse(last.replace(/^data: /, '')), { error: { code: 'worker_failed', message: /no data for 1 s/ } }, 'the last event is a whole error event');
  t.equal(await running(b), 0);
});

t.test("the worker's error event inside a running stream becomes the service's own summary", async (t) => {
  const b = await setUp(t, 'error');
  const prompt = 'PROMPT-7171 the words of the request';
  const response = await b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: prompt }], stream: true });
  t.equal(response.status, 200);
  const text = await response.text();
  t.notMatch(text, /unordered_map|last read|PROMPT-7171/, 'neither the C++ text nor the request it quotes reaches the client');
  const events = text.split('\n\n').filter((e) => e.trim() !== '');
  t.equal(events.length, 2, 'the token, then one error event');
  t.match(JSON.parse((events[0] ?? '').replace(/^data: /, '')), { choices: [{ delta: { content: 'x' } }] }, 'the events before the error are relayed');
  t.same(
    JSON.parse((events[1] ?? '').replace(/^data: /, '')),
    {
      error: {
        message: 'The chat worker failed on this request with an internal error (Value is not an object); the service log has the details.',
        type: 'server_error',
        param: null,
        code: 'worker_failed',
      },
    },
    "the stream ends with the service's own error event, the summary a non-streamed answer gets",
  );
  const logged = b.logLines.filter((line) => line.includes('the chat worker answered with an error'));
  t.equal(logged.length, 1, 'the detail goes to the log');
  t.match(logged[0], /unordered_map::at; last read: \(left out\)/, "with the worker's own words");
  t.notMatch(b.logLines.join(''), /PROMPT-7171/, "but not the request's text");
  t.equal(await running(b), 0, 'the reservation is given back');
});

t.test('a worker that crashes answers 502 worker_failed with the likely cause', async (t) => {
  const b = await setUp(t, 'crash');
  const response = await ask(b);
  t.equal(response.status, 502);
  const body = (await response.json()) as { error: { code: string; message: string } };
  t.equal(body.error.code, 'worker_failed');
  t.match(body.error.message, /could not load its model/, 'the diagnosis names the model');
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: unknown[]; queue: { running: unknown[] } };
  t.same(status.workers, [], 'the dead worker is gone from the status');
  t.same(status.queue.running, []);
  const log = b.logLines.join('');
  t.match(log, /chat worker ended/, 'the log names the end');
  t.match(log, /tensor data is not within the file bounds/, 'with its one evidence line');
});

t.test('a client that goes away while the worker answers closes the worker connection', async (t) => {
  const b = await setUp(t, 'silent', { ...limits, idleMs: 60_000 });
  const controller = new AbortController();
  const request = failureOf(
    fetch(`${b.apiUrl()}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake', messages: [{ role: 'user', content: 'y' }] }),
    }),
  );
  const events = async () => (await readFile(b.events, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  t.same(await until('the worker to receive the request', async () => ((await events()).length > 0 ? events() : undefined)), ['open'], 'the worker has the request');
  t.equal(await running(b), 1, 'it holds its reservation');
  controller.abort();
  t.equal(await request, 'AbortError', 'the client went away before any answer');
  // The idle limit is 60 s here; the wait gives up after 30 s, so only an early release passes.
  await until('the reservation to be given back', async () => ((await running(b)) === 0 ? true : undefined), 30_000);
  t.equal(await running(b), 0, 'its reservation is given back at once, long before the idle limit');
  const seen = await until('the worker to see its connection closed', async () => {
    const lines = await events();
    return lines.includes('closed') ? lines : undefined;
  }, 30_000);
  t.same(seen, ['open', 'closed'], "the worker's connection was closed before its answer, long before the idle limit");
});

t.test('the worker gets no secret and no LLAMA_ARG_* from the service environment', async (t) => {
  const b = await setUp(t, 'env');
  const response = await ask(b);
  t.equal(response.status, 200);
  const names = JSON.parse(((await response.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content ?? '[]') as string[];
  t.ok(names.includes('PATH'), 'PATH is passed on');
  t.ok(names.includes('CUDA_VISIBLE_DEVICES'), 'the GPU selection is set');
  t.same(names.filter((n) => n.startsWith('SERVICE_DECK_') || n.startsWith('LLAMA_ARG_')), [], 'no SERVICE_DECK_* (the token, the password) and no LLAMA_ARG_*');
});
