// GET /livez and GET /readyz on the admin listener: no authentication, nothing but ok or
// not ok and a reason code. Ready means the state directory can be read and the inference listener
// is where endpoint.json wants it: a listener that should run but could not bind its port, or a
// state directory gone, is not ready, with the reason.
import { rename, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import t from 'tap';
import { listenerReadiness, liveness } from '../../src/system/observe/health.js';
import type { SupervisorActor } from '../../src/system/scheduler.js';
import { build, freePort, tempDir } from '../helpers/build.js';
import { supervisorHarness } from '../helpers/supervisor.js';

const probe = async (url: string) => {
  const response = await fetch(url);
  return { status: response.status, body: (await response.json()) as unknown };
};

t.test('live and ready without credentials, with nothing but the word; ready whether the endpoint is started or stopped as remembered', async (t) => {
  const b = await build(t, { login: false });
  t.same(await probe(`${b.adminUrl}/livez`), { status: 200, body: { status: 'ok' } });
  t.same(await probe(`${b.adminUrl}/readyz`), { status: 200, body: { status: 'ok' } }, 'stopped, as endpoint.json wants');
  await b.login();
  await b.startEndpoint();
  t.same(await probe(`${b.adminUrl}/readyz`), { status: 200, body: { status: 'ok' } }, 'running, as endpoint.json now wants');
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  t.same(await probe(`${b.adminUrl}/readyz`), { status: 200, body: { status: 'ok' } }, 'stopped by the operator, as endpoint.json now wants');
});

t.test('not ready while the state directory cannot be read; ready again once it is back', async (t) => {
  const b = await build(t, { login: false });
  const away = `${b.stateDir}-away`;
  await rename(b.stateDir, away);
  try {
    t.same(await probe(`${b.adminUrl}/readyz`), { status: 503, body: { status: 'not_ok', reason: 'state_dir_unreadable' } });
    t.same(await probe(`${b.adminUrl}/livez`), { status: 200, body: { status: 'ok' } }, 'still alive');
  } finally {
    await rename(away, b.stateDir);
  }
  t.same(await probe(`${b.adminUrl}/readyz`), { status: 200, body: { status: 'ok' } });
});

t.test('not ready when endpoint.json wants the listener running and it is stopped (its port is taken)', async (t) => {
  const stateDir = await tempDir(t);
  const port = await freePort();
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(port, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  await writeFile(`${stateDir}/endpoint.json`, JSON.stringify({ running: true, port, host: '127.0.0.1', published: [] }), { mode: 0o600 });
  const b = await build(t, { stateDir, login: false });
  t.equal(b.service.state(), 'stopped', 'the bind failed');
  t.same(await probe(`${b.adminUrl}/readyz`), { status: 503, body: { status: 'not_ok', reason: 'listener_down' } });
});

t.test('the listener table: each state against each remembered wish', async (t) => {
  const rows = [
    ['running', true, 'ok'],
    ['running', false, 'listener_up'],
    ['stopped', false, 'ok'],
    ['stopped', true, 'listener_down'],
    ['starting', true, 'listener_starting'],
    ['restoring', false, 'listener_starting'],
    ['stopping', true, 'listener_stopping'],
    ['stopping', false, 'listener_stopping'],
  ] as const;
  for (const [state, wants, expected] of rows) {
    const health = listenerReadiness(state, wants);
    t.equal(health.ok ? 'ok' : health.reason, expected, `${state}, wanted ${wants ? 'running' : 'stopped'}`);
  }
});

t.test('live while the supervisor runs; shutting down once it has stopped', async (t) => {
  const h = supervisorHarness();
  const supervisor = h.actor as unknown as SupervisorActor;
  t.same(liveness(supervisor), { ok: true });
  h.actor.stop();
  t.same(liveness(supervisor), { ok: false, reason: 'shutting_down' });
});
