// GET /api/v1/events: the console's server-sent events. A snapshot on connect (status, audio
// policy, every actor, the recent log lines, both test jobs, the enhancers and the model pulls),
// then the changes, coalesced; the sources are let go once the last stream has gone, a shutdown
// ends open streams, and the stream is neither inference traffic nor open to a caller without a
// session.
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import type { ActorView, LogLineView } from '../../src/system/observe/console.types.js';
import { PASSWORD, build, tempDir, type Built } from '../helpers/build.js';
import { tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

interface Frame {
  event: string;
  data: unknown;
}

/** An open events stream: every frame and comment so far, in order. */
interface Stream {
  response: Response;
  frames: Frame[];
  comments: string[];
  /** Resolves with how the stream ended: `end` (the server ended it), or `error` (cut or aborted). */
  ended: Promise<'end' | 'error'>;
  close(): void;
  /** Waits for a frame after the first `from` ones that `match` accepts. */
  next(what: string, match: (frame: Frame) => boolean, from?: number): Promise<Frame>;
}

async function connect(b: Built, headers: Record<string, string> = {}): Promise<Stream> {
  const abort = new AbortController();
  const { cookie } = b.session();
  const response = await fetch(`${b.adminUrl}/api/v1/events`, { headers: { 'x-service-deck': '1', cookie, ...headers }, signal: abort.signal });
  const frames: Frame[] = [];
  const comments: string[] = [];
  const ended = (async (): Promise<'end' | 'error'> => {
    if (!response.body) return 'end';
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for await (const chunk of response.body) {
        pending += decoder.decode(chunk as Uint8Array, { stream: true });
        let end: number;
        while ((end = pending.indexOf('\n\n')) >= 0) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          if (block.startsWith(':')) comments.push(block);
          else {
            const event = /^event: (.+)$/m.exec(block)?.[1] ?? '';
            const data = /^data: (.+)$/m.exec(block)?.[1] ?? 'null';
            frames.push({ event, data: JSON.parse(data) });
          }
        }
      }
    } catch {
      return 'error';
    }
    return 'end';
  })();
  return {
    response,
    frames,
    comments,
    ended,
    close: () => abort.abort(),
    next: (what, match, from = 0) => until(what, async () => frames.slice(from).find(match), 15_000),
  };
}

const listenerCounts = (b: Built) => ({
  actor: b.service.charts.listenerCount('actor'),
  line: b.service.logs.listenerCount('line'),
  counters: b.service.counters.listenerCount('change'),
  created: b.service.profiles.listenerCount('profile.created'),
  profile: b.service.profiles.listenerCount('profile.changed'),
  publication: b.service.profiles.listenerCount('publication.changed'),
  chatTest: b.service.chatTests.listenerCount('change'),
  imageTest: b.service.imageTests.listenerCount('change'),
  enhancers: b.service.enhancers.listenerCount('change'),
  pulls: b.service.pulls.listenerCount('change'),
});

