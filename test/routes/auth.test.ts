// Spec section 5 and CONTRACT section 3: the admin listener opens only to a session cookie with
// `X-Service-Deck: 1` (and the CSRF token on every change), the inference listener only to the
// bearer token; neither credential opens the other listener. Token rotation takes effect at once,
// also when another process writes it, and secrets.json holds no secret in plain text.
import { createHmac, randomBytes } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { SecretStore } from '../../src/store/secrets.js';
import { build, PASSWORD, TOKEN, type Built } from '../helpers/build.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** Checks status, the OpenAI error body, its type and code; returns the error object. */
async function expectError(t: Test, response: Response, status: number, type: string, code: string, what = '') {
  const label = `${what} → ${status} ${code}`.trim();
  t.equal(response.status, status, label);
  const body = (await response.json()) as ErrorBody;
  t.type(body.error?.message, 'string', `${label}: an OpenAI error body`);
  t.equal(body.error?.type, type, `${label}: type`);
  t.equal(body.error?.code, code, `${label}: code`);
  return body.error;
}

/** Names of every CORS permission header a response carries. */
const corsHeaders = (response: Response) => [...response.headers.keys()].filter((name) => name.startsWith('access-control-allow-'));

interface Call {
  body?: unknown;
  headers?: Record<string, string>;
}

/** A plain request: only the headers given, nothing from the helper's own session. */
function call(base: string, method: string, url: string, { body, headers = {} }: Call = {}): Promise<Response> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body !== undefined) {
    (init.headers as Record<string, string>)['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  return fetch(`${base}${url}`, init);
}

interface Login {
  /** The cookie as it goes back in a Cookie header: `sd_session=<id>.<signature>`, URL-encoded. */
  cookie: string;
  csrf: string;
  setCookie: string;
  /** The session id inside the signed cookie. */
  sessionId: string;
}

async function login(b: Built): Promise<Login> {
  const response = await call(b.adminUrl, 'POST', '/api/v1/session', { body: { password: PASSWORD }, headers: { 'x-service-deck': '1' } });
  if (response.status !== 200) throw new Error(`login failed: ${response.status}`);
  const setCookie = response.headers.get('set-cookie') ?? '';
  const cookie = setCookie.split(';')[0] ?? '';
  const value = decodeURIComponent(cookie.slice(cookie.indexOf('=') + 1));
  const csrf = ((await response.json()) as { csrfToken: string }).csrfToken;
  return { cookie, csrf, setCookie, sessionId: value.slice(0, value.lastIndexOf('.')) };
}

/** A cookie value signed the way @fastify/cookie signs (HMAC-SHA256, base64 without padding). */
function signed(value: string, key: string): string {
  const signature = createHmac('sha256', key).update(value).digest('base64').replace(/=+$/, '');
  return `sd_session=${encodeURIComponent(`${value}.${signature}`)}`;
}

t.test('login: needs X-Service-Deck, the right password, and sets an HttpOnly SameSite=Strict cookie', async (t) => {
  const b = await build(t, { login: false });
  let response = await call(b.adminUrl, 'POST', '/api/v1/session', { body: { password: PASSWORD } });
  await expectError(t, response, 403, 'permission_error', 'header_required', 'login without X-Service-Deck');
  t.equal(response.headers.get('set-cookie'), null, 'no cookie without the header');

  response = await call(b.adminUrl, 'POST', '/api/v1/session', { body: { password: `${PASSWORD}!` }, headers: { 'x-service-deck': '1' } });
  await expectError(t, response, 401, 'authentication_error', 'invalid_password', 'wrong password');
  t.equal(response.headers.get('set-cookie'), null, 'no cookie for a wrong password');

  response = await call(b.adminUrl, 'POST', '/api/v1/session', { body: { password: PASSWORD }, headers: { 'x-service-deck': '1' } });
  t.equal(response.status, 200);
  const body = (await response.json()) as Record<string, unknown>;
  t.same(Object.keys(body), ['csrfToken'], 'the reply holds only the CSRF token');
  t.type(body.csrfToken, 'string');
  t.ok((body.csrfToken as string).length >= 16, 'a CSRF token of real length');
  const setCookie = response.headers.get('set-cookie') ?? '';
  t.match(setCookie, /^[^=;]+=[^;]+;/, 'a session cookie is set');
  t.match(setCookie, /;\s*HttpOnly(;|$)/i, 'HttpOnly');
  t.match(setCookie, /;\s*SameSite=Strict(;|$)/i, 'SameSite=Strict');

  const cookie = setCookie.split(';')[0] ?? '';
  response = await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: { 'x-service-deck': '1', cookie } });
  t.equal(response.status, 200, 'the new cookie opens the admin API');
});

