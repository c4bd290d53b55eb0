// POST /api/v1/password: the operator changes the password from the console. The current password
// is checked like a login (a wrong one counts against the address), the new one has 8 to 1024
// characters, every older session ends and the caller gets a fresh one.
import t from 'tap';
import { build, PASSWORD, type Built } from '../helpers/build.js';

const NEW_PASSWORD = 'a much better passphrase';

const errorOf = async (response: Response) => ((await response.json()) as { error: { code: string; param: string | null } }).error;

/** A request with exactly these headers (no session of the helper's own). */
function call(b: Built, method: string, url: string, headers: Record<string, string>, body?: unknown): Promise<Response> {
  return fetch(`${b.adminUrl}${url}`, {
    method,
    headers: { 'x-service-deck': '1', ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

async function login(b: Built, password: string): Promise<{ status: number; cookie: string; csrf: string }> {
  const response = await call(b, 'POST', '/api/v1/session', {}, { password });
  if (response.status !== 200) return { status: response.status, cookie: '', csrf: '' };
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  return { status: 200, cookie, csrf: ((await response.json()) as { csrfToken: string }).csrfToken };
}

t.test('a password change ends older sessions and keeps the caller logged in', async (t) => {
  const b = await build(t, { login: false });
  const first = await login(b, PASSWORD);
  const other = await login(b, PASSWORD);
  t.equal(first.status, 200);

  let response = await call(b, 'POST', '/api/v1/password', { cookie: first.cookie }, { current: PASSWORD, password: NEW_PASSWORD });
  t.equal(response.status, 403, 'needs the CSRF token');
  t.equal((await errorOf(response)).code, 'csrf_failed');

  const headers = { cookie: first.cookie, 'x-csrf-token': first.csrf };
  response = await call(b, 'POST', '/api/v1/password', headers, { current: `${PASSWORD}-wrong`, password: NEW_PASSWORD });
  t.equal(response.status, 401, 'a wrong current password');
  t.equal((await errorOf(response)).code, 'invalid_password');

  for (const password of ['short12', 'x'.repeat(1025)]) {
    response = await call(b, 'POST', '/api/v1/password', headers, { current: PASSWORD, password });
    t.equal(response.status, 400, `a new password of ${password.length} characters`);
    t.match(await errorOf(response), { code: 'invalid_value', param: 'password', message: /characters/ });
  }
  t.equal((await login(b, NEW_PASSWORD)).status, 401, 'nothing changed so far');

  response = await call(b, 'POST', '/api/v1/password', headers, { current: PASSWORD, password: NEW_PASSWORD });
  t.equal(response.status, 200);
  const setCookie = response.headers.get('set-cookie') ?? '';
  t.match(setCookie, /^sd_session=.+; Max-Age=43200; Path=\/; HttpOnly; SameSite=Strict$/, 'a fresh session cookie');
  const fresh = { cookie: setCookie.split(';')[0] ?? '', csrf: ((await response.json()) as { csrfToken: string }).csrfToken };
  t.not(fresh.cookie, first.cookie);
  t.not(fresh.csrf, first.csrf);

  for (const [name, old] of [['the caller\'s old', first], ['another', other]] as const) {
    response = await call(b, 'GET', '/api/v1/endpoint', { cookie: old.cookie });
    t.equal(response.status, 401, `${name} session has ended`);
    t.equal((await errorOf(response)).code, 'session_required');
  }
  t.equal((await call(b, 'GET', '/api/v1/endpoint', { cookie: fresh.cookie })).status, 200, 'the fresh session works');
  response = await call(b, 'POST', '/api/v1/token/rotate', { cookie: fresh.cookie, 'x-csrf-token': fresh.csrf }, {});
  t.equal(response.status, 200, 'with its CSRF token');

  t.equal((await login(b, PASSWORD)).status, 401, 'the old password no longer logs in');
  t.equal((await login(b, NEW_PASSWORD)).status, 200, 'the new one does');
});

t.test('a wrong current password counts as a failed login of that address', async (t) => {
  const b = await build(t);
  const { cookie, csrf } = b.session();
  for (let i = 0; i < 10; i += 1) {
    const response = await call(b, 'POST', '/api/v1/password', { cookie, 'x-csrf-token': csrf }, { current: `guess-${i}`, password: NEW_PASSWORD });
    t.equal(response.status, 401, `guess ${i + 1}`);
  }
  let response = await call(b, 'POST', '/api/v1/session', {}, { password: PASSWORD });
  t.equal(response.status, 429, 'the login now waits');
  t.equal((await errorOf(response)).code, 'too_many_attempts');
  t.ok(Number(response.headers.get('retry-after')) > 0);
  response = await call(b, 'POST', '/api/v1/password', { cookie, 'x-csrf-token': csrf }, { current: PASSWORD, password: NEW_PASSWORD });
  t.equal(response.status, 429, 'and so does the password change, even with the right password');
  t.equal((await login(b, NEW_PASSWORD)).status, 429);
});
