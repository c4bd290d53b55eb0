// Secrets changed while the service runs: a damaged secrets.json keeps the last good secrets in
// force and says so; a new password (from the CLI's process) ends the sessions opened before it;
// bodiless POSTs are as good as `{}`.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { SecretStore } from '../../src/store/secrets.js';
import { build } from '../helpers/build.js';

t.test('a damaged secrets.json keeps the last good token and session working, and is reported', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  await writeFile(path.join(b.stateDir, 'secrets.json'), '{"passwordHash":');
  t.equal((await b.api('GET', '/v1/models')).status, 200, 'the token read before still works');
  const status = await b.admin('GET', '/api/v1/endpoint');
  t.equal(status.status, 200);
  t.match(await status.json(), { secrets_problem: /secrets\.json: is not valid JSON/ });
});

t.test('a password change in another process ends the sessions opened before it', async (t) => {
  const b = await build(t);
  t.equal((await b.admin('GET', '/api/v1/endpoint')).status, 200);
  const { store } = await SecretStore.open(b.stateDir);
  await store.setPassword('a-brand-new-password');
  t.equal((await b.admin('GET', '/api/v1/endpoint')).status, 401, 'the old session is over');
});

t.test('bodiless POSTs to start, stop and token rotation are accepted', async (t) => {
  const b = await build(t);
  // The port this test may use (the default one may be another test's).
  const port = Number(new URL(b.apiUrl()).port);
  t.equal((await b.admin('POST', '/api/v1/endpoint/config', { port })).status, 200);
  const expected = [
    ['/api/v1/endpoint/start', { status: 'running' }],
    ['/api/v1/endpoint/stop', { status: 'stopped' }],
    ['/api/v1/token/rotate', { token: /^sd-/ }],
  ] as const;
  for (const [route, answer] of expected) {
    const response = await b.admin('POST', route);
    t.equal(response.status, 200, `${route} without a body`);
    t.match(await response.json(), answer, `${route}: done`);
  }
});