t.test('every admin route needs the header, a real session, and the CSRF token to change anything', async (t) => {
  const b = await build(t, { login: false });
  const session = await login(b);
  const routes: Array<[string, string, unknown?]> = [
    ['GET', '/api/v1/endpoint'],
    ['POST', '/api/v1/endpoint/start', {}],
    ['POST', '/api/v1/endpoint/stop', {}],
    ['POST', '/api/v1/endpoint/config', { port: 8121 }],
    ['POST', '/api/v1/endpoint/profile', { id: 'p-none', enabled: true }],
    ['GET', '/api/v1/profiles'],
    ['POST', '/api/v1/profiles', { name: 'auth-probe', category: 'tts', params: {} }],
    ['GET', '/api/v1/profiles/p-none'],
    ['PUT', '/api/v1/profiles/p-none', { revision: 1, name: 'auth-probe', category: 'tts', params: {} }],
    ['DELETE', '/api/v1/profiles/p-none'],
    ['GET', '/api/v1/audio-policy'],
    ['POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'auto', profile_id: null }],
    ['GET', '/api/v1/image-tests'],
    ['POST', '/api/v1/image-tests', { profile_id: 'p-none', prompt: 'x' }],
    ['POST', '/api/v1/image-tests/cancel', {}],
    ['GET', '/api/v1/chat-tests'],
    ['POST', '/api/v1/chat-tests/cancel', {}],
    ['POST', '/api/v1/token/rotate', {}],
    ['DELETE', '/api/v1/session'],
  ];
  const deck = { 'x-service-deck': '1' };
  const forgedKey = signed(randomBytes(32).toString('base64url'), b.service.secrets.sessionKey);
  const wrongSignature = signed(session.sessionId, 'not-the-session-key-0000000000000000');
  const unsigned = `sd_session=${encodeURIComponent(session.sessionId)}`;
  const resigned = await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: { ...deck, cookie: signed(session.sessionId, b.service.secrets.sessionKey) } });
  t.equal(resigned.status, 200, 'control: the real session id signed here with the real key is accepted, so the forgeries below differ only in what they claim');

  for (const [method, url, body] of routes) {
    const what = `${method} ${url}`;
    const full = { ...deck, cookie: session.cookie, 'x-csrf-token': session.csrf };
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { cookie: session.cookie, 'x-csrf-token': session.csrf } }), 403, 'permission_error', 'header_required', `${what} without X-Service-Deck`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...deck, 'x-csrf-token': session.csrf } }), 401, 'authentication_error', 'session_required', `${what} without a cookie`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...full, cookie: unsigned } }), 401, 'authentication_error', 'session_required', `${what} with the unsigned session id`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...full, cookie: wrongSignature } }), 401, 'authentication_error', 'session_required', `${what} with a cookie signed by another key`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...full, cookie: forgedKey } }), 401, 'authentication_error', 'session_required', `${what} with a validly signed but unknown session`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...deck, authorization: `Bearer ${TOKEN}` } }), 401, 'authentication_error', 'session_required', `${what} with the bearer token`);
    if (method === 'GET') continue;
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...deck, cookie: session.cookie } }), 403, 'permission_error', 'csrf_failed', `${what} without X-CSRF-Token`);
    await expectError(t, await call(b.adminUrl, method, url, { body, headers: { ...deck, cookie: session.cookie, 'x-csrf-token': `${session.csrf}x` } }), 403, 'permission_error', 'csrf_failed', `${what} with a wrong X-CSRF-Token`);
  }

  // None of the refused calls changed anything.
  t.ok(b.service.secrets.tokenMatches(TOKEN), 'the token was not rotated');
  t.same(b.service.profiles.list(), [], 'no profile was created');
  t.notOk(b.service.accepting(), 'the endpoint was not started');

  // Reads need no CSRF token; the session survived every refused DELETE /api/v1/session.
  const read = { ...deck, cookie: session.cookie };
  let response = await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: read });
  t.equal(response.status, 200, 'GET /api/v1/endpoint without CSRF token');
  t.match(await response.json(), { status: 'stopped' });
  response = await call(b.adminUrl, 'GET', '/api/v1/profiles', { headers: read });
  t.equal(response.status, 200, 'GET /api/v1/profiles without CSRF token');
  t.same(await response.json(), { profiles: [] });
  await expectError(t, await call(b.adminUrl, 'GET', '/api/v1/profiles/p-none', { headers: read }), 404, 'invalid_request_error', 'profile_not_found', 'GET of an unknown profile reaches the route');
});

