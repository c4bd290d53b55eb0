// Spec 5 rule 4 and the log rule: access lines carry method, route, status, duration and
// request id, and never a token, cookie, password, prompt or answer. Everything secret is sent,
// then the captured log is searched for it.
import t from 'tap';
import { build, PASSWORD, TOKEN } from '../helpers/build.js';

const PROMPT = 'PROMPT-the-secret-recipe-7731';

t.test('no token, cookie, password or prompt reaches the log', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_INSPECT: 'log' } });
  await b.startEndpoint();
  // On, so that the Responses door reads its body (off, it answers 404 before reading it).
  await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true });
  const cookieValue = 'sd_session=forged-cookie-value-9911';
  await b.api('GET', `/v1/models?api_key=${TOKEN}`);
  await b.api('GET', '/v1/models', undefined, { cookie: cookieValue });
  await b.api('POST', '/v1/chat/completions', { model: 'x', messages: [{ role: 'user', content: PROMPT }] });
  await b.api('POST', `/v1/responses/${PROMPT}`, { input: PROMPT });
  await b.api('POST', '/v1/responses', { model: 'x', input: PROMPT, instructions: PROMPT });
  await b.api('GET', '/v1/models', undefined, { authorization: 'Bearer wrong-token-5521' });
  await b.admin('POST', '/api/v1/session', { password: `${PASSWORD}-wrong` });
  await b.login();
  await b.admin('POST', '/api/v1/profiles', { name: 'p', category: 'chat', params: { model: `/tmp/${PROMPT}` }, prompt: PROMPT });
  const rotated = (await (await b.admin('POST', '/api/v1/token/rotate', {})).json()) as { token: string };
  t.ok(rotated.token);

  const log = b.logLines.join('');
  for (const secret of [TOKEN, 'forged-cookie-value-9911', 'wrong-token-5521', PASSWORD, PROMPT, rotated.token, 'sd_session=']) {
    t.notOk(log.includes(secret), `the log does not contain ${secret.slice(0, 12)}…`);
  }

  const access = b.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.msg === 'access');
  t.ok(access.length >= 8, 'every request has an access line');
  for (const entry of access) {
    t.match(entry, { method: String, route: String, status: Number, duration_ms: Number, reqId: String });
    t.notOk('url' in entry || 'headers' in entry || 'body' in entry, 'no url, headers or body in an access line');
  }
  t.ok(access.some((e) => e.route === '/v1/models' && e.status === 200));
  t.ok(access.some((e) => e.route === '(unmatched)' && e.status === 404), 'unknown routes are logged without their path');
  t.ok(
    b.logLines.some((line) => line.includes('"component":"inspect"') && line.includes('endpoint.start')),
    'SERVICE_DECK_INSPECT=log writes the machines\' events through pino',
  );
});

t.test('every request gets a fresh request id: sent as x-request-id, the same in its access line, never the client\'s', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const response = await b.api('GET', '/v1/models', undefined, { 'x-request-id': 'client-chosen-id' });
    t.equal(response.status, 200);
    ids.push(response.headers.get('x-request-id') ?? '');
  }
  const refused = await b.api('GET', '/v1/models', undefined, { authorization: 'Bearer wrong', 'x-request-id': 'client-chosen-id' });
  t.equal(refused.status, 401);
  ids.push(refused.headers.get('x-request-id') ?? '');
  for (const id of ids) t.match(id, /^[0-9a-f]{16}$/, 'an id is 16 hex digits');
  t.equal(new Set(ids).size, ids.length, 'no two requests share an id');
  const logged = b.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.msg === 'access').map((entry) => entry.reqId);
  for (const id of ids) t.ok(logged.includes(id), `the access line carries ${id}`);
  t.notOk(logged.includes('client-chosen-id'), 'a client cannot set the id');
});
