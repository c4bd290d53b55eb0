// Spec 4.7 endpoint routes and the stop sequence of spec 3.1 through the real listeners.
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ReservationDenied } from '../../src/system/scheduler.js';
import type { EndpointStatus } from '../../src/system/observe/console.types.js';
import { build, failureOf, freePort, tempDir } from '../helpers/build.js';
import { tinyModelIn } from '../helpers/llama.js';
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

t.test('spec 8: a saved port outside the range in force is not used; the status says why and how to fix it', async (t) => {
  // endpoint.json from before an update that narrowed the range: running on 8120.
  const stateDir = await tempDir(t);
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: 8120, host: '127.0.0.1', published: [] }), { mode: 0o600 });
  const port = await freePort();
  const b = await build(t, { stateDir, env: { SERVICE_DECK_API_PORTS: `${port}-${port}` } });
  const before = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
  t.match(before, { status: 'stopped', port: 8120, remembered_running: true, port_range: { first: port, last: port, from: 'env' } });
  t.equal(before.error?.code, 'saved_port_out_of_range');
  t.match(before.error?.message, `the saved port 8120 is outside the allowed ports ${port}-${port}`);
  t.match(before.error?.message, /POST \/api\/v1\/endpoint\/config with \{"port": \d+\}.*wider --api-ports/, 'the message says how to fix it');
  t.equal(b.service.inferenceAddress(), undefined, 'nothing listens: the saved port was not used');

  let response = await b.admin('POST', '/api/v1/endpoint/start', {});
  t.equal(response.status, 409, 'a start is refused while the saved port is outside the range');
  t.match(await code(response), { code: 'saved_port_out_of_range', message: /8120/ });
  t.equal(b.service.inferenceAddress(), undefined);

  response = await b.admin('POST', '/api/v1/endpoint/config', { port });
  t.equal(response.status, 200);
  t.match(await response.json(), { status: 'stopped', port, error: null }, 'a port within the range clears the error');
  response = await b.admin('POST', '/api/v1/endpoint/start', {});
  t.equal(response.status, 200);
  t.match(await response.json(), { status: 'running', port, error: null });
  t.equal((await b.api('GET', '/v1/models')).status, 200, 'the listener answers on the corrected port');
});

t.test('a restart with the endpoint remembered as running: only the listener starts; no model is loaded, though profiles are published', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  // A stand-in llama-server that notes every start of its process, then answers at once.
  const FAKE = fileURLToPath(new URL('../fixtures/fake-llama-server.mjs', import.meta.url));
  const launches = path.join(dir, 'launches');
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\necho $$ >> "${launches}"\nFAKE_LLAMA_MODE=instant exec "${process.execPath}" "${FAKE}" "$@"\n`);
  await chmod(wrapper, 0o755);
  const started = async () => (await readFile(launches, 'utf8').catch(() => '')).split('\n').filter(Boolean).length;
  const env = { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' };
  type Status = { status: string; workers: Array<{ kind: string }>; profiles: Array<{ name: string; published: boolean }> };
  const status = async (b: Awaited<ReturnType<typeof build>>) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
  const ask = (b: Awaited<ReturnType<typeof build>>) => b.api('POST', '/v1/chat/completions', { model: 'words', messages: [{ role: 'user', content: 'x' }] });

  const first = await build(t, { env });
  await first.startEndpoint();
  for (const profile of [
    { name: 'words', category: 'chat', params: { model } },
    { name: 'voice', category: 'tts', params: {} },
  ]) {
    const id = ((await (await first.admin('POST', '/api/v1/profiles', profile)).json()) as { id: string }).id;
    t.equal((await first.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, `${profile.name} published`);
  }
  // Control: both profiles load when asked, so their absence after the restart is the rule's doing.
  t.equal((await ask(first)).status, 200, 'a chat answer in the first life');
  t.equal((await first.api('POST', '/v1/audio/speech', { model: 'voice', input: 'Hallo' })).status, 200, 'a speech answer in the first life');
  t.same((await status(first)).workers.map((w) => w.kind).sort(), ['chat', 'tts'], 'both workers were loaded');
  t.equal(await started(), 1, 'one llama-server start');
  await first.service.shutdown();

  const second = await build(t, { env, stateDir: first.stateDir });
  t.ok(second.service.accepting(), 'the remembered listener is up again');
  t.equal((await second.api('GET', '/health')).status, 200);
  t.same(((await (await second.api('GET', '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id), ['words'], 'the chat profile is still published');
  // Give a start that the restart might have set off the time to show.
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const after = await status(second);
  t.equal(after.status, 'running');
  t.same(after.profiles.filter((p) => p.published).map((p) => p.name).sort(), ['voice', 'words'], 'both publications survived the restart');
  t.same(after.workers, [], 'no model is loaded');
  t.same(
    Object.values(second.service.supervisor.getSnapshot().context.workers).filter((w) => w.state !== 'unloaded').map((w) => `${w.kind} ${w.state}`),
    [],
    'the supervisor has no worker loading or loaded',
  );
  t.equal(await started(), 1, 'no llama-server process was started by the restart');

  t.equal((await ask(second)).status, 200, 'the first request after the restart loads its model');
  t.equal(await started(), 2, 'then, and only then, llama-server starts');
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
  t.match(error, { message: new RegExp(`port ${port} is in use \\(EADDRINUSE\\): stop what uses it .*or save another port while the listener is stopped`) }, 'the cause and the fix');
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
  // An STT engine that never says it is ready: the start the supervisor sent with the grant stays loading.
  const dir = await tempDir(t);
  const loading = path.join(dir, 'engine');
  await writeFile(loading, '#!/bin/sh\nexec sleep 600\n');
  await chmod(loading, 0o755);
  const b = await build(t, {
    env: { SERVICE_DECK_GPUS: '[{"uuid":"GPU-a","memoryTotalMiB":24576}]', SERVICE_DECK_GPU_RESERVE_MIB: '768,GPU-a=2048', SERVICE_DECK_RAM_RESERVE_MIB: '512', SERVICE_DECK_POCKETSPHINX: loading },
  });
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
