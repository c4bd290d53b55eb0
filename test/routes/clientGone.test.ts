// A client that gives up is no failure of the service: a request abandoned while its job waits in
// the queue, or while the worker answers, leaves one info line without a stack, and no line at
// error level. The stand-in llama-server
// (test/fixtures/fake-llama-server.mjs) holds the only slot with a slow stream, or says nothing.
import t, { type Test } from 'tap';
import { build, failureOf, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';


/** The service with a published one-slot chat profile `fake` on the stand-in in `mode`. */
async function setUp(t: Test, mode: string): Promise<Built> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = await fakeLlamaServerIn(dir, mode);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model, slots: 1 } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return b;
}

interface Line {
  level: number;
  msg: string;
  stack?: unknown;
  err?: unknown;
}
const lines = (b: Built): Line[] => b.logLines.map((line) => JSON.parse(line) as Line);
const queue = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: unknown[]; waiting: unknown[] } }).queue;

/** A chat request the test can abandon. */
function abandonable(b: Built, stream: boolean) {
  const controller = new AbortController();
  const outcome = failureOf(
    fetch(`${b.apiUrl()}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fake', stream, messages: [{ role: 'user', content: 'x' }] }),
    }),
  );
  return { abort: () => controller.abort(), outcome };
}

/** What the log says of the abandoned requests: one info line per client that left, none at error level. */
async function noErrorFor(t: Test, b: Built, left: number): Promise<void> {
  const said = await until('the abandoned requests logged', async () => {
    const found = lines(b).filter((line) => line.msg === 'the client went away before its answer' || line.msg === 'request failed');
    return found.length >= left ? found : undefined;
  }, 10_000);
  t.same(
    said.map((line) => [line.msg, line.level]),
    Array.from({ length: left }, () => ['the client went away before its answer', 30]),
    'one info line per client that left',
  );
  for (const line of said) t.notOk(line.err ?? line.stack, 'without an error object or a stack');
  t.same(lines(b).filter((line) => line.level >= 50), [], 'no line at error level');
}

t.test('a client that gives up while its job waits in the queue: info, no stack, no error line', async (t) => {
  const b = await setUp(t, 'slow');
  // The only slot: a 3 s stream.
  const first = await b.api('POST', '/v1/chat/completions', { model: 'fake', stream: true, messages: [{ role: 'user', content: 'x' }] });
  t.equal(first.status, 200);
  const waiting = abandonable(b, false);
  await until('the second job to wait', async () => ((await queue(b)).waiting.length === 1 ? true : undefined));
  waiting.abort();
  t.equal(await waiting.outcome, 'AbortError');
  await until('the queue to be empty of it', async () => ((await queue(b)).waiting.length === 0 ? true : undefined));
  await first.text();
  await noErrorFor(t, b, 1);
});

t.test('a client that gives up while the worker answers: info, no stack, no error line', async (t) => {
  const b = await setUp(t, 'silent');
  const asked = abandonable(b, false);
  await until('the job to run', async () => ((await queue(b)).running.length === 1 ? true : undefined));
  asked.abort();
  t.equal(await asked.outcome, 'AbortError');
  await until('the reservation given back', async () => ((await queue(b)).running.length === 0 ? true : undefined));
  await noErrorFor(t, b, 1);
});
