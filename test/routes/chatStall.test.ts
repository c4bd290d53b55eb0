// A chat worker held by one answer: llama-server samples every slot on one loop, and a
// grammar that explodes holds that loop, so no other chat on the worker gets a token and closing a
// connection frees nothing. The stand-in llama-server (test/fixtures/fake-llama-server.mjs, mode
// `stall`) does the same on demand: a request with a response_format never gets a token, and from
// then on neither GET /slots nor any other chat is answered. With the stall limit shortened, a
// held worker is restarted as soon as another request waits for it (and not before), its answers
// fail with a clear 502 (or the error event of a stream), and the waiting request runs on the new
// start; a slow answer whose worker answers the probe is left alone.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { CHAT_LIMITS } from '../../src/workers/chat/chatRequest.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

/** 300 ms without a token before the probe, 300 ms more without its answer. The idle limit stays far above. */
const limits = { ...CHAT_LIMITS, stallMs: 300, idleMs: 30_000 };
const HELD = /^The chat worker gave a request no first token for \d+ s and answered no status probe while other requests waited: one answer held it, so it was restarted\. The likely cause is the grammar of a response_format, text\.format or tool schema it could not follow; a request without one can be sent again\.$/;

async function setUp(t: Test, slots: number): Promise<Built & { events: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const events = path.join(dir, 'events');
  const wrapper = await fakeLlamaServerIn(dir, 'stall', events);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' }, chatLimits: limits });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model, slots } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return Object.assign(b, { events });
}

interface Status {
  queue: { running: unknown[]; waiting: unknown[] };
  workers: Array<{ kind: string; pid: number | null; state: string }>;
}
const status = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
const chatPid = async (b: Built) => (await status(b)).workers.find((w) => w.kind === 'chat' && w.state === 'loaded')?.pid;
/** A plain chat; the stand-in answers it after `ms` (its max_tokens) unless its loop is held. */
const plain = (b: Built, ms = 1) => b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], max_tokens: ms });
/** A chat whose structured output holds the stand-in's loop. */
const holding = (b: Built, stream = false) => b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_object' }, ...(stream ? { stream: true } : {}) });
const heldLogged = (b: Built) => until('the held worker to be logged', async () => (b.logLines.some((line) => line.includes('the chat worker answers no status probe')) ? true : undefined), 10_000);

t.test('a held worker is restarted once another request waits, not before: the held answer gets a clear 502, the waiting one runs', async (t) => {
  const b = await setUp(t, 1);
  const first = await plain(b);
  t.equal(first.status, 200, 'the worker answers');
  await first.text();
  const pid = await chatPid(b);
  const held = holding(b);
  await heldLogged(b);
  const alone = await status(b);
  t.same([alone.queue.running.length, alone.queue.waiting.length], [1, 0], 'with nobody waiting, the held answer goes on');
  t.equal(await chatPid(b), pid, 'and the worker is not restarted');

  const waiting = plain(b);
  const failed = await held;
  t.equal(failed.status, 502);
  const body = (await failed.json()) as { error: { code: string; type: string; message: string } };
  t.match(body.error, { type: 'server_error', code: 'worker_failed', message: HELD }, 'the held answer says what happened and why');
  const served = await waiting;
  t.equal(served.status, 200, 'the waiting request runs on the new start');
  await served.text();
  const restarted = await chatPid(b);
  t.ok(restarted !== undefined && restarted !== pid, `a new process (pid ${pid} → ${restarted})`);
  t.match(b.logLines.join('\n'), /"component":"chat","job_id":"[^"]+","no_token_s":\d+/, 'the operator reads it in the log');
});

t.test('a held stream ends with the error event, and the answer beside it on the held worker fails the same way', async (t) => {
  const b = await setUp(t, 2);
  const first = await plain(b);
  t.equal(first.status, 200, 'the worker answers');
  await first.text();
  // The headers go out with the worker's first chunk: none comes, so the client waits for them.
  const stream = holding(b, true);
  await heldLogged(b);
  // The second slot is free, so this one runs, on a loop that answers nothing: a waiting client all the same.
  const beside = await plain(b);
  t.equal(beside.status, 502);
  t.match(((await beside.json()) as { error: unknown }).error, { code: 'worker_failed', message: HELD });
  const held = await stream;
  t.equal(held.status, 200, 'the stream had begun');
  const events = (await held.text()).trim().split('\n\n');
  t.equal(events.length, 1, 'no token came, only the error event');
  t.match(JSON.parse((events[0] ?? '').replace(/^data: /, '')), { error: { type: 'server_error', code: 'worker_failed', message: HELD } });
  const next = await plain(b);
  t.equal(next.status, 200, 'the next request runs on the new start');
  await next.text();
});

t.test('a slow answer whose worker answers the probe is left alone while another request waits', async (t) => {
  const b = await setUp(t, 1);
  const first = await plain(b);
  t.equal(first.status, 200);
  await first.text();
  const pid = await chatPid(b);
  // No token for 2 s (a buffered answer comes whole), while the loop answers every probe.
  const slow = plain(b, 2_000);
  await until('the slow answer to run', async () => ((await status(b)).queue.running.length === 1 ? true : undefined), 5_000);
  const waiting = plain(b);
  await until('the worker to be probed and to answer twice', async () => {
    const lines = (await readFile(b.events, 'utf8')).split('\n');
    return lines.filter((line) => line === 'probe answered').length >= 2 ? true : undefined;
  }, 10_000);
  const answers = [await slow, await waiting];
  t.same(answers.map((answer) => answer.status), [200, 200], 'the slow answer comes, then the waiting one');
  await Promise.all(answers.map((answer) => answer.text()));
  t.equal(await chatPid(b), pid, 'on the same worker');
  t.notOk(b.logLines.some((line) => line.includes('the chat worker answers no status probe')), 'nothing was taken for held');
});
