// Input limits on both listeners (spec 4.2 and 8, CONTRACT section 5): JSON bodies up to 1 MiB, no
// chunked uploads, JSON only, unknown routes and unknown fields refused, every refusal in the
// OpenAI error body { error: { message, type, param, code } }.
import { request } from 'node:http';
import t from 'tap';
import type { Test } from 'tap';
import { build, PASSWORD, TOKEN, type Built } from '../helpers/build.js';

const MiB = 1024 * 1024;

interface Expected {
  type: string;
  code: string;
  param: string | null;
}

/** The exact OpenAI error shape: one key `error` holding exactly message, type, param and code. */
function assertErrorBody(t: Test, body: unknown, expected: Expected, what: string): void {
  t.ok(body !== null && typeof body === 'object' && !Array.isArray(body), `${what}: the body is an object`);
  t.same(Object.keys(body as object), ['error'], `${what}: the body holds only "error"`);
  const error = (body as { error: Record<string, unknown> }).error;
  t.same(Object.keys(error).sort(), ['code', 'message', 'param', 'type'], `${what}: error has message, type, param, code`);
  t.type(error.message, 'string', `${what}: message is a string`);
  t.ok((error.message as string).length > 0, `${what}: message is not empty`);
  t.type(error.type, 'string', `${what}: type is a string`);
  t.ok(error.param === null || typeof error.param === 'string', `${what}: param is a string or null`);
  t.ok(error.code === null || typeof error.code === 'string', `${what}: code is a string or null`);
  t.equal(error.type, expected.type, `${what}: type ${expected.type}`);
  t.equal(error.code, expected.code, `${what}: code ${expected.code}`);
  t.equal(error.param, expected.param, `${what}: param ${expected.param}`);
}

async function expectError(t: Test, response: Response, status: number, expected: Expected, what: string): Promise<void> {
  t.equal(response.status, status, `${what}: status ${status}`);
  t.match(response.headers.get('content-type') ?? '', /^application\/json/, `${what}: a JSON error`);
  assertErrorBody(t, await response.json(), expected, what);
}

const invalid = (code: string, param: string | null = null): Expected => ({ type: 'invalid_request_error', code, param });

/** A JSON body of exactly `bytes` bytes: a chat profile whose model path fills the rest. */
function jsonOfSize(bytes: number): string {
  const shell = JSON.stringify({ name: 'big', category: 'chat', params: { model: '/' } });
  const body = shell.replace('"/"', `"/${'a'.repeat(bytes - shell.length)}"`);
  if (Buffer.byteLength(body) !== bytes) throw new Error('size mismatch');
  return body;
}

/** Logs in without the helper, to use the cookie and CSRF token in raw node:http requests. */
async function session(b: Built): Promise<Record<string, string>> {
  const response = await fetch(`${b.adminUrl}/api/v1/session`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', 'content-type': 'application/json' },
    body: JSON.stringify({ password: PASSWORD }),
  });
  const cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const { csrfToken } = (await response.json()) as { csrfToken: string };
  return { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken };
}

interface RawReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

/** A POST whose body goes out in chunks (`transfer-encoding: chunked`, no content-length). */
function postChunked(base: string, path: string, headers: Record<string, string>, chunks: string[]): Promise<RawReply> {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked', ...headers } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: JSON.parse(text) as unknown }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    for (const chunk of chunks) req.write(chunk);
    req.end();
  });
}

