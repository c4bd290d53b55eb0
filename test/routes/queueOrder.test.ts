// The queue order through the real service (src/config.ts → the supervisor's input): two one-slot
// chat profiles on the stand-in llama-server (test/fixtures/fake-llama-server.mjs, `slow`: a 3 s
// stream). A streams, then a request for B waits for the switch, then a second request for A
// arrives. Swap-aware (the default): when A's stream ends, the second A request takes the free
// slot past the waiting switch, and the status says why B waits; strict: B goes first.
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

interface QueueJob {
  profile_id: string;
  phase: string;
  reason: string | null;
}

async function setUp(t: Test, env: NodeJS.ProcessEnv): Promise<{ b: Built; ids: Record<'a' | 'b', string> }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = await fakeLlamaServerIn(dir, 'slow');
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none', ...env } });
  await b.startEndpoint();
  const ids = { a: '', b: '' };
  for (const name of ['a', 'b'] as const) {
    const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'chat', params: { model, slots: 1 } });
    ids[name] = ((await created.json()) as { id: string }).id;
    await b.admin('POST', '/api/v1/endpoint/profile', { id: ids[name], enabled: true });
  }
  return { b, ids };
}

const queue = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: QueueJob[]; waiting: QueueJob[] } }).queue;

/** A streamed chat request; resolves with its profile name once its stream has ended. */
async function ask(b: Built, model: 'a' | 'b', finished: string[]): Promise<void> {
  const response = await fetch(`${b.apiUrl()}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, stream: true, messages: [{ role: 'user', content: 'x' }] }),
  });
  if (response.status !== 200) throw new Error(`${model}: HTTP ${response.status}`);
  await response.text();
  finished.push(model);
}

/** A streams; B waits for the switch; a second A arrives; each step waits on the queue's state. */
async function interleave(b: Built, ids: Record<'a' | 'b', string>) {
  const finished: string[] = [];
  const starts: string[] = [];
  b.service.supervisor.on('gpu.granted', (event) => {
    if (event.start && event.worker === 'chat') starts.push(b.service.supervisor.getSnapshot().context.workers.chat.profileId === ids.a ? 'a' : 'b');
  });
  const first = ask(b, 'a', finished);
  await until('A streams', async () => ((await queue(b)).running.some((j) => j.profile_id === ids.a && j.phase === 'running') ? true : undefined), 20_000);
  const switching = ask(b, 'b', finished);
  await until('B waits', async () => ((await queue(b)).waiting.length === 1 ? true : undefined));
  const second = ask(b, 'a', finished);
  await until('the second A waits too', async () => ((await queue(b)).waiting.length === 2 ? true : undefined));
  const waiting = (await queue(b)).waiting;
  await Promise.all([first, switching, second]);
  return { finished, starts, waiting };
}

t.test('swap-aware (default): the second A request takes the slot past the waiting switch to B; one start each', async (t) => {
  const { b, ids } = await setUp(t, {});
  t.match(b.service.supervisor.getSnapshot().context.scheduling, { order: 'swap-aware', switchMaxWaitMs: 30_000 });
  // A chat overtakes a switch only once its profile's answer time is measured (a p95 that ends
  // before the switch's wait limit; unmeasured counts as the 600 s stream limit): one A answer first.
  await ask(b, 'a', []);
  const { finished, starts, waiting } = await interleave(b, ids);
  t.match(waiting, [
    { profile_id: ids.b, reason: /^behind the loaded profile's requests, at most \d+ s more$/ },
    { profile_id: ids.a, reason: null },
  ], 'the status says why B waits');
  t.same(finished, ['a', 'a', 'b']);
  t.same(starts, ['b'], 'one worker start, for B: A was loaded by its first answer');
});

t.test('strict (SERVICE_DECK_QUEUE_ORDER=strict): B goes first, then A loads again', async (t) => {
  const { b, ids } = await setUp(t, { SERVICE_DECK_QUEUE_ORDER: 'strict', SERVICE_DECK_SWITCH_MAX_WAIT_MS: '45000' });
  t.match(b.service.supervisor.getSnapshot().context.scheduling, { order: 'strict', switchMaxWaitMs: 45_000 });
  const { finished, starts, waiting } = await interleave(b, ids);
  t.same(
    waiting.map((j) => j.reason),
    [null, null],
    'plain FIFO: no reason',
  );
  t.same(finished, ['a', 'b', 'a']);
  t.same(starts, ['a', 'b', 'a'], 'three worker starts');
});
