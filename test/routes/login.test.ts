// The login throttle through the admin listener. A parallel flood of wrong
// passwords is counted before scrypt runs, so at most the source's limit is checked and the rest
// is refused at once, while the inference listener keeps answering quickly; another loopback
// address is the same source; the operator's browser, which logged in before, gets through a
// block that another local process caused, and only its own guesses block it. Device cookies do
// not multiply guesses: a password change revokes them all, and a device id the server
// never issued counts against its source.
import { sign } from '@fastify/cookie';
import t from 'tap';
import { DEVICE_COOKIE, SessionStore } from '../../src/system/sessions.js';
import { build, PASSWORD } from '../helpers/build.js';
import { rawRequest } from '../helpers/raw.js';

const login = (adminUrl: string, password: string, { from, cookie }: { from?: string; cookie?: string } = {}) =>
  rawRequest(`${adminUrl}/api/v1/session`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', ...(cookie ? { cookie } : {}) },
    body: JSON.stringify({ password }),
    ...(from ? { localAddress: from } : {}),
  });

const codeOf = (text: string) => (JSON.parse(text) as { error?: { code?: string } }).error?.code;

/** The `name=value` of a Set-Cookie the reply carries, '' when none. */
const cookieOf = (headers: Record<string, string | string[] | undefined>, name: string) =>
  ([] as string[]).concat(headers['set-cookie'] ?? []).find((c) => c.startsWith(`${name}=`))?.split(';')[0] ?? '';

t.test('200 wrong passwords at once: at most 10 are checked, the rest refused at once, /v1/models stays quick', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const flood = Promise.all(Array.from({ length: 200 }, (_, i) => login(b.adminUrl, `guess-${i}`, { from: `127.0.0.${1 + (i % 20)}` })));
  const latencies: number[] = [];
  // While the flood is in: its connections are open and its first passwords are being checked.
  await new Promise((resolve) => setTimeout(resolve, 500));
  for (let i = 0; i < 5; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = Date.now();
    const response = await b.api('GET', '/v1/models');
    latencies.push(Date.now() - before);
    t.equal(response.status, 200);
  }
  const replies = await flood;
  const statuses = replies.map((r) => r.status);
  const checked = statuses.filter((s) => s === 401).length;
  t.ok(checked <= 10, `${checked} passwords were checked (limit 10 per source and minute)`);
  t.equal(checked + statuses.filter((s) => s === 429).length, 200, 'every other attempt was refused with 429');
  t.same([...new Set(replies.filter((r) => r.status === 429).map((r) => codeOf(r.text)))].filter((c) => c !== 'login_busy'), ['too_many_attempts']);
  t.ok(replies.filter((r) => r.status === 429).every((r) => Number(r.headers['retry-after']) > 0), 'each with Retry-After');
  t.ok(Math.max(...latencies) < 1_000, `GET /v1/models took at most ${Math.max(...latencies)} ms during the flood`);
  t.equal((await login(b.adminUrl, PASSWORD, { from: '127.0.0.99' })).status, 429, 'a right password from a fresh loopback address without a device cookie waits too');
});

t.test("the operator's browser gets through a block another local process caused", async (t) => {
  const b = await build(t, { login: false });
  const first = await login(b.adminUrl, PASSWORD);
  t.equal(first.status, 200);
  const cookies = ([] as string[]).concat(first.headers['set-cookie'] ?? []);
  t.match(cookies[0], /^sd_session=/, 'the session cookie comes first');
  const deviceSetCookie = cookies.find((c) => c.startsWith('sd_device=')) ?? '';
  t.match(deviceSetCookie, /; Path=\/api\/v1\/session; HttpOnly; SameSite=Strict$/, 'a device cookie, sent back to the login only');
  const device = deviceSetCookie.split(';')[0] ?? '';

  for (let i = 0; i < 10; i += 1) await login(b.adminUrl, `guess-${i}`, { from: '127.0.0.2' });
  t.equal((await login(b.adminUrl, 'guess', { from: '127.0.0.3' })).status, 429, 'another loopback address does not escape the block');
  t.equal((await login(b.adminUrl, PASSWORD)).status, 429, 'a browser without a device cookie waits');
  t.equal((await login(b.adminUrl, PASSWORD, { cookie: 'sd_device=forged-device-id-0000000' })).status, 429, 'an unsigned device cookie counts for nothing');
  const again = await login(b.adminUrl, PASSWORD, { cookie: device });
  t.equal(again.status, 200, 'the browser that logged in before gets in with the right password');
  const opened = ([] as string[]).concat(again.headers['set-cookie'] ?? []);
  t.ok(opened.some((c) => c.startsWith(`${device};`)), 'and keeps its device id');

  for (let i = 0; i < 10; i += 1) t.equal((await login(b.adminUrl, `guess-${i}`, { cookie: device })).status, 401, `a guess with the device cookie is checked (${i + 1})`);
  const blocked = await login(b.adminUrl, PASSWORD, { cookie: device });
  t.equal(blocked.status, 429, 'ten wrong passwords with the device cookie block that device');
  t.equal(codeOf(blocked.text), 'too_many_attempts');
});