t.test('a JSON body over 1 MiB is 413 payload_too_large on both listeners', async (t) => {
  const b = await build(t);
  await b.startEndpoint();

  await expectError(t, await b.admin('POST', '/api/v1/profiles', jsonOfSize(MiB + 1)), 413, invalid('payload_too_large'), 'admin, 1 MiB + 1 byte');
  await expectError(t, await b.admin('POST', '/api/v1/profiles', jsonOfSize(4 * MiB)), 413, invalid('payload_too_large'), 'admin, 4 MiB');
  // Exactly 1 MiB is inside the limit: it reaches validation, which refuses the overlong path.
  await expectError(t, await b.admin('POST', '/api/v1/profiles', jsonOfSize(MiB)), 400, invalid('invalid_value', 'params.model'), 'admin, exactly 1 MiB');
  t.same(((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: unknown[] }).profiles, [], 'nothing was saved');

  const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(MiB) }] });
  await expectError(t, await b.api('POST', '/v1/chat/completions', chat), 413, invalid('payload_too_large'), 'inference, chat request over 1 MiB');
  t.equal((await b.api('GET', '/v1/models')).status, 200, 'the inference listener still answers afterwards');
});

t.test('a chunked request body is 400 chunked_upload on both listeners', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const profile = JSON.stringify({ name: 'chunked', category: 'tts', params: {} });
  const admin = await postChunked(b.adminUrl, '/api/v1/profiles', await session(b), [profile.slice(0, 10), profile.slice(10)]);
  t.equal(admin.status, 400, 'admin: status 400');
  assertErrorBody(t, admin.body, invalid('chunked_upload'), 'admin');
  t.equal(admin.headers.connection, 'close', 'admin: the connection is closed after the refusal');
  t.same(((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: unknown[] }).profiles, [], 'the chunked profile was not saved');

  const chat = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
  const inference = await postChunked(b.apiUrl(), '/v1/chat/completions', { authorization: `Bearer ${TOKEN}` }, [chat.slice(0, 5), chat.slice(5)]);
  t.equal(inference.status, 400, 'inference: status 400');
  assertErrorBody(t, inference.body, invalid('chunked_upload'), 'inference');
});

t.test('malformed JSON is 400 invalid_json; a body that is not JSON is 415', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  await expectError(t, await b.admin('POST', '/api/v1/profiles', '{"name":'), 400, invalid('invalid_json'), 'admin, cut-off JSON');
  await expectError(t, await b.admin('POST', '/api/v1/endpoint/start', '{x:1}'), 400, invalid('invalid_json'), 'admin, JSON with a bare key');
  await expectError(t, await b.api('POST', '/v1/chat/completions', '{"model": "m", "messages": ['), 400, invalid('invalid_json'), 'inference, cut-off JSON');

  const profile = JSON.stringify({ name: 'plain', category: 'tts', params: {} });
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
    await expectError(t, await b.admin('POST', '/api/v1/profiles', profile, { 'content-type': type }), 415, invalid('unsupported_media_type'), `admin, ${type}`);
  }
  await expectError(t, await b.admin('POST', '/api/v1/endpoint/stop', 'stop', { 'content-type': 'text/plain' }), 415, invalid('unsupported_media_type'), 'admin stop, text/plain');
  t.same(((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: unknown[] }).profiles, [], 'nothing was saved');
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { status: 'running' }, 'the refused stop did not stop the endpoint');
});

t.test('unknown routes are 404 unknown_route on both listeners, after the token on the inference one', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  for (const [method, url] of [
    ['GET', '/api/v1/nothing-here'],
    ['GET', '/nothing-here'],
    ['POST', '/api/v1/endpoint'],
    ['DELETE', '/api/v1/profiles'],
  ] as const) {
    await expectError(t, await b.admin(method, url, method === 'POST' ? {} : undefined), 404, invalid('unknown_route'), `admin ${method} ${url}`);
  }
  for (const [method, url] of [
    ['GET', '/v1/nothing-here'],
    ['GET', '/'],
    ['POST', '/v1/assistants'],
    ['POST', '/v1/embeddings'],
    ['POST', '/v1/models'],
    ['DELETE', '/v1/models'],
  ] as const) {
    const body = method === 'POST' ? {} : undefined;
    await expectError(t, await b.api(method, url, body), 404, invalid('unknown_route'), `inference ${method} ${url}`);
    const anonymous = await fetch(`${b.apiUrl()}${url}`, { method, ...(body ? { headers: { 'content-type': 'application/json' }, body: '{}' } : {}) });
    await expectError(t, anonymous, 401, { type: 'authentication_error', code: 'invalid_api_key', param: null }, `inference ${method} ${url} without a token`);
  }
});

