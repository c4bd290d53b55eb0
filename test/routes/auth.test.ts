// Spec section 5 and CONTRACT section 3: the admin listener opens only to a session cookie with
// `X-Service-Deck: 1` (and the CSRF token on every change), the inference listener only to the
// bearer token; neither credential opens the other listener. The admin matrix runs over the route
// table the listener registers (a new route is in it at once; the public ones are listed with their
// reason), a wrong token or CSRF token of the right length is refused like any other, and a session
// is over 12 h after its login, when its cookie is. Token rotation takes effect at once, also when another process writes it,
// and secrets.json holds no secret in plain text.
import { createHmac, randomBytes } from 'node:crypto';
import { channel } from 'node:diagnostics_channel';
import { readFile, stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import t from 'tap';
import type { Test } from 'tap';
import { SecretStore } from '../../src/store/secrets.js';
import { SESSION_TTL_MS } from '../../src/system/sessions.js';
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

/** The same string with its last character changed: a wrong secret of the right length. */
const lastChanged = (secret: string) => `${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`;

interface Route {
  method: string;
  url: string;
}

/**
 * The admin listener as build() makes it, with every route it registers: an onRoute hook is put
 * on each Fastify instance as it is created (Fastify announces each on the diagnostics channel
 * `fastify.initialization`), and the routes of the instance that listens on the admin port are
 * kept. So a route added later is in the list without anyone adding it here.
 */
async function buildWithAdminRoutes(t: Test): Promise<{ b: Built; routes: Route[] }> {
  const made: Array<{ app: FastifyInstance; routes: Route[] }> = [];
  const initialization = channel('fastify.initialization');
  const onInit = (message: unknown) => {
    const { fastify } = message as { fastify: FastifyInstance };
    const routes: Route[] = [];
    made.push({ app: fastify, routes });
    fastify.addHook('onRoute', (route) => {
      for (const method of [route.method].flat()) routes.push({ method, url: route.url ?? route.path });
    });
  };
  initialization.subscribe(onInit);
  let b: Built;
  try {
    b = await build(t, { login: false });
  } finally {
    initialization.unsubscribe(onInit);
  }
  const port = b.service.adminAddress()?.port;
  const admin = made.filter(({ app }) => (app.server.address() as AddressInfo | null)?.port === port);
  if (admin.length !== 1) throw new Error(`expected one admin listener among the ${made.length} Fastify instances, found ${admin.length}`);
  return { b, routes: admin[0]!.routes };
}

/**
 * The admin routes that deliberately take no session, each with its reason. Every other route of
 * the admin listener must refuse a request without the header, without a valid session, and (when
 * it changes something) without the CSRF token.
 */
const PUBLIC_ADMIN_ROUTES: Array<{ method: string; url: string | RegExp; why: string }> = [
  { method: 'POST', url: '/api/v1/session', why: 'the login itself: X-Service-Deck and the password open the session (login tests above and in login.test.ts)' },
  { method: 'GET', url: '/api/v1/session', why: "the console's check at page load: X-Service-Deck only, and not logged in is an answer (logged_in: false), not a 401" },
  { method: 'GET', url: '/livez', why: 'the liveness probe: no authentication, only ok or not_ok and a reason code (health.test.ts)' },
  { method: 'GET', url: '/readyz', why: 'the readiness probe: no authentication, only ok or not_ok and a reason code (health.test.ts)' },
  { method: 'GET', url: '/metrics', why: 'its own guard: the scrape token as a bearer, or a session cookie (metrics.test.ts)' },
  { method: 'GET', url: /^\/(index\.html|assets\/[^/]+)?$/, why: 'the static console (its page and built assets): the page logs in through /api/v1/session (console.test.ts)' },
];

/** Why a route takes no session, or undefined when it must be guarded. HEAD follows its GET. */
function publicBecause({ method, url }: Route): string | undefined {
  const as = method === 'HEAD' ? 'GET' : method;
  return PUBLIC_ADMIN_ROUTES.find((p) => p.method === as && (typeof p.url === 'string' ? p.url === url : p.url.test(url)))?.why;
}

t.test('every admin route, as the listener registers them, needs the header, a real session, and the CSRF token to change anything', async (t) => {
  const { b, routes } = await buildWithAdminRoutes(t);
  const session = await login(b);
  const guarded = routes.filter((route) => publicBecause(route) === undefined);
  const listed = (method: string, url: string) => routes.some((r) => r.method === method && r.url === url);
  // Control: the collection sees the whole table, including the routes a hand-written list once left out.
  for (const [method, url] of [
    ['POST', '/api/v1/chat-tests/start'],
    ['POST', '/api/v1/chat-tests/unload'],
    ['GET', '/api/v1/prompt-enhancers'],
    ['POST', '/api/v1/prompt-enhancers/install'],
    ['POST', '/api/v1/prompt-enhancers/cancel'],
    ['POST', '/api/v1/prompt-enhancers/preview'],
    ['POST', '/api/v1/profiles/prompt-enhancer'],
    ['GET', '/api/v1/endpoint'],
    ['DELETE', '/api/v1/profiles/:id'],
  ] as const) {
    t.ok(guarded.some((r) => r.method === method && r.url === url), `${method} ${url} is in the route table and guarded`);
  }
  for (const exception of PUBLIC_ADMIN_ROUTES) {
    if (typeof exception.url === 'string') t.ok(listed(exception.method, exception.url), `the exception ${exception.method} ${exception.url} is still a route`);
  }
  t.ok(guarded.length >= 40, `${guarded.length} guarded routes of ${routes.length}`);

  const deck = { 'x-service-deck': '1' };
  const forgedKey = signed(randomBytes(32).toString('base64url'), b.service.secrets.sessionKey);
  const wrongSignature = signed(session.sessionId, 'not-the-session-key-0000000000000000');
  const unsigned = `sd_session=${encodeURIComponent(session.sessionId)}`;
  const resigned = await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: { ...deck, cookie: signed(session.sessionId, b.service.secrets.sessionKey) } });
  t.equal(resigned.status, 200, 'control: the real session id signed here with the real key is accepted, so the forgeries below differ only in what they claim');
  const sameLengthCsrf = lastChanged(session.csrf);
  t.equal(sameLengthCsrf.length, session.csrf.length);
  t.not(sameLengthCsrf, session.csrf);

  for (const { method, url: pattern } of guarded) {
    const url = pattern.replace(/:[A-Za-z]+/g, 'p-none').replace(/\*$/, 'x');
    const what = `${method} ${url}`;
    // A change carries a JSON body; a refusal comes before the body is read.
    const body = method === 'GET' || method === 'HEAD' ? undefined : {};
    const full = { ...deck, cookie: session.cookie, 'x-csrf-token': session.csrf };
    const refusals: Array<[string, Record<string, string>, number, string, string]> = [
      ['without X-Service-Deck', { cookie: session.cookie, 'x-csrf-token': session.csrf }, 403, 'permission_error', 'header_required'],
      ['without a cookie', { ...deck, 'x-csrf-token': session.csrf }, 401, 'authentication_error', 'session_required'],
      ['with the unsigned session id', { ...full, cookie: unsigned }, 401, 'authentication_error', 'session_required'],
      ['with a cookie signed by another key', { ...full, cookie: wrongSignature }, 401, 'authentication_error', 'session_required'],
      ['with a validly signed but unknown session', { ...full, cookie: forgedKey }, 401, 'authentication_error', 'session_required'],
      ['with the bearer token', { ...deck, authorization: `Bearer ${TOKEN}` }, 401, 'authentication_error', 'session_required'],
    ];
    if (method !== 'GET' && method !== 'HEAD') {
      refusals.push(
        ['without X-CSRF-Token', { ...deck, cookie: session.cookie }, 403, 'permission_error', 'csrf_failed'],
        ['with a longer X-CSRF-Token', { ...deck, cookie: session.cookie, 'x-csrf-token': `${session.csrf}x` }, 403, 'permission_error', 'csrf_failed'],
        ['with an X-CSRF-Token of the right length, its last character changed', { ...deck, cookie: session.cookie, 'x-csrf-token': sameLengthCsrf }, 403, 'permission_error', 'csrf_failed'],
      );
    }
    for (const [how, headers, status, type, code] of refusals) {
      const response = await call(b.adminUrl, method, url, { body, headers });
      // A HEAD answer has no body: its status tells.
      if (method === 'HEAD') t.equal(response.status, status, `${what} ${how} → ${status}`);
      else await expectError(t, response, status, type, code, `${what} ${how}`);
    }
  }

  // None of the refused calls changed anything.
  t.ok(b.service.secrets.tokenMatches(TOKEN), 'the token was not rotated');
  t.same(b.service.profiles.list(), [], 'no profile was created');
  t.notOk(b.service.accepting(), 'the endpoint was not started');

  // Reads need no CSRF token; the session survived every refused DELETE /api/v1/session and password change.
  const read = { ...deck, cookie: session.cookie };
  let response = await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: read });
  t.equal(response.status, 200, 'GET /api/v1/endpoint without CSRF token');
  t.match(await response.json(), { status: 'stopped' });
  response = await call(b.adminUrl, 'GET', '/api/v1/profiles', { headers: read });
  t.equal(response.status, 200, 'GET /api/v1/profiles without CSRF token');
  t.same(await response.json(), { profiles: [] });
  await expectError(t, await call(b.adminUrl, 'GET', '/api/v1/profiles/p-none', { headers: read }), 404, 'invalid_request_error', 'profile_not_found', 'GET of an unknown profile reaches the route');
  // And a change with the right token gets through the guard (here to the route's own 404).
  await expectError(t, await call(b.adminUrl, 'DELETE', '/api/v1/profiles/p-none', { headers: { ...read, 'x-csrf-token': session.csrf } }), 404, 'invalid_request_error', 'profile_not_found', 'the right CSRF token reaches the route');
});

