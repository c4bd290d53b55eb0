// The console's worker tools through the admin API, against the stand-in llama-server
// (test/fixtures/fake-llama-server.mjs, mode `slow`: a 3 s stream that ends with the worker's usage
// and timings), wrapped so that its stderr also carries what a verbose llama-server prints: a
// formatted prompt, a request body, a token it generated, its key. The explicit unload of any
// worker with the spec's rule (3.2: rejected while a request is active), unknown workers, the
// worker's stderr lines (kept, bounded, redacted), and the recent requests (numbers and names,
// never the prompt or the answer).
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { build, tempDir } from '../helpers/build.js';
import { FAKE_LLAMA_SERVER, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

const PROMPT = 'Tell me about the purple walrus';
const KEY = 'c2VjcmV0LWtleS10aGF0LW11c3Qtbm90LWJlLXNob3du';

t.test('unload any worker with the rule, its stderr redacted, and the recent requests without their text', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = path.join(dir, 'llama-server');
  const lines = [
    'main: loading model',
    `srv  update_slots: formatted prompt: <|im_start|>user ${PROMPT}`,
    `srv  log_server_r: request:  {"messages":[{"role":"user","content":"${PROMPT}"}]}`,
    `slot process_tok: next token: 123 'purple walrus'`,
    `main: api key: ${KEY}`,
    'prompt eval time =      12.00 ms /     5 tokens',
  ];
  const printed = path.join(dir, 'stderr.txt');
  await writeFile(printed, `${lines.join('\n')}\n`);
  await writeFile(wrapper, `#!/bin/sh\ncat "${printed}" >&2\nFAKE_LLAMA_MODE=slow exec "${process.execPath}" "${FAKE_LLAMA_SERVER}" "$@"\n`, { mode: 0o755 });
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'talker', category: 'chat', params: { model } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });

  // Unknown workers are 404 on both routes.
  for (const [method, url] of [['POST', '/api/v1/workers/llama/unload'], ['GET', '/api/v1/workers/llama/stderr']] as const) {
    const response = await b.admin(method, url, method === 'POST' ? {} : undefined);
    t.equal(response.status, 404, `${method} ${url}`);
    t.match(await response.json(), { error: { code: 'worker_not_found', message: /No worker "llama": the workers are chat, image, tts, stt, enhancer/ } });
  }

  // A stream holds the worker: its unload is rejected while the request is active.
  const streaming = await b.api('POST', '/v1/chat/completions', { model: 'talker', messages: [{ role: 'user', content: PROMPT }], stream: true });
  t.equal(streaming.status, 200);
  const reader = streaming.body!.getReader();
  await reader.read();
  const refused = await b.admin('POST', '/api/v1/workers/chat/unload', {});
  t.equal(refused.status, 409, 'rejected with an active request');
  t.match(await refused.json(), { error: { type: 'conflict', code: 'active_requests', message: /the chat worker has 1 active request/ } });
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { workers: [{ kind: 'chat', state: 'loaded' }] }, 'still loaded');
  while (!(await reader.read()).done) {
    // the rest of the stream
  }

  // The recent requests: the stream's measures, and nothing of its text.
  const recent = await until(
    'the stream in the recent requests',
    async () => {
      const body = (await (await b.admin('GET', '/api/v1/requests')).json()) as { requests: Array<Record<string, unknown>>; limit: number };
      return body.requests.length > 0 ? body : undefined;
    },
    10_000,
  );
  t.equal(recent.limit, 200);
  t.match(recent.requests[0], {
    method: 'POST',
    route: '/v1/chat/completions',
    profile: 'talker',
    status: 200,
    code: null,
    stream: true,
    prompt_tokens: 5,
    completion_tokens: 30,
    tokens_per_second: 10,
  });
  const [one] = recent.requests as Array<{ queue_ms: number; ttft_ms: number; duration_ms: number }>;
  t.ok(one!.queue_ms >= 0 && one!.ttft_ms > 0 && one!.duration_ms >= one!.ttft_ms, `queue ${one!.queue_ms} ms, first token ${one!.ttft_ms} ms, done ${one!.duration_ms} ms`);
  t.notMatch(JSON.stringify(recent), /walrus|purple/, 'no prompt or answer text in the record');
  const unknownModel = await b.api('POST', '/v1/chat/completions', { model: 'my secret model name', messages: [{ role: 'user', content: 'x' }] });
  t.equal(unknownModel.status, 404);
  const refusedRecord = await until(
    'the refusal in the recent requests',
    async () => ((await (await b.admin('GET', '/api/v1/requests')).json()) as { requests: Array<Record<string, unknown>> }).requests.find((r) => r.status === 404),
    10_000,
  );
  t.match(refusedRecord, { profile: null, code: 'model_not_found', ttft_ms: null, tokens_per_second: null }, "a client's model name that is no profile is not kept");

  // The worker's stderr: the harmless lines as they were, the rest withheld or redacted.
  const stderr = (await (await b.admin('GET', '/api/v1/workers/chat/stderr')).json()) as { kind: string; lines: Array<{ text: string; generation: number }>; limit: number; line_chars: number };
  t.match(stderr, { kind: 'chat', limit: 200, line_chars: 300 });
  const texts = stderr.lines.map((line) => line.text);
  t.same(texts.slice(0, 6), [
    'main: loading model',
    '[line withheld: it may quote a prompt or an answer]',
    '[line withheld: it may quote a prompt or an answer]',
    'slot process_tok: next token: 123 "…"',
    'main: api key: [redacted]',
    'prompt eval time =      12.00 ms /     5 tokens',
  ]);
  t.notMatch(JSON.stringify(stderr), new RegExp(`walrus|purple|${KEY}`), 'no prompt, answer or key');

  // Idle now: the unload goes through, and the process is gone when it answers.
  const unloaded = await b.admin('POST', '/api/v1/workers/chat/unload', {});
  t.equal(unloaded.status, 200);
  const answer = (await unloaded.json()) as { unloaded: boolean; status: { workers: Array<{ kind: string }> } };
  t.equal(answer.unloaded, true);
  t.same(answer.status.workers.filter((w) => w.kind === 'chat'), [], 'no chat worker left in the status');
  t.ok(b.logLines.some((line) => line.includes('explicit unload by the operator')), 'the unload is logged with its reason');
  // An unload of a worker that is not loaded changes nothing and says so.
  const again = await b.admin('POST', '/api/v1/workers/tts/unload', {});
  t.equal(again.status, 200);
  t.equal(((await again.json()) as { unloaded: boolean }).unloaded, true);
});
