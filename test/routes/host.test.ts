// The Host check of both listeners: a DNS rebinding page drives the listeners
// from the operator's browser under its own name, so only the names of this machine (loopback
// names, the address a connection arrived at) and the configured ones are served; any other is a
// 421 in the OpenAI error body, before the login or the bearer token is looked at. Behind a TLS
// proxy that the operator trusts, the session cookie is Secure.
import t from 'tap';
import type { Test } from 'tap';
import { build, PASSWORD, TOKEN } from '../helpers/build.js';
import { openSocket, parseRaw, rawRequest, type RawReply } from '../helpers/raw.js';

const deck = { 'x-service-deck': '1' };

function expectMisdirected(t: Test, reply: RawReply, what: string): void {
  t.equal(reply.status, 421, `${what}: 421`);
  const body = JSON.parse(reply.text) as { error: Record<string, unknown> };
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'], `${what}: the OpenAI error body`);
  t.same([body.error.type, body.error.code, body.error.param], ['invalid_request_error', 'misdirected_request', null], `${what}: type and code`);
}

const login = (url: string, headers: Record<string, string>) =>
  rawRequest(`${url}/api/v1/session`, { method: 'POST', headers: { ...deck, ...headers }, body: JSON.stringify({ password: PASSWORD }) });

t.test('both listeners serve their own names only', async (t) => {
  const b = await build(t, { login: false });
  await b.login();
  await b.startEndpoint();
  const port = new URL(b.adminUrl).port;

  for (const host of ['localhost', `localhost:${port}`, 'LOCALHOST:1', '127.0.0.1', `127.0.0.1:${port}`, '[::1]', '[::1]:8110', 'localhost.']) {
    const reply = await rawRequest(`${b.adminUrl}/api/v1/session`, { headers: { ...deck, host } });
    t.equal(reply.status, 200, `admin: Host ${host} is served`);
  }
  for (const host of ['evil.example', `evil.example:${port}`, '127.0.0.1.evil.example', 'localhost:80@evil.example', '10.0.0.1', '[::2]']) {
    expectMisdirected(t, await rawRequest(`${b.adminUrl}/api/v1/session`, { headers: { ...deck, host } }), `admin: Host "${host}"`);
  }
  const bare = await openSocket(b.adminUrl);
  bare.socket.write('GET /api/v1/session HTTP/1.1\r\nX-Service-Deck: 1\r\nConnection: close\r\n\r\n');
  await bare.closed;
  const noHost = parseRaw(bare.received());
  expectMisdirected(t, { status: noHost.status, headers: {}, text: JSON.stringify(noHost.body) }, 'admin: no Host header');

  const rebound = await login(b.adminUrl, { host: 'evil.example' });
  expectMisdirected(t, rebound, 'a login under another name');
  t.equal(rebound.headers['set-cookie'], undefined, 'opens no session');

  const models = (host: string) => rawRequest(`${b.apiUrl()}/v1/models`, { headers: { authorization: `Bearer ${TOKEN}`, host } });
  t.equal((await models(`127.0.0.1:${new URL(b.apiUrl()).port}`)).status, 200, 'inference: its own address is served');
  t.equal((await models('localhost')).status, 200, 'inference: localhost is served');
  expectMisdirected(t, await models('evil.example'), 'inference: another name, even with the right token');
  const unauthenticated = await rawRequest(`${b.apiUrl()}/v1/models`, { headers: { host: 'evil.example' } });
  t.equal(unauthenticated.status, 421, 'the name is checked before the token');
});

t.test('configured names are served; X-Forwarded-Proto makes the cookie Secure only from a trusted proxy', async (t) => {
  const b = await build(t, { login: false, env: { SERVICE_DECK_ALLOWED_HOSTS: 'Deck.Example.com, gpu-box', SERVICE_DECK_TRUST_PROXY: '1' } });
  t.equal((await rawRequest(`${b.adminUrl}/api/v1/session`, { headers: { ...deck, host: 'deck.example.com:443' } })).status, 200, 'a configured name, any case, with a port');
  t.equal((await rawRequest(`${b.adminUrl}/api/v1/session`, { headers: { ...deck, host: 'gpu-box' } })).status, 200, 'the second configured name');
  expectMisdirected(t, await rawRequest(`${b.adminUrl}/api/v1/session`, { headers: { ...deck, host: 'other.example.com' } }), 'a name not configured');

  const overTls = await login(b.adminUrl, { host: 'deck.example.com', 'x-forwarded-proto': 'https' });
  t.equal(overTls.status, 200);
  t.match(String(overTls.headers['set-cookie']), /^sd_session=[^;]+;.*; Secure(;|$)/, 'over TLS through the trusted proxy: Secure');
  const plain = await login(b.adminUrl, { host: 'deck.example.com', 'x-forwarded-proto': 'http' });
  t.notMatch(String(plain.headers['set-cookie']), /Secure/, 'the proxy says plain HTTP: not Secure');

  const untrusting = await build(t, { login: false });
  const forged = await login(untrusting.adminUrl, { 'x-forwarded-proto': 'https' });
  t.equal(forged.status, 200);
  t.notMatch(String(forged.headers['set-cookie']), /Secure/, 'without SERVICE_DECK_TRUST_PROXY the header is not believed');
});
