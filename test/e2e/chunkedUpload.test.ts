// The openai client's most common upload, `fs.createReadStream(path)`, goes out
// chunked, and chunked bodies are refused (spec 4.2, 4.6; CONTRACT section 5: 400 chunked_upload).
// The client must get that answer as an APIError, not a broken pipe it retries: the service reads
// and drops the body (up to the route's limit) before it answers, says how to send the file, and
// sets `x-should-retry: false`. The client here may retry twice; the service's own request
// counters show that it did not. The client talks through a TCP port forward, as remote clients
// do (spec 5 rule 5: the operator's forward): a forward passes the service's close of a connection
// with unread data on as a reset, which the client sees before the answer it had not read yet (on
// plain loopback the answer usually wins that race, so that would prove little). Files of several
// MiB make sure that the client is still writing when the route has decided.
import { createReadStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { connect, createServer, type AddressInfo } from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN } from '../helpers/build.js';

const MiB = 1024 * 1024;

/** A TCP port forward to `target` (like ssh -L or a container's port proxy): each side's end or failure ends the other. */
async function portForward(t: Test, target: URL): Promise<string> {
  const forward = createServer((client) => {
    const upstream = connect(Number(target.port), target.hostname);
    client.pipe(upstream).pipe(client);
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => forward.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => forward.close(() => resolve())));
  return `http://127.0.0.1:${(forward.address() as AddressInfo).port}`;
}
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

interface Counters {
  counters: { by_route: Record<string, number> };
}

t.test('fs.createReadStream through the openai client: 400 chunked_upload as an APIError, one request, no retry', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const dir = await tempDir(t);
  // 3 MiB of WAV (within the 8 MiB limit) and a 6 MiB "PNG" (within 10 MiB): nothing but their length matters here.
  const wav = path.join(dir, 'speech.wav');
  await writeFile(wav, encodeWav(new Int16Array((3 * MiB) / 2), 16_000));
  const png = path.join(dir, 'picture.png');
  await writeFile(png, Buffer.concat([PNG_SIGNATURE, Buffer.alloc(6 * MiB, 7)]));
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${await portForward(t, new URL(b.apiUrl()))}/v1`, maxRetries: 2, timeout: 30_000 });

  const uploads: Array<[string, () => Promise<unknown>]> = [
    ['/v1/audio/transcriptions', () => client.audio.transcriptions.create({ model: 'listener', file: createReadStream(wav) })],
    ['/v1/images/edits', () => client.images.edit({ model: 'service-image', prompt: 'a lighthouse', image: createReadStream(png) })],
  ];
  for (const [route, upload] of uploads) {
    const error = await upload().then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(error instanceof OpenAI.APIError && !(error instanceof OpenAI.APIConnectionError), `${route}: an APIError with an answer, not a connection error (${String(error)})`);
    if (!(error instanceof OpenAI.APIError)) continue;
    t.equal(error.status, 400, `${route}: 400`);
    t.equal(error.code, 'chunked_upload', `${route}: code chunked_upload`);
    t.equal(error.type, 'invalid_request_error', `${route}: type`);
    t.match(error.message, /Content-Length/, `${route}: the message says what is missing`);
    t.match(error.message, /toFile\(.*readFile/, `${route}: and how the openai client sends the file with a length`);
    t.match(error.message, /createReadStream/, `${route}: and what not to do`);
    t.equal(error.headers?.get('x-should-retry'), 'false', `${route}: x-should-retry: false`);
  }
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Counters;
  t.equal(status.counters.by_route['/v1/audio/transcriptions'], 1, 'the transcription upload reached the service once: no retry');
  t.equal(status.counters.by_route['/v1/images/edits'], 1, 'the edit upload reached the service once: no retry');
});

t.test('a chunked body beyond the route limit is not read to its end: the answer comes, the connection goes', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const url = new URL('/v1/chat/completions', b.apiUrl());
  // The chat route reads at most 1 MiB of a chunked body; this client would send 64 MiB.
  // The client may see the answer, or a reset if it is still writing when the connection goes: either
  // way it cannot have sent the whole body, as it could if the service read on.
  const answer = await new Promise<{ status: number; connection: string | undefined; body: string; sent: number }>((resolve) => {
    let sent = 0;
    const req = request(
      { host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body, sent }));
      },
    );
    req.on('error', () => resolve({ status: 0, connection: undefined, body: '', sent }));
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const write = () => {
      while (sent < 64 * MiB) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', write);
      }
      req.end();
    };
    write();
  });
  t.ok(answer.sent < 64 * MiB, `the client could not send all 64 MiB (${answer.sent} bytes went out)`);
  if (answer.status !== 0) {
    t.equal(answer.status, 400, 'the refusal arrives');
    t.match(JSON.parse(answer.body), { error: { code: 'chunked_upload', type: 'invalid_request_error' } });
    t.notMatch(answer.body, /toFile/, 'a JSON body is not told about files');
    t.equal(answer.connection, 'close', 'the connection is closed: the rest is not read');
  }
  t.equal((await b.api('GET', '/v1/models')).status, 200, 'the listener answers on');
});

t.test('without the token, a chunked body is not read: 401 first', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const form = new FormData();
  form.append('model', 'listener');
  const response = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, {
    method: 'POST',
    body: new Blob(['x'.repeat(1024)]).stream(),
    headers: { 'content-type': 'multipart/form-data; boundary=x' },
    duplex: 'half',
  } as RequestInit);
  t.equal(response.status, 401, 'the token is checked before any body is read');
  t.equal(((await response.json()) as { error: { code: string } }).error.code, 'invalid_api_key');
});