t.test('a route that the inference listener serves under /v1 says that the base URL ends in /v1', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const message = async (response: Response) => ((await response.json()) as { error: { message: string; code: string } }).error;
  const missing = await b.api('POST', '/chat/completions', { model: 'x', messages: [] });
  t.equal(missing.status, 404);
  t.match(await message(missing), { code: 'unknown_route', message: /^Unknown route: POST \/chat\/completions\. The base URL of this API ends in \/v1: .* sends POST \/v1\/chat\/completions\.$/ });
  t.match(await message(await b.api('GET', '/models')), { message: /base URL of this API ends in \/v1.*GET \/v1\/models/ }, 'a model list too');
  t.match(await message(await b.api('POST', '/v1/v1/audio/speech', {})), { message: /already ends in \/v1 .*\/v1\/audio\/speech is the route/ }, '/v1 twice');
  // No hint where /v1 would not help: another method, a route that is not served, the admin listener.
  t.notMatch(await message(await b.api('DELETE', '/chat/completions')), /\/v1/, 'no hint for a method the route does not take');
  t.notMatch(await message(await b.api('POST', '/embeddings', {})), /base URL/, 'no hint for a route the service does not serve');
  t.notMatch(await message(await b.admin('POST', '/chat/completions', {})), /base URL/, 'the admin listener serves no /v1 routes');
});

t.test('unknown body fields are 400 unknown_parameter naming the field', async (t) => {
  const b = await build(t, { login: false });
  await expectError(
    t,
    await b.admin('POST', '/api/v1/session', { password: PASSWORD, remember: true }),
    400,
    invalid('unknown_parameter', 'remember'),
    'login with an extra field',
  );
  await b.login();
  await expectError(t, await b.admin('POST', '/api/v1/endpoint/start', { x: 1 }), 400, invalid('unknown_parameter', 'x'), 'endpoint start');
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { status: 'stopped' }, 'the refused start did not start the endpoint');
  await expectError(t, await b.admin('POST', '/api/v1/endpoint/config', { port: 8121, tls: true }), 400, invalid('unknown_parameter', 'tls'), 'endpoint config');
  await expectError(
    t,
    await b.admin('POST', '/api/v1/endpoint/profile', { id: 'p-x', enabled: true, exclusive: true }),
    400,
    invalid('unknown_parameter', 'exclusive'),
    'endpoint profile',
  );
  await expectError(t, await b.admin('POST', '/api/v1/token/rotate', { length: 64 }), 400, invalid('unknown_parameter', 'length'), 'token rotate');

  const chat = { name: 'c', category: 'chat', params: { model: '/models/c.gguf' } };
  await expectError(t, await b.admin('POST', '/api/v1/profiles', { ...chat, bogus: 1 }), 400, invalid('unknown_parameter', 'bogus'), 'profile, top level');
  await expectError(
    t,
    await b.admin('POST', '/api/v1/profiles', { ...chat, params: { ...chat.params, bogus: 1 } }),
    400,
    invalid('unknown_parameter', 'params.bogus'),
    'profile, inside params',
  );
  await expectError(
    t,
    await b.admin('POST', '/api/v1/profiles', { ...chat, params: { ...chat.params, sampling: { temperature: 0.5, mirostat: 2 } } }),
    400,
    invalid('unknown_parameter', 'params.sampling.mirostat'),
    'profile, inside params.sampling',
  );
  await expectError(
    t,
    await b.admin('POST', '/api/v1/profiles', { name: 't', category: 'tts', params: { pitch: 3 } }),
    400,
    invalid('unknown_parameter', 'params.pitch'),
    'tts profile, inside params',
  );
  t.same(((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: unknown[] }).profiles, [], 'nothing was saved');
});
