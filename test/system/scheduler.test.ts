// The reservation door of the real service: a lease for a route, a client that leaves while it
// waits, the HTTP answers of refusals and revocations, the GPU watcher noticing a foreign
// process that appears on the chat worker's GPU (only our own worker, which the supervisor started
// with the grant, is unloaded), and the time a lease held its reservation, told to the supervisor
// with its release.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { waitingOrder } from '../../machines/supervisor/index.js';
import { encodeGguf } from '../../src/adapters/gguf.js';
import { toApiError } from '../../src/routes/errors.js';
import { ReservationAbandoned, ReservationDenied, ReservationRevoked, Scheduler, type JobRequest } from '../../src/system/scheduler.js';
import { build, tempDir } from '../helpers/build.js';
import { fakeLlamaServerIn } from '../helpers/llama.js';
import { supervisorHarness } from '../helpers/supervisor.js';
import { until } from '../helpers/until.js';

const stt = (): JobRequest => ({
  kind: 'stt',
  source: 'api',
  profileId: 'p-stt',
  revision: 1,
  slots: 1,
  device: 'cpu',
  whenBusy: 'wait',
  profile: { category: 'stt', params: { backend: 'pocketsphinx' } },
});

t.test('refusals and revocations answer with the contract codes', async (t) => {
  const cases: Array<[Error, number, string, Record<string, string>?]> = [
    [new ReservationDenied('queue_full', 'full', 10), 429, 'queue_full', { 'retry-after': '10' }],
    [new ReservationDenied('queue_timeout', 'late'), 503, 'queue_timeout'],
    [new ReservationDenied('profile_changed', 'again'), 409, 'profile_changed'],
    [new ReservationDenied('image_busy', 'busy'), 409, 'image_busy'],
    [new ReservationDenied('endpoint_stopped', 'stop'), 503, 'endpoint_stopped'],
    [new ReservationDenied('resources_busy', 'gpu'), 503, 'resources_busy'],
    [new ReservationDenied('insufficient_memory', 'ram'), 503, 'insufficient_memory'],
    [new ReservationRevoked('worker_failed', 'died'), 502, 'worker_failed'],
    [new ReservationRevoked('resources_busy', 'foreign'), 503, 'resources_busy'],
  ];
  for (const [error, status, code, headers] of cases) {
    const api = toApiError(error);
    t.equal(api.statusCode, status, code);
    t.equal(api.code, code);
    t.equal(api.message, error.message);
    if (headers) t.same(api.headers, headers);
  }
});

t.test('a client that leaves while its job waits: the job leaves the queue at once', async (t) => {
  const b = await build(t);
  const first = await b.service.scheduler.reserve(stt());
  const client = new AbortController();
  let position = 0;
  const second = b.service.scheduler.reserve(stt(), { signal: client.signal, onQueued: (p) => (position = p) });
  const third = b.service.scheduler.reserve(stt());
  await until('both jobs to wait', async () => (waitingOrder(b.service.supervisor.getSnapshot().context.jobs).length === 2 && position > 0 ? true : undefined));
  t.equal(position, 1);
  t.equal(waitingOrder(b.service.supervisor.getSnapshot().context.jobs).length, 2);
  client.abort();
  await t.rejects(second, ReservationAbandoned);
  t.equal(waitingOrder(b.service.supervisor.getSnapshot().context.jobs).length, 1, 'it left at once');
  first.release();
  const lease = await third;
  t.equal(lease.start, null, 'the next job takes the loaded worker');
  lease.release();
  t.same(b.service.supervisor.getSnapshot().context.jobs, {}, 'nothing is left behind');
  const gone = new AbortController();
  gone.abort();
  await t.rejects(b.service.scheduler.reserve(stt(), { signal: gone.signal }), ReservationAbandoned);
});

