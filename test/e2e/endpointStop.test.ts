// Spec 3.1, row "stop", on the running service: after POST /api/v1/endpoint/stop nothing new is
// accepted and waiting jobs are rejected with endpoint_stopped, but a running SSE answer and a
// running image generation finish, however much longer than the drain limit they take (1 s
// here; the chat stand-in holds its answer after the first token until the test releases it, the
// image stand-in takes 3 s). Then the workers are unloaded. While it stops, the status says so and
// what it waits for. Only the service's own end (SIGTERM) bounds the drain.
import { chmod, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { tinyModelIn } from '../helpers/llama.js';
import { alive, until } from '../helpers/until.js';

const FAKE_LLAMA = fileURLToPath(new URL('../fixtures/fake-llama-server.mjs', import.meta.url));
const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const DRAIN_LIMIT_MS = 1_000;

interface Status {
  status: string;
  stop: { since: string; open_requests: number; running_jobs: number } | null;
  workers: Array<{ kind: string; pid: number | null }>;
  queue: { waiting: unknown[]; running: Array<{ kind: string }> };
}

/** The file whose existence lets the chat stand-in's held answer go on. */
const releaseFile = (dir: string) => path.join(dir, 'release');

async function setUp(t: Test): Promise<{ b: Built; dir: string }> {
  const dir = await tempDir(t);
  // The worker's environment is an allowlist, so the stand-in's mode travels in a wrapper script.
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\nFAKE_LLAMA_MODE=slow FAKE_LLAMA_RELEASE="${releaseFile(dir)}" exec "${process.execPath}" "${FAKE_LLAMA}" "$@"\n`);
  await chmod(wrapper, 0o755);
  const b = await build(t, {
    env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_DRAIN_LIMIT_MS: String(DRAIN_LIMIT_MS) },
  });
  await b.startEndpoint();
  return { b, dir };
}

async function publish(b: Built, body: object): Promise<string> {
  const created = await b.admin('POST', '/api/v1/profiles', body);
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const { id } = (await created.json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return id;
}

const status = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;

/** A fresh connection to the inference port fails with ECONNREFUSED: the listener is closed. */
async function refusedConnection(t: Test, port: number) {
  const error = await fetch(`http://127.0.0.1:${port}/health`, { headers: { authorization: `Bearer ${TOKEN}`, connection: 'close' } }).then(
    (response) => new Error(`answered ${response.status}`),
    (e: unknown) => e as Error & { cause?: { code?: string } },
  );
  t.equal((error as { cause?: { code?: string } }).cause?.code, 'ECONNREFUSED', `a new request is not accepted (${error.message})`);
}

t.test('an admin stop lets a running stream finish past the drain limit, rejects the waiting job, then unloads', async (t) => {
  const { b, dir } = await setUp(t);
  await publish(b, { name: 'slow-chat', category: 'chat', params: { model: await tinyModelIn(dir), slots: 1 } });
  const port = Number(new URL(b.apiUrl()).port);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  const stream = await client.chat.completions.create({ model: 'slow-chat', messages: [{ role: 'user', content: 'x' }], stream: true });
  const chunks: string[] = [];
  let finish: string | null = null;
  const read = (async () => {
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.delta.content) chunks.push(choice.delta.content);
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
  })();
  await until('the first token', async () => (chunks.length > 0 ? true : undefined));
  // One slot: a second answer waits in the queue.
  const waiting = b.api('POST', '/v1/chat/completions', { model: 'slow-chat', messages: [{ role: 'user', content: 'y' }] });
  await until('the second request to wait', async () => ((await status(b)).queue.waiting.length === 1 ? true : undefined));
  const chatPid = (await status(b)).workers.find((w) => w.kind === 'chat')?.pid;
  t.ok(chatPid, 'the chat worker runs');

  const stopStarted = Date.now();
  const stop = b.admin('POST', '/api/v1/endpoint/stop', {});
  const rejected = await waiting;
  t.equal(rejected.status, 503, 'the waiting job is rejected');
  t.equal(((await rejected.json()) as { error: { code: string } }).error.code, 'endpoint_stopped');

  const during = await until('the status to show the stop', async () => {
    const s = await status(b);
    return s.status === 'stopping' ? s : undefined;
  });
  t.match(during.stop, { since: String, open_requests: 1, running_jobs: 1 }, 'the status shows the stop and the one answer it waits for');
  await refusedConnection(t, port);

  await new Promise((resolve) => setTimeout(resolve, DRAIN_LIMIT_MS + 500));
  t.equal((await status(b)).status, 'stopping', 'past the drain limit, the stop still waits for the answer');
  t.ok(alive(chatPid!), 'the chat worker is not unloaded under a running answer');
  t.equal(chunks.length, 1, 'the answer is still held after its first token');

  await writeFile(releaseFile(dir), '');
  await read;
  t.equal(chunks.length, 30, 'the stream finished whole: 30 tokens');
  t.equal(finish, 'length', 'with its finish reason');
  const stopped = await stop;
  t.equal(stopped.status, 200, 'the stop is answered once it is done');
  t.ok(Date.now() - stopStarted > DRAIN_LIMIT_MS + 500, `the stop took ${Date.now() - stopStarted} ms, longer than the drain limit`);
  const after = await status(b);
  t.same([after.status, after.stop, after.workers], ['stopped', null, []], 'then the workers are unloaded');
  await until('the chat worker process to end', async () => (alive(chatPid!) ? undefined : true));
});

