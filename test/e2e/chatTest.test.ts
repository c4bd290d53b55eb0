// The operator's chat test (spec 2.5, 4.7) against the real llama-server: timings and usage from
// the final stream reply, through either door (chat completions or the Responses API), cancel
// while streaming and during its own model start, the explicit unload (refused with active
// requests), the route errors, and nothing of prompt or answer in the log.
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { build, tempDir, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

interface Job {
  id: string;
  api: string;
  phase: string;
  answer: string;
  finish_reason: string | null;
  timings: { prefill: { tokens: number; ms: number; tokens_per_second: number } | null; generation: { tokens: number; ms: number; tokens_per_second: number } | null };
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; cached_tokens: number | null } | null;
  error: { code: string | null; message: string } | null;
  position: number | null;
  started_at: string;
  finished_at: string | null;
}

const job = async (b: Built) => ((await (await b.admin('GET', '/api/v1/chat-tests')).json()) as { job: Job | null }).job;
const chatWorker = async (b: Built) =>
  ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; state: string; pid: number | null }> }).workers.find((w) => w.kind === 'chat');
const ended = (b: Built) => until('the chat test to end', async () => {
  const current = await job(b);
  return current && ['done', 'cancelled', 'failed'].includes(current.phase) ? current : undefined;
});

const PROMPT = 'Secret prompt words: aubergine lighthouse';

t.test('a chat test reports timings and usage; a cancel leaves them empty; unload is refused while it runs', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir, 'slow.gguf', { embedding: 256, heads: 8, layers: 8 });
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'unpublished', category: 'chat', params: { model, context: 4096 } });
  const id = ((await created.json()) as { id: string }).id;

  t.same(await job(b), null, 'no job before the first test');
  const started = await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: PROMPT }], max_tokens: 16 });
  t.equal(started.status, 202, 'the test starts without a publication');
  const done = await ended(b);
  t.equal(done.phase, 'done');
  t.equal(done.finish_reason, 'length');
  t.ok(done.answer.length > 0, 'the streamed answer is kept in RAM');
  t.equal(done.usage?.completion_tokens, 16, 'usage from the final stream reply');
  t.equal(done.timings.generation?.tokens, 16, 'generation tokens');
  t.ok((done.timings.generation?.tokens_per_second ?? 0) > 0, 'generation tokens per second');
  // llama-server's own figure (timings.predicted_per_second) is its generated tokens over its
  // generation milliseconds, where it counts the tokens after the first: between n - 1 and n.
  const generation = done.timings.generation ?? { tokens: 0, ms: 0, tokens_per_second: 0 };
  const [low, high] = [((generation.tokens - 1) * 1000) / generation.ms, (generation.tokens * 1000) / generation.ms];
  t.ok(
    generation.tokens_per_second >= low - 0.01 && generation.tokens_per_second <= high + 0.01,
    `tokens per second (${generation.tokens_per_second}) is the worker's own: ${generation.tokens - 1} to ${generation.tokens} tokens over its ${generation.ms} ms (${low.toFixed(2)} to ${high.toFixed(2)})`,
  );
  const whole = Date.parse(done.finished_at ?? '') - Date.parse(done.started_at);
  t.ok(generation.ms < whole, `the generation (${generation.ms} ms) is a part of the job (${whole} ms), which loaded the model first`);
  t.ok(generation.tokens_per_second > (generation.tokens * 1000) / whole, 'so the speed is above the tokens over the whole job: the model load is not in it');
  t.ok((done.timings.prefill?.tokens ?? 0) > 0 && done.timings.prefill?.tokens === done.usage?.prompt_tokens, 'the first prefill computes the whole prompt');
  t.equal((await chatWorker(b))?.state, 'loaded', 'answer finished: the worker stays loaded');

  // The same prompt again: the worker reuses its cache; prefill counts only computed tokens, usage the whole input.
  await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: PROMPT }], max_tokens: 4 });
  const again = await ended(b);
  t.equal(again.phase, 'done');
  t.ok((again.usage?.cached_tokens ?? 0) > 0, 'the second run reused context');
  t.ok((again.timings.prefill?.tokens ?? Infinity) < (again.usage?.prompt_tokens ?? 0), 'prefill counts only the computed tokens, usage the whole input');
  t.equal(done.api, 'chat_completions', 'the default door is chat completions');

  // The other door (an extension, off by default: test/routes/extensions.test.ts has the refusal):
  // the answer, its end and its usage from the Responses events; the worker's timings.
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'the Responses API turned on');
  const viaResponses = await b.admin('POST', '/api/v1/chat-tests/start', {
    profile_id: id,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: PROMPT }],
    max_tokens: 8,
    api: 'responses',
  });
  t.equal(viaResponses.status, 202);
  const door = await ended(b);
  t.match(door, { api: 'responses', phase: 'done', finish_reason: 'max_output_tokens', usage: { completion_tokens: 8 }, timings: { generation: { tokens: 8 } } }, 'a test through the Responses API');
  t.ok(door.answer.length > 0, `with its answer (${JSON.stringify(door.answer)})`);
  t.ok((door.usage?.prompt_tokens ?? 0) > (again.usage?.prompt_tokens ?? 0), 'the system message reached the worker');

  // A long test: the unload is refused while it runs, the cancel closes its connection.
  const long = await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: 'go on' }], max_tokens: 4000 });
  t.equal(long.status, 202);
  await until('the test to stream', async () => ((await job(b))?.answer.length ?? 0) > 0 ? true : undefined);
  const busy = await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: 'x' }] });
  t.equal(busy.status, 409, 'one chat test at a time');
  const refused = await b.admin('POST', '/api/v1/chat-tests/unload', {});
  t.equal(refused.status, 409, 'unload with active requests is rejected');
  t.equal(((await refused.json()) as { error: { code: string } }).error.code, 'active_requests');
  const cancel = await b.admin('POST', '/api/v1/chat-tests/cancel', {});
  t.equal(cancel.status, 200);
  const cancelled = ((await cancel.json()) as { job: Job }).job;
  t.equal(cancelled.phase, 'cancelled');
  t.same([cancelled.timings.prefill, cancelled.timings.generation, cancelled.usage], [null, null, null], 'measurements stay empty after a cancel');
  const worker = await chatWorker(b);
  t.equal(worker?.state, 'loaded', 'the cancel closed only its connection: the worker stays loaded');

  const unloaded = await b.admin('POST', '/api/v1/chat-tests/unload', {});
  t.equal(unloaded.status, 200, 'the explicit unload without active requests');
  const answer = (await unloaded.json()) as { unloaded: boolean; status: { workers: Array<{ kind: string }> } };
  t.equal(answer.unloaded, true);
  t.notOk(answer.status.workers.some((w) => w.kind === 'chat'), 'the answer comes once the worker is gone');
  t.throws(() => process.kill(worker!.pid!, 0), 'its process is gone');

  const log = b.logLines.join('');
  t.notMatch(log, /aubergine|lighthouse/, 'the prompt never reaches the log');
  t.notMatch(log, done.answer.slice(0, 12), 'the answer never reaches the log');
});