t.test('the snapshot on connect, then the changes', async (t) => {
  const b = await build(t);
  b.service.log.info({ component: 'test' }, 'before the stream');
  const stream = await connect(b);
  t.equal(stream.response.status, 200);
  t.equal(stream.response.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.equal(stream.response.headers.get('x-accel-buffering'), 'no');
  t.equal(stream.response.headers.get('cache-control'), 'no-cache');

  await stream.next('the snapshot', (f) => f.event === 'pulls');
  const names = stream.frames.map((f) => f.event);
  const actors = names.filter((n) => n === 'actor').length;
  const logs = names.filter((n) => n === 'log').length;
  t.same(names.slice(0, 2), ['status', 'audio-policy']);
  t.equal(actors, 10, 'one actor event per actor');
  t.ok(logs >= 1 && logs <= 200, `the recent log lines (${logs})`);
  t.same(names.slice(2 + actors + logs), ['chat-test', 'image-test', 'enhancers', 'pulls'], 'then both test jobs, the enhancers and the model pulls');
  t.match(stream.frames.at(-2)?.data, { t2i: { state: 'not_installed' }, i2i: { state: 'not_installed' }, preview: null });
  t.same(stream.frames.at(-1)?.data, { pulls: [] });
  t.match(stream.frames[0]?.data, { status: 'stopped', counters: { requests: 0 } });
  t.match(stream.frames[1]?.data, { settings: [{ kind: 'tts', mode: 'auto' }, { kind: 'stt', mode: 'auto' }] });
  t.same(
    stream.frames.filter((f) => f.event === 'actor').map((f) => (f.data as ActorView).id).sort(),
    ['audioPolicy.stt', 'audioPolicy.tts', 'chatWorker', 'enhancerWorker', 'imageWorker', 'listener', 'queue', 'sttWorker', 'supervisor', 'ttsWorker'],
  );
  t.ok(stream.frames.some((f) => f.event === 'log' && (f.data as LogLineView).msg === 'before the stream'));
  t.same(stream.frames.at(-4)?.data, { job: null });
  t.same(stream.frames.at(-3)?.data, { job: null });

  const seen = stream.frames.length;
  await b.startEndpoint();
  const running = await stream.next('the listener running', (f) => f.event === 'actor' && (f.data as ActorView).id === 'listener' && (f.data as ActorView).value === 'running', seen);
  t.ok((running.data as ActorView).events.some((e) => e.type === 'endpoint.start'));
  await stream.next('a running status', (f) => f.event === 'status' && (f.data as { status: string }).status === 'running', seen);
  await stream.next('the start in the log', (f) => f.event === 'log' && (f.data as LogLineView).msg === 'inference listener started', seen);

  // Inference traffic changes the counters: a status follows.
  const beforeRequests = stream.frames.length;
  t.equal((await b.api('GET', '/v1/models')).status, 200);
  await stream.next('a status with the request counted', (f) => f.event === 'status' && (f.data as { counters: { requests: number } }).counters.requests === 1, beforeRequests);

  // A profile save changes the status.
  const beforeProfile = stream.frames.length;
  t.equal((await b.admin('POST', '/api/v1/profiles', { name: 'p', category: 'tts', params: {} })).status, 201);
  await stream.next('a status with the profile', (f) => f.event === 'status' && (f.data as { profiles: unknown[] }).profiles.length === 1, beforeProfile);

  // An audio policy change is sent when its view changes.
  const beforeAudio = stream.frames.length;
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'per_request' })).status, 200);
  await stream.next('the new audio policy', (f) => f.event === 'audio-policy' && JSON.stringify(f.data).includes('per_request'), beforeAudio);
  stream.close();
  await stream.ended;
});

t.test('a profile created or deleted reaches the console with the next status, not the next tick', async (t) => {
  // The periodic status is ten minutes away: only the change itself can send the status.
  const b = await build(t, { consoleTiming: { statusMs: 50, statusTickMs: 600_000 } });
  const stream = await connect(b);
  await stream.next('the snapshot', (f) => f.event === 'enhancers');
  const profileIds = (f: Frame) => (f.data as { profiles: Array<{ id: string }> }).profiles.map((p) => p.id);
  const beforeCreate = stream.frames.length;
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'talker', category: 'tts', params: {} });
  t.equal(created.status, 201);
  const { id } = (await created.json()) as { id: string };
  await stream.next('a status with the new profile', (f) => f.event === 'status' && profileIds(f).includes(id), beforeCreate);
  const beforeDelete = stream.frames.length;
  t.equal((await b.admin('DELETE', `/api/v1/profiles/${id}`)).status, 204);
  await stream.next('a status without the deleted profile', (f) => f.event === 'status' && !profileIds(f).includes(id), beforeDelete);
  stream.close();
  await stream.ended;
});

t.test('status is coalesced; a tick and keep-alive come without changes', async (t) => {
  const b = await build(t, { consoleTiming: { statusMs: 400, statusTickMs: 700, keepAliveMs: 250 } });
  await b.startEndpoint();
  const stream = await connect(b);
  await stream.next('the snapshot', (f) => f.event === 'image-test');
  const from = stream.frames.length;
  const started = Date.now();
  await Promise.all(Array.from({ length: 30 }, () => b.api('GET', '/v1/models')));
  await stream.next('the 30 requests counted', (f) => f.event === 'status' && (f.data as { counters: { requests: number } }).counters.requests === 30, from);
  const elapsed = Date.now() - started;
  const statuses = stream.frames.slice(from).filter((f) => f.event === 'status').length;
  t.ok(statuses <= Math.ceil(elapsed / 400) + 1, `${statuses} statuses for 30 requests in ${elapsed} ms: at most one per 400 ms`);
  t.ok(statuses >= 1);

  const quiet = stream.frames.length;
  const comments = stream.comments.length;
  await new Promise((resolve) => setTimeout(resolve, 1_600));
  t.ok(stream.frames.slice(quiet).some((f) => f.event === 'status'), 'the periodic status came without a change');
  t.ok(stream.comments.length - comments >= 3, 'keep-alive comments');
  t.equal(stream.comments[0], ': keep-alive');
  stream.close();
  await stream.ended;
});