t.test('a foreign process that appears on the chat worker’s GPU ends only our own chat worker', async (t) => {
  const dir = await tempDir(t);
  const gpus = path.join(dir, 'gpus.json');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24576 }]));
  const model = path.join(dir, 'm.gguf');
  await writeFile(
    model,
    encodeGguf({
      metadata: [
        ['general.architecture', { type: 'string', value: 'llama' }],
        ['llama.block_count', { type: 'uint32', value: 1 }],
        ['llama.context_length', { type: 'uint32', value: 512 }],
        ['llama.embedding_length', { type: 'uint32', value: 32 }],
        ['llama.attention.head_count', { type: 'uint32', value: 1 }],
      ],
      tensors: [{ name: 'blk.0.attn_q.weight', dims: [32, 32], type: 0, data: new Uint8Array(32 * 32 * 4) }],
    }),
  );
  // The stand-in llama-server: the chat worker the supervisor starts with the grant is a real process of ours.
  const b = await build(t, { env: { SERVICE_DECK_GPUS: gpus, SERVICE_DECK_GPU_POLL_MS: '100', SERVICE_DECK_LLAMA_SERVER: await fakeLlamaServerIn(dir, 'instant') } });
  const unloads: string[] = [];
  b.service.supervisor.on('worker.unload', (event) => {
    if (event.kind === 'chat' || event.kind === 'tts') unloads.push(event.kind);
  });
  const lease = await b.service.scheduler.reserve({
    kind: 'chat',
    source: 'api',
    profileId: 'p-chat',
    revision: 1,
    slots: 1,
    device: 'cpu',
    whenBusy: 'wait',
    profile: { name: 'chat-m', category: 'chat', params: { model, context: 512, slots: 1, gpuSplit: null, gpuLayers: null } },
  });
  t.same(lease.start?.gpus, ['GPU-a'], 'the chat worker was planned onto the GPU');
  t.match(lease.start, { fitTool: 'not_installed', fit: /^llama-fit-params is not installed: the layer count is the service's own estimate; shallow search/ }, 'no llama-fit-params here (an empty cache): the own search stood in, and the plan says so');
  await b.service.chat.ready(lease.generation, lease.signal);
  const own = b.service.supervisor.getSnapshot().context.workers.chat.pid;
  t.ok(own, 'the supervisor started the chat worker with the grant: its process reported its pid');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24576, processes: [{ pid: own, usedMiB: 1000 }] }]));
  // The supervisor keeps the last inventory it judged: once it shows our pid, that poll was judged.
  await until('a GPU poll that sees our own worker process', async () =>
    b.service.supervisor.getSnapshot().context.gpus.some((g) => g.processes.some((p) => p.pid === own)) ? true : undefined,
  );
  t.notOk(lease.signal.aborted, 'our own worker process is not foreign');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24576, processes: [{ pid: own, usedMiB: 1000 }, { pid: 31337, usedMiB: 5000 }] }]));
  const reason = await new Promise<unknown>((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
  t.match(reason, { code: 'resources_busy', message: /pid 31337/ });
  await until('the unload', async () => (unloads.length > 0 ? true : undefined));
  t.same(unloads, ['chat'], 'only the own chat worker is unloaded');
  await until('the chat worker to be unloaded', async () => (b.service.supervisor.getSnapshot().context.workers.chat.state === 'unloaded' ? true : undefined));
  t.match(b.service.supervisor.getSnapshot().context.workers.chat.last, /foreign process \(pid 31337\)/);
  lease.release();
});

t.test('a lease cancelled during its own worker start aborts that start', async (t) => {
  const b = await build(t);
  const unloads: string[] = [];
  b.service.supervisor.on('worker.unload', (event) => {
    if (event.kind === 'stt') unloads.push('stt');
  });
  const lease = await b.service.scheduler.reserve({ ...stt(), source: 'test' });
  t.ok(lease.start);
  lease.cancel();
  await until('the STT worker to be unloaded', async () => (b.service.supervisor.getSnapshot().context.workers.stt.state === 'unloaded' ? true : undefined));
  t.same(unloads, ['stt']);
  t.match(b.service.supervisor.getSnapshot().context.workers.stt.last, /cancelled during its own worker start/);
  lease.release();
  const done = await b.service.scheduler.reserve(stt());
  done.release();
  t.equal(b.service.supervisor.getSnapshot().context.workers.stt.state, 'loading', 'a plain release keeps the worker');
});

t.test('a release or a cancel tells the supervisor how long the job held its reservation: the chat answer times of the overtaking rule (CONTRACT 9)', async (t) => {
  const h = supervisorHarness();
  const scheduler = new Scheduler(h.actor, () => h.clock.now());
  const chat: JobRequest = { kind: 'chat', source: 'api', profileId: 'a', revision: 1, slots: 2, device: 'cpu', whenBusy: 'wait', profile: null };
  const first = await scheduler.reserve(chat);
  h.clock.increment(42_000);
  first.release();
  const second = await scheduler.reserve(chat);
  h.clock.increment(7_000);
  second.cancel();
  t.same(h.context().chatAnswers, { a: { revision: 1, ms: [42_000, 7_000] } }, 'from grant to release, and to a cancel (a stream cut at its limit is one)');
  const waiting = new AbortController();
  const blocker = await scheduler.reserve({ ...chat, slots: 1, profileId: 'b' });
  const left = scheduler.reserve({ ...chat, profileId: 'c' }, { signal: waiting.signal });
  await h.settle();
  waiting.abort();
  await t.rejects(left, ReservationAbandoned);
  blocker.release();
  t.same(Object.keys(h.context().chatAnswers), ['a', 'b'], 'a job that never ran measures nothing');
  h.actor.stop();
});