t.test('an admin stop lets a running image generation finish past the drain limit', async (t) => {
  const { b, dir } = await setUp(t);
  const model = path.join(dir, 'slow.gguf');
  await writeFile(model, 'slow');
  // 10 steps of 300 ms: 3 s, three times the drain limit.
  await publish(b, { name: 'slow-painter', category: 'image', params: { model, width: 64, height: 64, steps: 10 } });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  const image = client.images.generate({ model: 'service-image', prompt: 'a slow cat' });
  const runs = async () => (await readFile(`${model}.runs.jsonl`, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  const [run] = await until('sd-cli to run', async () => ((await runs()).length > 0 ? runs() : undefined));
  const pid = (JSON.parse(run!) as { pid: number }).pid;

  const stopStarted = Date.now();
  const stop = b.admin('POST', '/api/v1/endpoint/stop', {});
  const during = await until('the status to show the stop', async () => {
    const s = await status(b);
    return s.status === 'stopping' ? s : undefined;
  });
  t.match(during.stop, { open_requests: 1, running_jobs: 1 });
  const answer = await image;
  t.ok(Date.now() - stopStarted > 2 * DRAIN_LIMIT_MS, 'the image finished after the drain limit');
  t.match(answer.data?.[0]?.b64_json, /^iVBORw0KGgo/, 'and its PNG reached the client');
  t.equal((await stop).status, 200);
  t.equal((await status(b)).status, 'stopped');
  t.notOk(alive(pid), 'sd-cli has ended');
  t.same(await readdir(path.join(b.stateDir, 'jobs')), [], 'the job folder is removed');
});

t.test('SIGTERM keeps its bounded drain: a stream still running after the limit is cut', async (t) => {
  const { b, dir } = await setUp(t);
  await publish(b, { name: 'slow-chat', category: 'chat', params: { model: await tinyModelIn(dir) } });
  const response = await b.api('POST', '/v1/chat/completions', { model: 'slow-chat', messages: [{ role: 'user', content: 'x' }], stream: true });
  t.equal(response.status, 200);
  const reader = response.body!.getReader();
  await reader.read();
  const started = Date.now();
  await b.service.shutdown();
  const elapsed = Date.now() - started;
  // The answer is held until a release that never comes: a shutdown that waited for it would never end.
  t.ok(elapsed >= DRAIN_LIMIT_MS, `the shutdown waited the drain limit (${elapsed} ms), then cut the held answer`);
  let text = '';
  for (;;) {
    const part = await reader.read().catch(() => ({ done: true as const, value: undefined }));
    if (part.done) break;
    text += Buffer.from(part.value).toString();
  }
  t.notMatch(text, /\[DONE\]/, 'the stream was cut before its end');
});