t.test('a client that goes away leaves no listener, no timer and no inference count behind', async (t) => {
  const b = await build(t, { consoleTiming: { statusMs: 100, statusTickMs: 200, keepAliveMs: 100 } });
  const before = listenerCounts(b);
  const requestsBefore = b.service.counters.snapshot().requests;
  const first = await connect(b);
  const second = await connect(b);
  await first.next('the first snapshot', (f) => f.event === 'image-test');
  await second.next('the second snapshot', (f) => f.event === 'image-test');
  t.equal(b.service.consoleFeed.size, 2);
  const during = listenerCounts(b);
  t.same(during, { ...before, actor: before.actor + 1, line: before.line + 1, counters: before.counters + 1, created: before.created + 1, profile: before.profile + 1, publication: before.publication + 1, chatTest: before.chatTest + 1, imageTest: before.imageTest + 1, enhancers: before.enhancers + 1, pulls: before.pulls + 1 }, 'one listener per source, however many streams');
  first.close();
  await until('the first stream gone', async () => (b.service.consoleFeed.size === 1 ? true : undefined));
  t.same(listenerCounts(b), during, 'the second stream still holds the sources');
  second.close();
  await until('the second stream gone', async () => (b.service.consoleFeed.size === 0 ? true : undefined));
  t.same(listenerCounts(b), before, 'every listener let go');
  t.same(before.actor + before.line + before.chatTest + before.imageTest, 0);

  const access = await until('the access line of the stream', async () =>
    b.service.logs.lines({ limit: 500 }).find((l) => l.msg === 'access' && l.fields.route === '/api/v1/events'),
  );
  t.match(access.fields, { method: 'GET', route: '/api/v1/events', status: 200 });
  t.equal(b.service.counters.snapshot().requests, requestsBefore, 'not counted as inference traffic');
  t.notOk('/api/v1/events' in b.service.counters.snapshot().by_route);
  const started = Date.now();
  await b.service.shutdown();
  t.ok(Date.now() - started < 5_000, `the admin listener closed at once (${Date.now() - started} ms): no connection of a gone stream was left open`);
});

t.test('shutdown ends open streams instead of waiting for them', async (t) => {
  const b = await build(t);
  const stream = await connect(b);
  await stream.next('the snapshot', (f) => f.event === 'image-test');
  const started = Date.now();
  const result = await Promise.race([
    b.service.shutdown().then(() => 'closed'),
    new Promise((resolve) => setTimeout(() => resolve('hung'), 20_000)),
  ]);
  t.equal(result, 'closed', `the shutdown finished (${Date.now() - started} ms)`);
  const ended = await Promise.race([stream.ended, new Promise((resolve) => setTimeout(() => resolve('open'), 5_000))]);
  t.equal(ended, 'end', 'the server ended the stream cleanly (not a cut connection)');
  t.equal(b.service.consoleFeed.size, 0);
});

t.test('the stream needs the session and the header', async (t) => {
  const b = await build(t);
  let response = await fetch(`${b.adminUrl}/api/v1/events`, { headers: { 'x-service-deck': '1' } });
  t.equal(response.status, 401);
  t.equal(((await response.json()) as { error: { code: string } }).error.code, 'session_required');
  response = await fetch(`${b.adminUrl}/api/v1/events`, { headers: { cookie: b.session().cookie } });
  t.equal(response.status, 403);
  t.equal(((await response.json()) as { error: { code: string } }).error.code, 'header_required');
  t.equal(b.service.consoleFeed.size, 0);
});

const FAKE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/fake-llama-server.mjs');

t.test("a stream ends with its session: the page's logout elsewhere, or a password change", async (t) => {
  const b = await build(t);
  const first = await connect(b);
  await first.next('the snapshot', (f) => f.event === 'status');
  t.equal((await b.admin('DELETE', '/api/v1/session')).status, 204);
  t.equal(await first.ended, 'end', 'the logged-out session\'s stream ends');

  await b.login();
  const second = await connect(b);
  await second.next('the snapshot', (f) => f.event === 'status');
  const other = await connect(b);
  await other.next('the snapshot', (f) => f.event === 'status');
  const changed = await b.admin('POST', '/api/v1/password', { current: PASSWORD, password: 'another long password' });
  t.equal(changed.status, 200);
  t.equal(await second.ended, 'end', 'a password change ends the streams of the older sessions');
  t.equal(await other.ended, 'end');
  await until('no stream left', async () => (b.service.consoleFeed.size === 0 ? true : undefined));
});

