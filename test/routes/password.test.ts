// POST /api/v1/password: the operator changes the password from the console. The current password
// is checked like a login (a wrong one counts against the address), the new one has 8 to 1024
// characters, every older session ends and every device cookie is revoked; the caller gets a fresh
// session and a fresh device cookie.
import t from 'tap';
import { SecretStore } from '../../src/store/secrets.js';
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

/** The `name=value` of the reply's Set-Cookie for `name`, '' when none. */
const cookieOf = (response: Response, name: string) => response.headers.getSetCookie().find((c) => c.startsWith(`${name}=`))?.split(';')[0] ?? '';

async function login(b: Built, password: string, device = ''): Promise<{ status: number; cookie: string; csrf: string; device: string }> {
  const response = await call(b, 'POST', '/api/v1/session', device ? { cookie: device } : {}, { password });
  if (response.status !== 200) return { status: response.status, cookie: '', csrf: '', device: '' };
  return { status: 200, cookie: cookieOf(response, 'sd_session'), csrf: ((await response.json()) as { csrfToken: string }).csrfToken, device: cookieOf(response, 'sd_device') };
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
  const [setCookie = '', deviceCookie = ''] = response.headers.getSetCookie();
  t.match(setCookie, /^sd_session=.+; Max-Age=43200; Path=\/; Expires=[^;]+ GMT; HttpOnly; SameSite=Strict$/, 'a fresh session cookie, 12 h from now');
  t.match(deviceCookie, /^sd_device=.+; Max-Age=7776000; Path=\/api\/v1\/session; HttpOnly; SameSite=Strict$/, 'and a fresh device cookie');
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

t.test('a password change revokes every device cookie; the caller gets a new one', async (t) => {
  const b = await build(t, { login: false });
  const caller = await login(b, PASSWORD);
  const other = await login(b, PASSWORD);
  t.ok(caller.device && other.device && caller.device !== other.device, 'two browsers, two device cookies');
  const response = await call(b, 'POST', '/api/v1/password', { cookie: caller.cookie, 'x-csrf-token': caller.csrf }, { current: PASSWORD, password: NEW_PASSWORD });
  t.equal(response.status, 200);
  const renewed = cookieOf(response, 'sd_device');
  t.ok(renewed && renewed !== caller.device, 'the caller has a new device cookie');

  for (let i = 0; i < 10; i += 1) t.equal((await login(b, `guess-${i}`)).status, 401, `another local process guesses (${i + 1})`);
  t.equal((await login(b, NEW_PASSWORD)).status, 429, 'the loopback source is blocked');
  for (const [name, device] of [["the caller's old", caller.device], ["the other browser's", other.device]]) {
    t.equal((await login(b, NEW_PASSWORD, device)).status, 429, `${name} device cookie was revoked: it waits like no cookie`);
  }
  const again = await login(b, NEW_PASSWORD, renewed);
  t.equal(again.status, 200, 'the new device cookie gets through the block');
  t.equal(again.device, renewed, 'and is kept');

  // `service-deck set-password` in another process: the service reads secrets.json again.
  await (await SecretStore.open(b.stateDir)).store.setPassword('a third long password');
  t.equal((await login(b, 'a third long password', renewed)).status, 429, 'a password set from the command line revokes it too');
});