t.test('inference routes: only the bearer token; a missing, wrong or malformed one is 401 with WWW-Authenticate', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const session = await login(b);
  const routes = ['/health', '/v1/models', '/v1/images/models', '/v1/audio/speech/models', '/v1/audio/transcriptions/models'];
  const refused: Array<[string, Record<string, string>]> = [
    ['no Authorization', {}],
    ['the admin session cookie', { cookie: session.cookie, 'x-service-deck': '1', 'x-csrf-token': session.csrf }],
    ['a wrong token', { authorization: 'Bearer sd-not-the-token' }],
    ['the token with one character more', { authorization: `Bearer ${TOKEN}x` }],
    ['Bearer without a token', { authorization: 'Bearer' }],
    ['the token without a scheme', { authorization: TOKEN }],
    ['another scheme', { authorization: `Token ${TOKEN}` }],
    ['Basic with the token', { authorization: `Basic ${Buffer.from(`user:${TOKEN}`).toString('base64')}` }],
    ['two words after Bearer', { authorization: `Bearer ${TOKEN} ${TOKEN}` }],
    ['the password', { authorization: `Bearer ${PASSWORD}` }],
  ];
  for (const url of routes) {
    for (const [what, headers] of refused) {
      const response = await call(b.apiUrl(), 'GET', url, { headers });
      await expectError(t, response, 401, 'authentication_error', 'invalid_api_key', `${url} with ${what}`);
      t.equal(response.headers.get('www-authenticate'), 'Bearer', `${url} with ${what}: WWW-Authenticate: Bearer`);
    }
    t.equal((await call(b.apiUrl(), 'GET', url, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 200, `${url} with the token`);
  }
  await expectError(t, await call(b.apiUrl(), 'GET', `/v1/models?api_key=${TOKEN}`), 401, 'authentication_error', 'invalid_api_key', 'the token in the query string');
  await expectError(t, await call(b.apiUrl(), 'POST', '/v1/chat/completions', { body: {} }), 401, 'authentication_error', 'invalid_api_key', 'a POST without a token');

  const health = await call(b.apiUrl(), 'GET', '/health', { headers: { authorization: `bearer ${TOKEN}` } });
  t.equal(health.status, 200, 'the scheme name is case-insensitive');
  t.match(await health.json(), { status: 'ok' });
});

t.test('POST /api/v1/token/rotate: the old token fails at once, the new one works', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });
  t.equal((await call(b.apiUrl(), 'GET', '/v1/models', bearer(TOKEN))).status, 200);

  let response = await b.admin('POST', '/api/v1/token/rotate', {});
  t.equal(response.status, 200);
  const body = (await response.json()) as Record<string, unknown>;
  t.same(Object.keys(body), ['token'], 'the reply holds only the token');
  const first = body.token as string;
  t.type(first, 'string');
  t.not(first, TOKEN);
  await expectError(t, await call(b.apiUrl(), 'GET', '/v1/models', bearer(TOKEN)), 401, 'authentication_error', 'invalid_api_key', 'the old token');
  t.equal((await call(b.apiUrl(), 'GET', '/v1/models', bearer(first))).status, 200, 'the new token on /v1/models');
  t.equal((await call(b.apiUrl(), 'GET', '/health', bearer(first))).status, 200, 'the new token on /health');

  response = await b.admin('POST', '/api/v1/token/rotate', {});
  const second = ((await response.json()) as { token: string }).token;
  t.not(second, first, 'every rotation issues a new token');
  await expectError(t, await call(b.apiUrl(), 'GET', '/v1/models', bearer(first)), 401, 'authentication_error', 'invalid_api_key', 'the token of the first rotation');
  t.equal((await call(b.apiUrl(), 'GET', '/v1/models', bearer(second))).status, 200, 'the token of the second rotation');
});