t.test('admin API answers are never cached; the stream says no-cache', async (t) => {
  const b = await build(t);
  for (const route of ['/api/v1/endpoint', '/api/v1/session', '/api/v1/profiles']) {
    t.equal((await b.admin('GET', route)).headers.get('cache-control'), 'no-store', route);
  }
  t.equal((await b.admin('POST', '/api/v1/token/rotate', {})).headers.get('cache-control'), 'no-store', 'the rotated token');
  const stream = await connect(b);
  t.equal(stream.response.headers.get('cache-control'), 'no-cache');
  stream.close();
});

t.test('a chat test streams its answer as chat-test events, at most one per 50 ms', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\nFAKE_LLAMA_MODE=slow exec "${process.execPath}" "${FAKE}" "$@"\n`);
  await chmod(wrapper, 0o755);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model } });
  const id = ((await created.json()) as { id: string }).id;
  const stream = await connect(b);
  await stream.next('the snapshot', (f) => f.event === 'image-test');
  const from = stream.frames.length;
  const started = Date.now();
  t.equal((await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: id, messages: [{ role: 'user', content: 'x' }], max_tokens: 64 })).status, 202);
  type Job = { phase: string; answer: string };
  const done = await stream.next('the test done', (f) => f.event === 'chat-test' && (f.data as { job: Job | null }).job?.phase === 'done', from);
  const elapsed = Date.now() - started;
  const jobs = stream.frames.slice(from).filter((f) => f.event === 'chat-test').map((f) => (f.data as { job: Job }).job);
  const answers = jobs.filter((j) => j.phase === 'running').map((j) => j.answer.length);
  t.ok(answers.length >= 5, `the answer arrived piece by piece (${answers.length} running events)`);
  t.ok(answers.every((n, i) => i === 0 || n >= (answers[i - 1] ?? 0)), 'each event has at least the answer of the one before');
  t.ok((done.data as { job: Job }).job.answer.length > (answers[0] ?? 0), 'the last has the whole answer');
  t.ok(jobs.length <= Math.ceil(elapsed / 50) + 2, `${jobs.length} events in ${elapsed} ms: at most one per 50 ms`);
  t.same([...new Set(jobs.map((j) => j.phase))].filter((p) => p !== 'running'), ['waiting', 'starting', 'done'].filter((p) => jobs.some((j) => j.phase === p)));
  stream.close();
  await stream.ended;
});

t.test('an image test shows its steps and its end as image-test events, without the image or the prompt', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url)), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const model = path.join(dir, 'slow.gguf');
  await writeFile(model, 'slow');
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model, width: 64, height: 72, steps: 4, seed: 7 } });
  t.equal(created.status, 201);
  const id = ((await created.json()) as { id: string }).id;
  const stream = await connect(b);
  await stream.next('the snapshot', (f) => f.event === 'image-test');
  const from = stream.frames.length;
  const prompt = 'PROMPT-a-lighthouse-7788';
  t.equal((await b.admin('POST', '/api/v1/image-tests', { profile_id: id, prompt })).status, 202);
  type Job = { phase: string; progress: { step: number; steps: number } | null; b64_png: string | null; has_image: boolean };
  const done = await stream.next('the image done', (f) => f.event === 'image-test' && (f.data as { job: Job }).job?.phase === 'done', from);
  const jobs = stream.frames.slice(from).filter((f) => f.event === 'image-test').map((f) => (f.data as { job: Job }).job);
  const steps = [...new Set(jobs.filter((j) => j.phase === 'running' && j.progress).map((j) => j.progress?.step))];
  t.ok(steps.length >= 2, `the steps arrived one by one (${steps.join(', ')})`);
  t.match((done.data as { job: Job }).job, { phase: 'done', progress: { step: 4, steps: 4 }, b64_png: null, has_image: true });
  t.ok(jobs.every((j) => j.b64_png === null), 'never the image itself');
  t.notOk(JSON.stringify(stream.frames).includes(prompt), 'nor the prompt, in any event');
  const full = (await (await b.admin('GET', '/api/v1/image-tests')).json()) as { job: Job };
  t.type(full.job.b64_png, 'string', 'the image is fetched from GET /api/v1/image-tests');
  stream.close();
  await stream.ended;
});
