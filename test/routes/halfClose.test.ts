// A client may end its side of the connection once its request is sent (a half-close: `nc -N`, a
// script that closes its input) and still read the answer: both listeners answer it, and close the
// connection after the answer. A client that closes its socket entirely sends the same end, and is
// still noticed while its answer is pending: its job is given up.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { build, PASSWORD, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { openSocket } from '../helpers/raw.js';
import { until } from '../helpers/until.js';

/** The interim answers (1xx) and the final one in what a connection received. */
function answers(raw: string): { interim: string[]; status: number; headers: string; body: string } {
  const interim: string[] = [];
  let rest = raw;
  while (/^HTTP\/1\.1 1\d\d /.test(rest)) {
    const end = rest.indexOf('\r\n\r\n');
    interim.push(rest.slice(0, end));
    rest = rest.slice(end + 4);
  }
  const end = rest.indexOf('\r\n\r\n');
  return { interim, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(rest)?.[1] ?? 0), headers: rest.slice(0, end), body: rest.slice(end + 4) };
}

t.test('a client that half-closes after its body gets its answer, and then the connection closes', async (t) => {
  const b = await build(t, { login: false });
  const body = JSON.stringify({ password: PASSWORD });
  const open = await openSocket(b.adminUrl);
  // The login's password check takes a while (scrypt): the end of the client's side arrives first.
  open.socket.end(
    `POST /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Service-Deck: 1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  await open.closed;
  const { interim, status, headers, body: answer } = answers(open.received());
  t.equal(status, 200, 'the login is answered');
  t.match(JSON.parse(answer), { csrfToken: /.+/ }, 'with its CSRF token');
  t.match(headers, /\r\nconnection: close/i, 'and the connection is closed after it');
  t.ok(
    interim.every((line) => line === 'HTTP/1.1 100 Continue'),
    `before it, only interim 100 Continue answers, which every HTTP/1.1 client reads past (${interim.length})`,
  );
  const cookie = /\r\nset-cookie: (sd_session=[^;]+)/i.exec(headers)?.[1] ?? '';
  t.equal((await fetch(`${b.adminUrl}/api/v1/endpoint`, { headers: { 'x-service-deck': '1', cookie } })).status, 200, 'the session it opened works');
});

/** The service with a published chat profile `fake` on the stand-in llama-server in `mode`; the stand-in notes each request's end in `events`. */
async function fakeChat(t: Test, mode: string): Promise<Built & { events: string }> {
  const dir = await tempDir(t);
  const events = path.join(dir, 'events.log');
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await fakeLlamaServerIn(dir, mode, events), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model: await tinyModelIn(dir) } });
  await b.admin('POST', '/api/v1/endpoint/profile', { id: ((await created.json()) as { id: string }).id, enabled: true });
  return Object.assign(b, { events });
}

const chatRequest = (body: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

const noted = async (events: string) => (await readFile(events, 'utf8').catch(() => '')).split('\n').filter(Boolean);

t.test('the inference listener answers a half-closed chat client too', async (t) => {
  const b = await fakeChat(t, 'instant');
  const open = await openSocket(b.apiUrl());
  // The worker is started for this request: its answer comes well after the client's end.
  open.socket.end(chatRequest(JSON.stringify({ model: 'fake', messages: [{ role: 'user', content: 'x' }] })));
  await open.closed;
  const { status, body } = answers(open.received());
  t.equal(status, 200);
  t.match(JSON.parse(body), { object: 'chat.completion', choices: [{ message: { role: 'assistant' } }] }, 'the chat completion');
});

t.test('a client that closes its socket entirely while its answer is pending is noticed: the worker request is given up', async (t) => {
  // The worker answers nothing: only the listener's own writes can find the client gone.
  const b = await fakeChat(t, 'silent');
  const open = await openSocket(b.apiUrl());
  open.socket.write(chatRequest(JSON.stringify({ model: 'fake', messages: [{ role: 'user', content: 'x' }] })));
  await until('the worker to have the request', async () => ((await noted(b.events)).includes('open') ? true : undefined));
  open.socket.destroy();
  t.same(await until('the worker request to be closed', async () => ((await noted(b.events)).includes('closed') ? noted(b.events) : undefined), 15_000), ['open', 'closed']);
  const queue = async () => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: unknown[] } }).queue;
  await until('the reservation given back', async () => ((await queue()).running.length === 0 ? true : undefined), 15_000);
  t.pass('the reservation went back');
});