t.test('a rotation written by another process takes effect on the next request', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });
  t.equal((await call(b.apiUrl(), 'GET', '/v1/models', bearer(TOKEN))).status, 200, 'the service has read the stored token');

  const { store } = await SecretStore.open(b.stateDir);
  t.ok(b.service.secrets.unchanged(), 'the file is the one in force: each request checks the token at once');
  const rotated = await store.rotateToken();
  t.notOk(b.service.secrets.unchanged(), 'the outside write is seen by the stat alone');
  await expectError(t, await call(b.apiUrl(), 'GET', '/v1/models', bearer(TOKEN)), 401, 'authentication_error', 'invalid_api_key', 'the old token after the outside rotation');
  t.ok(b.service.secrets.unchanged(), 'that request read the file again');
  t.equal((await call(b.apiUrl(), 'GET', '/v1/models', bearer(rotated))).status, 200, 'the token the other process issued');
  t.equal((await call(b.apiUrl(), 'GET', '/health', bearer(rotated))).status, 200);
  t.equal((await b.admin('GET', '/api/v1/endpoint')).status, 200, 'the admin session still works: the session key was kept');
});

t.test('DELETE /api/v1/session logs out that session only', async (t) => {
  const b = await build(t);
  const session = await login(b);
  const headers = { 'x-service-deck': '1', cookie: session.cookie, 'x-csrf-token': session.csrf };
  t.equal((await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers })).status, 200);
  const response = await call(b.adminUrl, 'DELETE', '/api/v1/session', { headers });
  t.equal(response.status, 204);
  t.match(response.headers.get('set-cookie') ?? '', /^sd_session=;/, 'the cookie is cleared in the browser');
  await expectError(t, await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers }), 401, 'authentication_error', 'session_required', 'the old cookie after logout');
  await expectError(t, await call(b.adminUrl, 'POST', '/api/v1/token/rotate', { body: {}, headers }), 401, 'authentication_error', 'session_required', 'a change with the old cookie and CSRF token');
  t.equal((await b.admin('GET', '/api/v1/endpoint')).status, 200, "the helper's own session is still open");
});

t.test('secrets.json holds hashes only, with mode 0600', async (t) => {
  const b = await build(t);
  const rotated = ((await (await b.admin('POST', '/api/v1/token/rotate', {})).json()) as { token: string }).token;
  const file = path.join(b.stateDir, 'secrets.json');
  const text = await readFile(file, 'utf8');
  for (const [what, secret] of [
    ['password', PASSWORD],
    ['first token', TOKEN],
    ['rotated token', rotated],
  ] as const) {
    t.notOk(text.includes(secret), `secrets.json does not contain the ${what}`);
  }
  const stored = JSON.parse(text) as { passwordHash: string };
  t.match(stored.passwordHash, /^scrypt\$/, 'the password is kept as a scrypt hash');
  t.equal((await stat(file)).mode & 0o777, 0o600);
});

t.test('no CORS: neither a preflight nor a request with Origin gets a cross-origin permission', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const origin = 'http://evil.example';
  const preflight = await call(b.apiUrl(), 'OPTIONS', '/v1/chat/completions', {
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });
  t.same(corsHeaders(preflight), [], 'the preflight carries no access-control-allow-* header');
  t.ok(preflight.status >= 400, `the preflight is refused (${preflight.status})`);

  const withToken = await call(b.apiUrl(), 'OPTIONS', '/v1/models', { headers: { origin, 'access-control-request-method': 'GET', authorization: `Bearer ${TOKEN}` } });
  t.same(corsHeaders(withToken), [], 'an OPTIONS with the token carries none either');

  const get = await call(b.apiUrl(), 'GET', '/v1/models', { headers: { origin, authorization: `Bearer ${TOKEN}` } });
  t.equal(get.status, 200);
  t.same(corsHeaders(get), [], 'a GET with Origin carries no access-control-allow-* header');

  const adminPreflight = await call(b.adminUrl, 'OPTIONS', '/api/v1/session', { headers: { origin, 'access-control-request-method': 'POST' } });
  t.same(corsHeaders(adminPreflight), [], 'the admin listener grants no cross-origin permission either');
});
