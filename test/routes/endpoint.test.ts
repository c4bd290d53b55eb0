// Spec 4.7 endpoint routes and the stop sequence of spec 3.1 through the real listeners.
import { createServer } from 'node:net';
import t from 'tap';
import { ReservationDenied } from '../../src/system/scheduler.js';
import type { EndpointStatus } from '../../src/system/observe/status.js';
import { build, failureOf, freePort } from '../helpers/build.js';
import { pocketsphinxPath } from '../helpers/speech.js';
import { stopProcess, until } from '../helpers/until.js';

const code = async (response: Response) => ((await response.json()) as { error: { code: string; param: string | null } }).error;

t.test('config: only while stopped, only allowed ports, valid hosts', async (t) => {
  const b = await build(t);
  const port = await freePort();
  let response = await b.admin('POST', '/api/v1/endpoint/config', { port });
  t.equal(response.status, 200);
  t.match(await response.json(), { status: 'stopped', port });
  response = await b.admin('POST', '/api/v1/endpoint/config', { port: 80 });
  t.equal(response.status, 400);
  t.match(await code(response), { code: 'invalid_value', param: 'port' });
  response = await b.admin('POST', '/api/v1/endpoint/config', { port: 70000 });
  t.equal(response.status, 400);
  response = await b.admin('POST', '/api/v1/endpoint/config', { host: 'example.com' });
  t.equal(response.status, 400, 'the host is an IP literal or localhost');
  response = await b.admin('POST', '/api/v1/endpoint/config', {});
  t.equal(response.status, 400, 'an empty config says nothing');
  response = await b.admin('POST', '/api/v1/endpoint/start', {});
  t.equal(response.status, 200);
  response = await b.admin('POST', '/api/v1/endpoint/config', { port: port + 1 });
  t.equal(response.status, 409);
  t.match(await code(response), { code: 'endpoint_running' });
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { status: 'running', port });
  response = await b.admin('POST', '/api/v1/endpoint/start', {});
  t.equal(response.status, 200, 'starting a running endpoint is harmless');
});

t.test('the container port range narrows the choice', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_API_PORTS: '8120-8124' } });
  t.equal((await b.admin('POST', '/api/v1/endpoint/config', { port: 8124 })).status, 200);
  const response = await b.admin('POST', '/api/v1/endpoint/config', { port: 8125 });
  t.equal(response.status, 400);
  t.match(await code(response), { code: 'invalid_value', param: 'port' });
});

t.test('a busy port: the start fails with the reason and the endpoint stays stopped', async (t) => {
  const b = await build(t);
  const blocker = createServer();
  const port = await freePort();
  await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
  await b.admin('POST', '/api/v1/endpoint/config', { port });
  const response = await b.admin('POST', '/api/v1/endpoint/start', {});
  t.equal(response.status, 503);
  const error = await code(response);
  t.equal(error.code, 'listen_failed');
  t.match(error, { message: /EADDRINUSE/ });
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { status: 'stopped', remembered_running: false, error: { code: 'listen_failed' } });
});

/** An STT job as a route would reserve it (pocketsphinx on the CPU: no model file to read). */
const sttJob = (profileId = 'p-stt') =>
  ({
    kind: 'stt',
    source: 'api',
    profileId,
    revision: 1,
    slots: 1,
    device: 'cpu',
    whenBusy: 'wait',
    profile: { id: profileId, revision: 1, category: 'stt', params: { backend: 'pocketsphinx', threads: 2 } },
  }) as const;