t.test("tokens per second are the worker's own generation figures: queue waiting and model loading are left out", async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  // The stand-in llama-server takes 2 s to load; asked for an answer it streams 30 tokens over
  // 3 s and reports its own timings: 30 tokens in 3000 ms, 10 per second.
  const fake = fileURLToPath(new URL('../fixtures/fake-llama-server.mjs', import.meta.url));
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\nsleep 2\nFAKE_LLAMA_MODE=slow exec "${process.execPath}" "${fake}" "$@"\n`);
  await chmod(wrapper, 0o755);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const make = async (name: string) => ((await (await b.admin('POST', '/api/v1/profiles', { name, category: 'chat', params: { model, slots: 1 } })).json()) as { id: string }).id;
  const busy = await make('busy');
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: busy, enabled: true })).status, 200);
  const tested = await make('tested');

  // An API answer of another profile holds the chat worker: the test waits in the queue, then its own model loads.
  const api = b.api('POST', '/v1/chat/completions', { model: 'busy', stream: true, messages: [{ role: 'user', content: 'x' }] });
  await until('the API answer to stream', async () => ((await chatWorker(b))?.state === 'loaded' ? true : undefined));
  t.equal((await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: tested, messages: [{ role: 'user', content: 'y' }], max_tokens: 30 })).status, 202);
  const waiting = await job(b);
  t.match(waiting, { phase: 'waiting', position: 1 }, 'the test waits in the queue behind the API answer');
  t.match(await (await api).text(), /data: \[DONE\]/, 'the API answer ended whole');
  const done = await ended(b);
  t.equal(done.phase, 'done');
  t.same(done.timings.generation, { tokens: 30, ms: 3000, tokens_per_second: 10 }, "the worker's own generation figures, as its timings gave them");
  const whole = (Date.parse(done.finished_at ?? '') - Date.parse(done.started_at)) / 1000;
  // Queue wait (the rest of the API answer), 2 s of loading and the 3 s answer: the whole job is
  // far slower than 10 tokens a second, and none of that is in the figure.
  t.ok(whole >= 5, `the job took ${whole} s from its start to its end`);
  t.ok(30 / whole <= 6, `over the whole job it made ${(30 / whole).toFixed(2)} tokens a second, not the 10 reported`);
});

t.test('cancel during its own model start aborts that start', async (t) => {
  const dir = await tempDir(t);
  // A llama-server that never becomes ready: the start stays in loading until it is cancelled.
  const fake = path.join(dir, 'llama-server');
  await writeFile(fake, '#!/bin/sh\necho $$ > "$(dirname "$0")/pid"\nexec sleep 600\n');
  await chmod(fake, 0o755);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: fake, SERVICE_DECK_GPUS: 'none' } });
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'never-ready', category: 'chat', params: { model } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: 'x' }], max_tokens: 4 });
  const loading = await until('the worker to load', async () => {
    const worker = await chatWorker(b);
    return worker?.state === 'loading' && worker.pid ? worker : undefined;
  });
  t.equal((await job(b))?.phase, 'starting', 'the job waits for its own model start');
  const cancel = await b.admin('POST', '/api/v1/chat-tests/cancel', {});
  t.equal(((await cancel.json()) as { job: Job }).job.phase, 'cancelled');
  await until('the start to be aborted', async () => ((await chatWorker(b)) ? undefined : true));
  t.throws(() => process.kill(loading.pid!, 0), 'the loading process was ended');
});

t.test('chat test route errors', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  const chat = ((await (await b.admin('POST', '/api/v1/profiles', { name: 'c', category: 'chat', params: { model } })).json()) as { id: string }).id;
  const missingFile = ((await (await b.admin('POST', '/api/v1/profiles', { name: 'm', category: 'chat', params: { model: path.join(dir, 'none.gguf') } })).json()) as { id: string }).id;
  const tts = ((await (await b.admin('POST', '/api/v1/profiles', { name: 's', category: 'tts', params: {} })).json()) as { id: string }).id;
  const start = async (body: unknown) => {
    const response = await b.admin('POST', '/api/v1/chat-tests/start', body);
    return [response.status, ((await response.json()) as { error?: { code: string } }).error?.code];
  };
  const messages = [{ role: 'user', content: 'x' }];
  t.same(await start({ profile_id: chat, messages, max_tokens: 4097 }), [400, 'invalid_value'], 'max_tokens is at most 4096');
  t.same(await start({ profile_id: 'nope', messages }), [404, 'profile_not_found']);
  t.same(await start({ profile_id: tts, messages }), [400, 'invalid_value'], 'only chat profiles');
  t.same(await start({ profile_id: missingFile, messages }), [409, 'profile_not_executable'], 'a profile with a blocker');
  t.same(await start({ profile_id: chat, messages: [] }), [400, 'invalid_value'], 'at least one message');
  t.same(await start({ profile_id: chat, messages, temperature: 1 }), [400, 'unknown_parameter']);
  t.same(await start({ profile_id: chat, messages, api: 'assistants' }), [400, 'invalid_value'], 'chat_completions or responses only');
  t.same(await start({ profile_id: chat, messages: [{ role: 'user', content: [{ type: 'image_url' }] }] }), [400, 'invalid_value'], 'text messages only');
  const cancel = await b.admin('POST', '/api/v1/chat-tests/cancel', {});
  t.same(((await cancel.json()) as { cancelled: boolean }).cancelled, false, 'nothing to cancel');
  const noHeader = await fetch(`${b.adminUrl}/api/v1/chat-tests`);
  t.equal(noHeader.status, 403, 'the admin header is required');
  await b.startEndpoint();
  const bearer = await b.api('GET', '/api/v1/chat-tests');
  t.same([bearer.status, ((await bearer.json()) as { error?: { code: string } }).error?.code], [404, 'unknown_route'], 'the inference listener, with the right token, has no chat test route');
});