t.test('harvested device cookies: a password change revokes them, never-issued ids count against the source', async (t) => {
  const b = await build(t, { login: false });
  // Someone who knew the old password logged in from 20 browsers (or copied their cookies).
  const harvested: string[] = [];
  let last = { session: '', csrf: '' };
  for (let i = 0; i < 20; i += 1) {
    const reply = await login(b.adminUrl, PASSWORD);
    t.equal(reply.status, 200);
    harvested.push(cookieOf(reply.headers, DEVICE_COOKIE));
    last = { session: cookieOf(reply.headers, 'sd_session'), csrf: (JSON.parse(reply.text) as { csrfToken: string }).csrfToken };
  }
  t.equal(new Set(harvested).size, 20, '20 device cookies');
  const NEW_PASSWORD = 'a much better passphrase';
  const changed = await rawRequest(`${b.adminUrl}/api/v1/password`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', cookie: last.session, 'x-csrf-token': last.csrf },
    body: JSON.stringify({ current: PASSWORD, password: NEW_PASSWORD }),
  });
  t.equal(changed.status, 200, 'the operator changes the password');
  const operator = cookieOf(changed.headers, DEVICE_COOKIE);
  t.ok(operator !== '' && !harvested.includes(operator), 'and gets a new device cookie with the new session');
  // Devices signed with the service's own key but never issued by a login: a bare id (as device
  // cookies were before), and ids with a mark of their own making.
  const signed = (value: string) => `${DEVICE_COOKIE}=${encodeURIComponent(sign(value, b.service.secrets.sessionKey))}`;
  const id = () => SessionStore.newDevice('any').split('.')[0] ?? '';
  const forged = [signed(id()), ...Array.from({ length: 4 }, () => signed(`${id()}.${'A'.repeat(43)}`))];

  for (let i = 0; i < 10; i += 1) await login(b.adminUrl, `guess-${i}`, { from: '127.0.0.2' });
  t.equal((await login(b.adminUrl, NEW_PASSWORD)).status, 429, 'the loopback source is blocked');

  const started = Date.now();
  const replies = [];
  for (let i = 0; i < 10; i += 1) for (const cookie of [...harvested, ...forged]) replies.push(await login(b.adminUrl, `guess-${i}`, { cookie }));
  const checked = replies.filter((r) => r.status === 401).length;
  t.comment(`${replies.length} guesses with revoked or never-issued device cookies: ${checked} checked in ${Date.now() - started} ms`);
  t.equal(checked, 0, 'none of them was checked: each counted against the blocked source');
  t.same([...new Set(replies.map((r) => `${r.status} ${codeOf(r.text)}`))], ['429 too_many_attempts']);
  t.equal((await login(b.adminUrl, NEW_PASSWORD, { cookie: harvested[0] })).status, 429, 'a revoked cookie with the new password waits like no cookie');

  const again = await login(b.adminUrl, NEW_PASSWORD, { cookie: operator });
  t.equal(again.status, 200, "the operator's browser, known under the new password, gets through the block");
  t.equal(cookieOf(again.headers, DEVICE_COOKIE), operator, 'and keeps its device id');
});
