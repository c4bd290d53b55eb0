// Spec 5 rule 4 and the log rule: access lines carry method, route, status, duration and
// request id, and never a token, cookie, password, prompt or answer. Everything secret is sent,
// then the captured log is searched for it.
import t from 'tap';
import { build, PASSWORD, TOKEN } from '../helpers/build.js';

const PROMPT = 'PROMPT-the-secret-recipe-7731';

t.test('no token, cookie, password or prompt reaches the log', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_INSPECT: 'log' } });
  await b.startEndpoint();
  const cookieValue = 'sd_session=forged-cookie-value-9911';
  await b.api('GET', `/v1/models?api_key=${TOKEN}`);
  await b.api('GET', '/v1/models', undefined, { cookie: cookieValue });
  await b.api('POST', '/v1/chat/completions', { model: 'x', messages: [{ role: 'user', content: PROMPT }] });
  await b.api('POST', `/v1/responses/${PROMPT}`, { input: PROMPT });
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
