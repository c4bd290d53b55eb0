// The real `service-deck serve`: log in, start the listener, kill the process, restart it, and find
// the listener up again with no worker loaded (spec 3.1, last row); SIGTERM ends it cleanly; the
// CLI's set-password and rotate-token work against the same state directory.
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { failureOf, freePort, tempDir } from '../helpers/build.js';
import { spawnCli } from '../helpers/spawn.js';

const PASSWORD = 'e2e-password-1';
const TOKEN = 'sd-e2e-token-0123456789abcdefghijklmnop';

async function login(adminUrl: string, password = PASSWORD) {
  const response = await fetch(`${adminUrl}/api/v1/session`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', 'content-type': 'application/json' },
    body: JSON.stringify({ password }),
  });
  if (response.status !== 200) return { status: response.status, call: undefined };
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const { csrfToken } = (await response.json()) as { csrfToken: string };
  const call = (method: string, route: string, body?: unknown) =>
    fetch(`${adminUrl}${route}`, {
      method,
      headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
  return { status: 200, call };
}

t.test('kill -9 and restart: the remembered listener comes back, no worker loaded', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN };
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  const apiUrl = `http://127.0.0.1:${apiPort}`;

  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await first.waitFor(/admin API on/);
  t.match(first.output(), /inference listener is stopped/, 'a new installation starts with the listener stopped');
  const { call } = await login(adminUrl);
  if (!call) throw new Error('login failed');
  t.equal((await call('POST', '/api/v1/endpoint/config', { port: apiPort })).status, 200);
  const started = await call('POST', '/api/v1/endpoint/start', {});
  t.equal(started.status, 200);
  t.match(await started.json(), { status: 'running', port: apiPort, workers: [] });
  t.equal((await fetch(`${apiUrl}/health`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 200);
  t.match(JSON.parse(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8')), { running: true, port: apiPort });

  first.child.kill('SIGKILL');
  await first.exited;
  t.equal(await failureOf(fetch(`${apiUrl}/health`, { headers: { authorization: `Bearer ${TOKEN}` } })), 'ECONNREFUSED', 'the listener died with the process');

  const second = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await second.waitFor(/inference API on http:\/\/127\.0\.0\.1:(\d+)\/v1/);
  const health = await fetch(`${apiUrl}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(health.status, 200, 'the listener is up after the restart');
  t.same(await health.json(), { status: 'ok', endpoint: 'running' });
  const again = await login(adminUrl);
  if (!again.call) throw new Error('login failed');
  const status = (await (await again.call('GET', '/api/v1/endpoint')).json()) as { status: string; workers: unknown[] };
  t.equal(status.status, 'running');
  t.same(status.workers, [], 'no model is loaded');
  t.notMatch(second.output(), /new API token/, 'the stored token is kept: no new one is issued');

  second.child.kill('SIGTERM');
  const exit = await second.exited;
  t.same(exit, { code: 0, signal: null }, 'SIGTERM ends the service with exit code 0');
  t.match(
    JSON.parse(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8')),
    { running: true },
    'a SIGTERM is a regular stop of the service: the endpoint stays remembered as running',
  );
});

t.test('an admin stop is remembered: after a restart the listener stays stopped', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN };
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await first.waitFor(/admin API on/);
  const { call } = await login(adminUrl);
  if (!call) throw new Error('login failed');
  await call('POST', '/api/v1/endpoint/config', { port: apiPort });
  await call('POST', '/api/v1/endpoint/start', {});
  const stopped = await call('POST', '/api/v1/endpoint/stop', {});
  t.equal(stopped.status, 200);
  t.match(await stopped.json(), { status: 'stopped' });
  first.child.kill('SIGKILL');
  await first.exited;
  const second = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await second.waitFor(/inference listener is stopped/);
  t.equal(await failureOf(fetch(`http://127.0.0.1:${apiPort}/health`)), 'ECONNREFUSED', 'a stopped endpoint stays stopped after the restart: no listener');
  second.child.kill('SIGTERM');
  t.same(await second.exited, { code: 0, signal: null });
});

t.test('first start without a token prints one once; rotate-token and set-password work on the state directory', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const env = { SERVICE_DECK_STATE_DIR: stateDir };
  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  const [, token] = await first.waitFor(/new API token \(shown once[^)]*\): (\S+)/);
  t.match(first.output(), /no operator password yet/);
  t.ok(token && token.length > 20);
  const secrets = await readFile(path.join(stateDir, 'secrets.json'), 'utf8');
  t.notMatch(secrets, token!, 'only the hash of the token is stored');
  t.equal((await stat(path.join(stateDir, 'secrets.json'))).mode & 0o777, 0o600);
  t.equal((await stat(stateDir)).mode & 0o777, 0o700);

  const setPassword = spawnCli(t, ['set-password', '--state-dir', stateDir], {}, 'a-new-password\n');
  t.same(await setPassword.exited, { code: 0, signal: null });
  t.equal((await login(`http://127.0.0.1:${uiPort}`, 'a-new-password')).status, 200, 'the running service accepts the new password');
  t.notMatch(await readFile(path.join(stateDir, 'secrets.json'), 'utf8'), 'a-new-password');

  const short = spawnCli(t, ['set-password', '--state-dir', stateDir], {}, 'short\n');
  t.equal((await short.exited).code, 1, 'a password under 8 characters is refused');

  const rotate = spawnCli(t, ['rotate-token', '--state-dir', stateDir], {});
  t.same(await rotate.exited, { code: 0, signal: null });
  const rotated = rotate.output().split('\n')[0]!.trim();
  t.not(rotated, token);
  t.ok(rotated.startsWith('sd-'));
  first.child.kill('SIGTERM');
  await first.exited;
});

t.test('a half-written state file stops the start with a message naming it', async (t) => {
  const stateDir = await tempDir(t);
  const { writeFile } = await import('node:fs/promises');
  await writeFile(path.join(stateDir, 'endpoint.json'), '{"running": tr');
  const cli = spawnCli(t, ['serve', '--ui-port', String(await freePort())], { SERVICE_DECK_STATE_DIR: stateDir });
  const exit = await cli.exited;
  t.equal(exit.code, 1);
  t.match(cli.output(), `${path.join(stateDir, 'endpoint.json')}`);
  t.match(cli.output(), /not valid JSON/);
  t.equal(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8'), '{"running": tr', 'the damaged file is left as it was');
});
