// The console's routes on the admin listener: machine definitions, actors, the log tail, host
// facts; each behind the admin session like every other /api/v1 route.
import t from 'tap';
import type { ActorView, HostView, LogLineView, MachineView } from '../../src/system/observe/console.types.js';
import { HostFacts, type HostReader } from '../../src/system/host.js';
import { build } from '../helpers/build.js';
import { until } from '../helpers/until.js';

const errorCode = async (response: Response) => ((await response.json()) as { error: { code: string } }).error.code;

t.test('machines and actors: every definition, every machine actor, with the inspector off', async (t) => {
  const b = await build(t);
  t.equal(b.config.inspect, 'off');
  const machines = (await (await b.admin('GET', '/api/v1/machines')).json()) as { machines: Record<string, MachineView> };
  t.same(
    Object.keys(machines.machines).sort(),
    ['audioPolicy', 'chatWorker', 'enhancerWorker', 'expiryTimer', 'imageWorker', 'listener', 'queue', 'sttWorker', 'supervisor', 'ttsWorker'],
    'all machines, the expiry timer too although none runs',
  );
  t.equal(machines.machines.listener?.root.initial, 'restoring');
  t.equal(machines.machines.supervisor?.id, 'supervisor');

  const actorsOf = async () => ((await (await b.admin('GET', '/api/v1/actors')).json()) as { actors: ActorView[] }).actors;
  const actors = await actorsOf();
  t.same(
    actors.map((a) => a.id).sort(),
    ['audioPolicy.stt', 'audioPolicy.tts', 'chatWorker', 'enhancerWorker', 'imageWorker', 'listener', 'queue', 'sttWorker', 'supervisor', 'ttsWorker'],
  );
  const listener = actors.find((a) => a.id === 'listener');
  t.match(listener, { machine: 'listener', value: 'stopped', status: 'active' });
  t.same(listener?.active, ['listener', 'listener.stopped']);

  await b.startEndpoint();
  const running = await until('the listener running', async () => (await actorsOf()).find((a) => a.id === 'listener' && a.value === 'running'));
  t.ok(running.active.includes('listener.running'));
  t.ok(running.events.some((e) => e.type === 'endpoint.start'), 'the start event is in its last events');
  t.same(Object.keys(running.events[0] ?? {}).sort(), ['at', 'source', 'type']);

  for (const url of ['/api/v1/machines', '/api/v1/actors']) {
    let response = await b.admin('GET', url, undefined, { cookie: '' });
    t.equal(response.status, 401, `${url} without a session`);
    t.equal(await errorCode(response), 'session_required');
    response = await b.admin('GET', url, undefined, { 'x-service-deck': '' });
    t.equal(response.status, 403, `${url} without X-Service-Deck`);
    t.equal(await errorCode(response), 'header_required');
  }
});

t.test('logs: the recent lines, redacted, filtered by level and limit', async (t) => {
  const b = await build(t);
  const secret = 'sd-leaked-token-8086';
  b.service.log.warn({ component: 'test', token: secret, password: secret, prompt: secret }, 'secret logged by mistake');
  await b.admin('GET', '/api/v1/endpoint');
  type Lines = { lines: LogLineView[] };
  let response = await b.admin('GET', '/api/v1/logs');
  t.equal(response.status, 200);
  const { lines } = (await response.json()) as Lines;
  const leaked = lines.find((l) => l.msg === 'secret logged by mistake');
  t.same(leaked?.fields, { component: 'test', token: '[redacted]', password: '[redacted]', prompt: '[redacted]' });
  t.notOk(JSON.stringify(lines).includes(secret), 'the secret is not in the tail');
  t.ok(lines.some((l) => l.msg === 'access' && l.fields.route === '/api/v1/endpoint' && l.fields.status === 200), 'access lines are there');
  t.ok(lines.every((l) => l.level >= 30), 'level info by default: no debug lines');
  t.ok(lines.every((l, i) => i === 0 || l.seq > (lines[i - 1]?.seq ?? 0)), 'oldest first');

  const warnings = ((await (await b.admin('GET', '/api/v1/logs?level=warn&limit=500')).json()) as Lines).lines;
  t.ok(warnings.length >= 1 && warnings.every((l) => l.level >= 40), 'level=warn');
  const two = ((await (await b.admin('GET', '/api/v1/logs?limit=2')).json()) as Lines).lines;
  t.equal(two.length, 2, 'limit=2');
  t.ok((two[0]?.seq ?? 0) < (two[1]?.seq ?? 0) && (two[1]?.seq ?? 0) > (lines.at(-1)?.seq ?? Infinity), 'the newest two, oldest first');

  const invalid: Array<[string, string]> = [['level=loud', 'invalid_value'], ['limit=0', 'invalid_value'], ['limit=501', 'invalid_value'], ['since=3', 'unknown_parameter']];
  for (const [query, code] of invalid) {
    response = await b.admin('GET', `/api/v1/logs?${query}`);
    t.equal(response.status, 400, query);
    t.equal(await errorCode(response), code, `${query}: ${code}`);
  }
  response = await b.admin('GET', '/api/v1/logs', undefined, { cookie: '' });
  t.equal(response.status, 401);
});

t.test('host: the facts of this machine; parts that fail are empty, not a failed route', async (t) => {
  const b = await build(t);
  let response = await b.admin('GET', '/api/v1/host');
  t.equal(response.status, 200);
  const view = (await response.json()) as HostView;
  t.equal(view.node, process.version);
  t.equal(view.os?.platform, process.platform);
  t.ok((view.memory?.totalBytes ?? 0) > 0, 'the RAM is known');
  t.ok(view.disk !== null && b.stateDir.startsWith(view.disk.mount), `the disk is the one holding the state dir (${view.disk?.mount})`);
  t.ok((view.disk?.availableBytes ?? 0) > 0 && (view.disk?.sizeBytes ?? 0) >= (view.disk?.availableBytes ?? 0), 'with its free space');
  t.same(view.unavailable, [], 'every part read on this machine');

  const broken = () => Promise.reject(new Error('no access'));
  b.service.host = new HostFacts(b.stateDir, { osInfo: broken, cpu: broken, mem: broken, graphics: broken, fsSize: broken } as unknown as HostReader);
  response = await b.admin('GET', '/api/v1/host');
  t.equal(response.status, 200);
  t.match(await response.json(), { os: null, cpu: null, memory: null, graphics: [], disk: null, node: process.version, unavailable: ['os', 'cpu', 'memory', 'graphics', 'disk'] });
  response = await b.admin('GET', '/api/v1/host', undefined, { cookie: '' });
  t.equal(response.status, 401);
});
