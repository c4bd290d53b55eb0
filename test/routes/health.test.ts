// GET /livez and GET /readyz on the admin listener: no authentication, nothing but ok or
// not ok and a reason code. Ready means the state directory can be read and the inference listener
// is where endpoint.json wants it: a listener that should run but could not bind its port, or a
// state directory gone, is not ready, with the reason.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { existsSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { Server as HttpServer } from 'node:http';
import { createServer } from 'node:net';
import t from 'tap';
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { startService, type Service } from '../../src/compose.js';
import { createLogger } from '../../src/system/observe/log.js';
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

t.test('the admin listener opens once the system is up: at that moment the actors run, and its first answers are real', async (t) => {
  const stateDir = await tempDir(t);
  const lines: string[] = [];
  // The actors' records (SERVICE_DECK_INSPECT=log) say when each one started.
  const log = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } });
  const config = loadConfig({ stateDir }, { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_INSPECT: 'log', SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') });
  const started = (actor: string) => lines.some((line) => line.includes('"msg":"event xstate.init"') && line.includes(`"actor":"${actor}"`));
  // Node announces every listener that starts listening; the only HTTP server of this start is the
  // admin listener (the inference listener is remembered stopped). What has started is read, and
  // the probes sent, at that very moment, before the start goes on.
  let atListen: { supervisor: boolean; listener: boolean; audio: boolean } | undefined;
  const probes: Array<Promise<{ status: number; body: unknown }>> = [];
  const listening = (message: unknown) => {
    const { server } = message as { server: unknown };
    const address = server instanceof HttpServer ? server.address() : null;
    if (atListen || typeof address !== 'object' || address === null) return;
    atListen = { supervisor: started('supervisor'), listener: started('listener'), audio: started('audioPolicy.tts') && started('audioPolicy.stt') };
    probes.push(probe(`http://127.0.0.1:${address.port}/readyz`), probe(`http://127.0.0.1:${address.port}/livez`));
  };
  subscribe('tracing:net.server.listen:asyncEnd', listening);
  let service: Service;
  try {
    ({ service } = await startService(config, { log, adminPort: 0 }));
  } finally {
    unsubscribe('tracing:net.server.listen:asyncEnd', listening);
  }
  t.teardown(() => service.shutdown());
  t.same(atListen, { supervisor: true, listener: true, audio: true }, 'the supervisor, its listener machine and the audio policies had started when the admin listener opened');
  t.same(await probes[0], { status: 200, body: { status: 'ok' } }, 'ready at its very first answer');
  t.same(await probes[1], { status: 200, body: { status: 'ok' } }, 'and alive');
});

t.test('an admin port that cannot be bound ends the start and leaves nothing running: the restored inference listener is closed again', async (t) => {
  const stateDir = await tempDir(t);
  const apiPort = await freePort();
  await writeFile(`${stateDir}/endpoint.json`, JSON.stringify({ running: true, port: apiPort, host: '127.0.0.1', published: [] }), { mode: 0o600 });
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => taken.close(() => resolve())));
  const adminPort = (taken.address() as { port: number }).port;
  // The inference listener is restored (it was running) while the admin listener finds its port taken.
  let apiBound = false;
  const listening = (message: unknown) => {
    const { server } = message as { server: unknown };
    const address = server instanceof HttpServer ? server.address() : null;
    if (typeof address === 'object' && address?.port === apiPort) apiBound = true;
  };
  subscribe('tracing:net.server.listen:asyncEnd', listening);
  t.teardown(() => void unsubscribe('tracing:net.server.listen:asyncEnd', listening));
  const config = loadConfig({ stateDir }, { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') });
  const lines: string[] = [];
  const log = createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } });
  await t.rejects(startService(config, { log, adminPort }), { code: 'EADDRINUSE' }, 'the start fails with the bind error');
  t.ok(
    lines.some((line) => line.includes('"msg":"inference listener stopped; workers unloaded"')),
    `by then the restored inference listener has gone through its stop${apiBound ? ' (it had been bound)' : ' (before its bind)'}`,
  );
  const free = createServer();
  await t.resolves(new Promise<void>((resolve, reject) => free.once('error', reject).listen(apiPort, '127.0.0.1', () => free.close(() => resolve()))), `the inference port ${apiPort} is free`);
  t.notOk(existsSync(path.join(stateDir, 'admin.json')), 'no admin record names a service that does not run');
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
