// Client mistakes are client errors: a lone surrogate in a JSON string, JSON
// nested thousands of levels deep, a multipart body without or with the wrong boundary or cut
// short, a multipart form over its limits, and what Node's parser refuses before any route (headers
// too large, a body framed by both Content-Length and Transfer-Encoding, a line that is not HTTP)
// are each a 4xx in the contract's OpenAI body, on both listeners, and none is logged as a failure.
import t from 'tap';
import type { Test } from 'tap';
import { build, TOKEN, type Built } from '../helpers/build.js';
import { openSocket, parseRaw } from '../helpers/raw.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function expectClientError(t: Test, response: Response, status: number, code: string, param: string | null, what: string): Promise<void> {
  t.equal(response.status, status, `${what}: ${status}`);
  const body = (await response.json()) as ErrorBody;
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'], `${what}: the OpenAI error body`);
  t.same([body.error.type, body.error.code, body.error.param], ['invalid_request_error', code, param], `${what}: ${code}`);
}

/** No request of the test ended as a server failure in the log (no 5xx, no stack trace). */
function noFailureLogged(t: Test, b: Built): void {
  const failures = b.logLines.filter((line) => /"level":50|"msg":"request failed"|"stack"/.test(line));
  t.same(failures, [], 'nothing was logged as a failure');
}

/** `{"a":{"a":...}}` nested `depth` objects deep, around `inner`. */
const nested = (depth: number, inner = '{}') => '{"a":'.repeat(depth) + inner + '}'.repeat(depth);

const chat = (extra: string) => `{"model":"none","messages":[{"role":"user","content":"hi"}]${extra}}`;
const tool = (parameters: string) => chat(`,"tools":[{"type":"function","function":{"name":"f","parameters":${parameters}}}]`);
const schema = (inner: string) => chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":${inner}}}`);

t.test('lone surrogates and deep nesting in JSON are 400 invalid_value, on both listeners', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const post = (body: string) => b.api('POST', '/v1/chat/completions', body);

  await expectClientError(t, await post('{"model":"none","messages":[{"role":"user","content":"a\\ud800b"}]}'), 400, 'invalid_value', 'messages.0.content', 'a lone high surrogate in chat content');
  await expectClientError(t, await post('{"model":"none","messages":[{"role":"user","content":[{"type":"text","text":"\\udc00"}]}]}'), 400, 'invalid_value', 'messages.0.content.0.text', 'a lone low surrogate in a text part');
  await expectClientError(t, await post(tool('{"\\ud800":1}')), 400, 'invalid_value', 'tools.0.function.parameters', 'a lone surrogate in a key');
  t.equal((await post('{"model":"none","messages":[{"role":"user","content":"\\ud83d\\ude00 ok"}]}')).status, 404, 'a surrogate pair is a character like any other (on to the model lookup)');

  const started = Date.now();
  await expectClientError(t, await post(tool(nested(4000))), 400, 'invalid_value', 'tools', 'tool parameters nested 4000 deep');
  await expectClientError(t, await post(schema(nested(4000))), 400, 'invalid_value', 'response_format', 'a response_format schema nested 4000 deep');
  await expectClientError(t, await post(chat(`,"stop":${'['.repeat(5000)}${']'.repeat(5000)}`)), 400, 'invalid_value', 'stop', 'arrays nested 5000 deep');
  t.ok(Date.now() - started < 5_000, 'each is refused at once, before any worker');
  t.equal((await post(tool(nested(30, '{"type":"object"}')))).status, 404, 'a schema 30 levels deep is fine (on to the model lookup)');

  await expectClientError(t, await b.admin('POST', '/api/v1/profiles', `{"name":"deep","category":"chat","params":${nested(4000)}}`), 400, 'invalid_value', 'params', 'admin: a profile nested 4000 deep');
  await expectClientError(t, await b.admin('POST', '/api/v1/profiles', '{"name":"\\udfff","category":"tts","params":{}}'), 400, 'invalid_value', 'name', 'admin: a lone surrogate in a profile name');
  t.same(b.service.profiles.list(), [], 'no profile was created');
  noFailureLogged(t, b);
});

const BOUNDARY = 'sd-test-boundary';
const CRLF = '\r\n';
const field = (name: string, value: string) => `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"${CRLF}${CRLF}${value}${CRLF}`;
const file = (name: string, bytes: string) => `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"; filename="a.wav"${CRLF}Content-Type: audio/wav${CRLF}${CRLF}${bytes}${CRLF}`;
const form = (parts: string[]) => parts.join('') + `--${BOUNDARY}--${CRLF}`;