t.test('stop: no new requests, waiting discarded, running work finishes, then workers unloaded; the status shows stopping', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const calls: string[] = [];
  b.service.supervisor.on('worker.unload', (event) => {
    if (event.kind === 'stt') calls.push('unload');
  });
  const running = await b.service.scheduler.reserve(sttJob());
  t.ok(running.start, 'the first job starts the STT worker');
  // The real STT engine, stopped with SIGSTOP: the unload's SIGTERM waits until it runs again, so
  // the stop stays in its unloading step for as long as the test needs to look.
  b.service.stt.start(running, sttJob().profile as never);
  await b.service.stt.ready(running.generation);
  const pid = b.service.stt.describe()?.pid;
  t.ok(pid, 'the engine runs');
  await stopProcess(pid!);
  t.teardown(() => {
    try {
      process.kill(pid!, 'SIGCONT');
    } catch {
      // gone
    }
  });
  const waiting = b.service.scheduler.reserve(sttJob()).catch((error: unknown) => {
    calls.push(`waiting: ${(error as ReservationDenied).code}`);
    return error;
  });
  const queued = await until('the second job to wait', async () => {
    const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
    return status.queue.waiting.length > 0 ? status : undefined;
  });
  t.match(queued.queue, { waiting: [{ kind: 'stt', phase: 'waiting', position: 1 }], running: [{ kind: 'stt', reservation: { worker: 'stt', gpus: [] } }] });
  t.equal((await b.api('GET', '/v1/models')).status, 200);
  const stopping = b.admin('POST', '/api/v1/endpoint/stop', {});
  t.ok((await waiting) instanceof ReservationDenied);
  t.same(calls, ['waiting: endpoint_stopped'], 'waiting requests are discarded at once');
  const draining = await until('the status to show the stop', async () => {
    const s = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
    return s.stop ? s : undefined;
  });
  t.match(draining, { status: 'stopping', stop: { since: String, open_requests: 0, running_jobs: 1 } }, 'the stop waits for the running job, and says so');
  t.same(calls, ['waiting: endpoint_stopped'], 'no worker is unloaded under a running job');
  t.notOk(running.signal.aborted, 'the running job keeps its reservation');
  t.equal(await failureOf(b.api('GET', '/v1/models')), 'ECONNREFUSED', 'no new request is accepted once the stop began: the listener is closed');
  running.release();
  await until('the unload', async () => (calls.includes('unload') ? true : undefined));
  t.same(calls, ['waiting: endpoint_stopped', 'unload'], 'once it has finished, the workers are unloaded');
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
  t.equal(status.status, 'stopping');
  t.match(status.workers, [{ kind: 'stt', state: 'unloading', last: 'endpoint stop', pid }], 'the worker being unloaded appears in the status');
  process.kill(pid!, 'SIGCONT');
  const stopped = await stopping;
  t.equal(stopped.status, 200);
  t.match(await stopped.json(), { status: 'stopped', workers: [], queue: { waiting: [], running: [] } });
  t.equal(await failureOf(b.api('GET', '/v1/models')), 'ECONNREFUSED', 'the listener is closed');
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200, 'stopping a stopped endpoint is harmless');
});

t.test('a refused stop-time reservation and a new one after the stop', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  const lease = await b.service.scheduler.reserve(sttJob());
  t.ok(lease.start, "the operator's tests still get a worker while the endpoint is stopped");
  lease.release();
  lease.release();
});

t.test('the status shows the memory budget and the reserves; forecasts are labelled as predictions', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_GPUS: '[{"uuid":"GPU-a","memoryTotalMiB":24576}]', SERVICE_DECK_GPU_RESERVE_MIB: '768,GPU-a=2048', SERVICE_DECK_RAM_RESERVE_MIB: '512' } });
  const lease = await b.service.scheduler.reserve(sttJob());
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
  t.match(status.memory, { ram: { reserve_mib: 512, source: /cgroup|host/ }, gpu_reserve_mib: [{ uuid: 'GPU-a', reserve_mib: 2048 }], note: /predictions/ });
  const ram = status.memory.ram as { budget_mib: number; available_mib: number };
  t.equal(ram.budget_mib, Math.max(0, ram.available_mib - 512));
  t.match(status.workers, [{ kind: 'stt', state: 'loading', plan: { forecast: { note: 'prediction' }, ram_budget: { reserve_mib: 512 }, gpu_layer_limit: null } }]);
  t.match(status.queue.running, [{ kind: 'stt', phase: 'starting', reservation: { worker: 'stt', gpus: [] }, memory: { ram_budget: { reserve_mib: 512 } } }], 'each job shows the memory plan of its worker');
  lease.release();
});

t.test('publish: unknown profile is 404, body is checked', async (t) => {
  const b = await build(t);
  let response = await b.admin('POST', '/api/v1/endpoint/profile', { id: 'nope', enabled: true });
  t.equal(response.status, 404);
  t.equal((await code(response)).code, 'profile_not_found');
  response = await b.admin('POST', '/api/v1/endpoint/profile', { id: 'nope', enabled: 'yes' });
  t.equal(response.status, 400);
  t.match(await code(response), { code: 'invalid_value', param: 'enabled' });
});

t.test('the status shows the GPU inventory (simulated here), ordered by UUID', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_GPUS: '[{"uuid":"GPU-b","name":"sim","memoryTotalMiB":24576},{"uuid":"GPU-a","name":"sim","memoryTotalMiB":12288}]' } });
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { gpus: Array<{ uuid: string; memoryFreeMiB: number }>; gpu_probe: unknown };
  t.same(status.gpus.map((g) => [g.uuid, g.memoryFreeMiB]), [
    ['GPU-a', 12288],
    ['GPU-b', 24576],
  ]);
  t.same(status.gpu_probe, { source: 'simulated', problem: null });
  const broken = await build(t, { env: { SERVICE_DECK_GPUS: '[{"uuid":1}]' } });
  const answer = await broken.admin('GET', '/api/v1/endpoint');
  t.equal(answer.status, 200, 'a bad inventory does not break the status');
  t.match(await answer.json(), { gpus: [], gpu_probe: { source: 'failed', problem: /SERVICE_DECK_GPUS/ } });
});