t.test('an admin session lasts 12 h from its login, as its cookie says; use does not lengthen it: then 401 session_required, on a clock the test moves', async (t) => {
  // The session store's cache measures age with performance.now(): the test moves that clock on.
  const realNow = performance.now.bind(performance);
  let offset = 0;
  performance.now = () => realNow() + offset;
  t.teardown(() => void Reflect.deleteProperty(performance, 'now'));
  const advance = async (ms: number) => {
    offset += ms;
    // The cache keeps its reading of the clock for a millisecond.
    await new Promise((resolve) => setTimeout(resolve, 5));
  };
  const b = await build(t, { login: false });
  const loggedInAt = Date.now();
  const session = await login(b);
  const headers = { 'x-service-deck': '1', cookie: session.cookie, 'x-csrf-token': session.csrf };
  t.equal(SESSION_TTL_MS, 12 * 60 * 60 * 1000, 'the spec value: 12 hours');
  // What the browser is told: the cookie lasts 12 h from the login.
  t.match(session.setCookie, new RegExp(`; Max-Age=${SESSION_TTL_MS / 1000}(;|$)`), 'the cookie: Max-Age 12 h');
  const expires = Date.parse(/; Expires=([^;]+)/.exec(session.setCookie)?.[1] ?? '');
  t.ok(Math.abs(expires - (loggedInAt + SESSION_TTL_MS)) < 60_000, `the cookie: Expires 12 h after the login (${new Date(expires).toISOString()})`);

  // Used all along, every hour: the server keeps the session exactly as long as the cookie lives.
  for (let hour = 1; hour < 12; hour += 1) {
    await advance(60 * 60 * 1000);
    t.equal((await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers })).status, 200, `${hour} h after the login: open`);
  }
  await advance(60 * 60 * 1000 - 60_000);
  t.equal((await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers })).status, 200, '12 h less a minute after the login: still open');
  await advance(2 * 60_000);
  await expectError(t, await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers }), 401, 'authentication_error', 'session_required', '12 h and a minute after the login, used a minute ago: over, as the cookie is');
  await expectError(t, await call(b.adminUrl, 'POST', '/api/v1/token/rotate', { body: {}, headers }), 401, 'authentication_error', 'session_required', 'a change with the expired session and its CSRF token');
  t.match(await (await call(b.adminUrl, 'GET', '/api/v1/session', { headers })).json(), { logged_in: false }, 'the console sees it logged out');
  t.ok(b.service.secrets.tokenMatches(TOKEN), 'the token was not rotated');
  const again = await login(b);
  t.equal((await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: { 'x-service-deck': '1', cookie: again.cookie } })).status, 200, 'a new login opens a new session');
  await advance(SESSION_TTL_MS + 60_000);
  await expectError(t, await call(b.adminUrl, 'GET', '/api/v1/endpoint', { headers: { 'x-service-deck': '1', cookie: again.cookie } }), 401, 'authentication_error', 'session_required', 'left alone for 12 h: over as well');
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
    ['a token of the right length, its last character changed', { authorization: `Bearer ${lastChanged(TOKEN)}` }],
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