t.test('a malformed multipart body is 400, a form over its limits 413 payload_too_large, on every multipart route', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const routes: Array<[string, (body: string, type: string) => Promise<Response>, string]> = [
    ['transcriptions', (body, type) => b.api('POST', '/v1/audio/transcriptions', body, { 'content-type': type }), 'model'],
    // Not `model`: a model sent before the images is resolved before they are read (an unknown one is 404 first).
    ['image edits', (body, type) => b.api('POST', '/v1/images/edits', body, { 'content-type': type }), 'prompt'],
    ['admin transcription test', (body, type) => b.admin('POST', '/api/v1/transcription-tests', body, { 'content-type': type }), 'profile_id'],
  ];
  for (const [name, send, textField] of routes) {
    // An image by its first bytes (WebP's are ASCII), so that the cut is met while it is streamed.
    const whole = form([field(textField, 'x'), name === 'image edits' ? file('image[]', 'RIFF....WEBP') : file('file', 'RIFF....WAVE')]);
    await expectClientError(t, await send(whole, 'multipart/form-data'), 400, 'invalid_value', null, `${name}: no boundary`);
    await expectClientError(t, await send(whole, 'multipart/form-data; boundary=""'), 400, 'invalid_value', null, `${name}: an empty boundary`);
    await expectClientError(t, await send(whole, `multipart/form-data; boundary=${'b'.repeat(300)}`), 400, 'invalid_value', null, `${name}: a boundary too long to search for`);
    await expectClientError(t, await send(whole.slice(0, whole.length - 30), `multipart/form-data; boundary=${BOUNDARY}`), 400, 'invalid_value', null, `${name}: a body cut inside the file`);
    await expectClientError(t, await send(field(textField, 'x').slice(0, 40), `multipart/form-data; boundary=${BOUNDARY}`), 400, 'invalid_value', null, `${name}: a body cut inside a part's headers`);
    await expectClientError(t, await send(whole, 'multipart/form-data; boundary=not-the-one'), 400, 'invalid_value', null, `${name}: the wrong boundary`);
    const many = form(Array.from({ length: 30 }, (_, i) => field(`f${i}`, 'x')));
    const over = await send(many, `multipart/form-data; boundary=${BOUNDARY}`);
    t.ok([400, 413].includes(over.status), `${name}: too many parts is a client error (${over.status})`);
    const body = (await over.json()) as ErrorBody;
    t.notMatch(body.error.code ?? '', /^FST_/, `${name}: no framework code (${body.error.code})`);
  }
  const big = form([field('model', 'x'), file('file', 'a'.repeat(9 * 1024 * 1024))]);
  await expectClientError(t, await b.api('POST', '/v1/audio/transcriptions', big, { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }), 413, 'payload_too_large', 'file', 'a recording over 8 MiB');
  const twoFiles = form([field('model', 'x'), file('file', 'RIFF'), file('file', 'RIFF')]);
  await expectClientError(t, await b.api('POST', '/v1/audio/transcriptions', twoFiles, { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` }), 413, 'payload_too_large', null, 'two recordings');
  noFailureLogged(t, b);
});

t.test("what Node's parser refuses before any route is in the OpenAI body too", async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  for (const [listener, url] of [['admin', b.adminUrl], ['inference', b.apiUrl()]] as const) {
    const cases: Array<[string, string, number, string]> = [
      ['headers over 16 KiB', `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'payload_too_large'],
      ['Content-Length and Transfer-Encoding together', 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400, 'chunked_upload'],
      ['a line that is not HTTP', 'HELLO there\r\n\r\n', 400, 'invalid_request'],
    ];
    for (const [what, raw, status, code] of cases) {
      const open = await openSocket(url);
      open.socket.write(raw);
      await Promise.race([open.closed, new Promise((resolve) => setTimeout(resolve, 3_000))]);
      open.socket.destroy();
      const reply = parseRaw(open.received());
      t.equal(reply.status, status, `${listener}, ${what}: ${status}`);
      t.match(reply.body, { error: { type: 'invalid_request_error', code, param: null, message: String } }, `${listener}, ${what}: the OpenAI error body`);
    }
  }
});
