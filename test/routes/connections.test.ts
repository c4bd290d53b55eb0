// What a client may hold of a listener: a request has a time limit to arrive in
// whole (headers, then body), an answer sent before the body was read ends the connection, and a
// connection beyond the cap is closed as it arrives. Limits are shortened here through their
// environment variables; every check runs on raw loopback sockets and is bounded in time.
import t, { type Test } from 'tap';
import { build, TOKEN, type Built } from '../helpers/build.js';
import { openSocket, parseRaw, type OpenSocket } from '../helpers/raw.js';

const REQUEST_MS = 2_000;
const HEADERS_MS = 1_000;
/** Node looks for late requests once a second; the rest is slack for a busy machine. */
const SLACK_MS = 2_500;

async function setUp(t: Test): Promise<Built> {
  const b = await build(t, {
    env: { SERVICE_DECK_REQUEST_TIMEOUT_MS: String(REQUEST_MS), SERVICE_DECK_HEADERS_TIMEOUT_MS: String(HEADERS_MS), SERVICE_DECK_MAX_CONNECTIONS: '4' },
  });
  await b.startEndpoint();
  return b;
}

/** Resolves with the close time, or with `Infinity` when the connection is still open after `ms`. */
const closedWithin = (open: OpenSocket, ms: number) => Promise.race([open.closed, new Promise<number>((resolve) => setTimeout(() => resolve(Infinity), ms))]);

/** Sends one byte every 100 ms until the connection closes. */
function trickle(open: OpenSocket): void {
  const timer = setInterval(() => {
    if (open.socket.destroyed || !open.socket.writable) clearInterval(timer);
    else open.socket.write('a');
  }, 100);
  void open.closed.then(() => clearInterval(timer));
}

const head = (method: string, path: string, headers: string[]) => `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers.join('\r\n')}\r\n\r\n`;

t.test('a body trickled slower than the request limit is cut, with the OpenAI 408', async (t) => {
  const b = await setUp(t);
  for (const [name, url, path, headers] of [
    ['admin', b.adminUrl, '/api/v1/session', ['X-Service-Deck: 1']],
    ['inference', b.apiUrl(), '/v1/chat/completions', [`Authorization: Bearer ${TOKEN}`]],
  ] as const) {
    const open = await openSocket(url);
    open.socket.write(head('POST', path, [...headers, 'Content-Type: application/json', 'Content-Length: 100000']) + '{"password":"');
    trickle(open);
    const closedAt = await closedWithin(open, REQUEST_MS + SLACK_MS);
    open.socket.destroy();
    t.ok(closedAt >= REQUEST_MS - 100 && closedAt < REQUEST_MS + SLACK_MS, `${name}: closed after ${closedAt} ms (limit ${REQUEST_MS} ms)`);
    const { status, body } = parseRaw(open.received());
    t.equal(status, 408, `${name}: 408`);
    t.match(body, { error: { type: 'invalid_request_error', code: 'request_timeout', param: null, message: /2 s/ } }, `${name}: the OpenAI error body`);
  }
});

t.test('a connection that sends no request is closed after the headers limit', async (t) => {
  const b = await setUp(t);
  const open = await openSocket(b.adminUrl);
  open.socket.write('GET /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\n');
  const closedAt = await closedWithin(open, HEADERS_MS + SLACK_MS);
  open.socket.destroy();
  t.ok(closedAt < HEADERS_MS + SLACK_MS, `closed after ${closedAt} ms (limit ${HEADERS_MS} ms)`);
  t.equal(parseRaw(open.received()).status, 408);
});

t.test('a refusal sent before the body was read ends the connection at once', async (t) => {
  const b = await setUp(t);
  const open = await openSocket(b.apiUrl());
  open.socket.write(head('POST', '/v1/chat/completions', ['Authorization: Bearer wrong', 'Content-Type: application/json', 'Content-Length: 100000']) + '{"model":');
  trickle(open);
  // Well inside the request limit: the 401 itself ends the connection, not the timeout.
  const closedAt = await closedWithin(open, REQUEST_MS - 500);
  open.socket.destroy();
  t.ok(closedAt < REQUEST_MS - 500, `closed ${closedAt} ms after the 401 (the request limit is ${REQUEST_MS} ms)`);
  const reply = open.received();
  t.equal(parseRaw(reply).status, 401);
  t.match(reply, /\r\nconnection: close\r\n/i, 'the answer says so');
});

t.test('connections beyond the cap are closed as they arrive', async (t) => {
  const b = await setUp(t);
  const health = head('GET', '/health', [`Authorization: Bearer ${TOKEN}`]);
  const held: OpenSocket[] = [];
  for (let i = 0; i < 4; i += 1) {
    const open = await openSocket(b.apiUrl());
    open.socket.write(health);
    held.push(open);
  }
  const answered = async (open: OpenSocket) => {
    for (let waited = 0; waited < 2_000 && !open.received().includes('"status":"ok"'); waited += 20) await new Promise((r) => setTimeout(r, 20));
    return parseRaw(open.received()).status;
  };
  t.same(await Promise.all(held.map(answered)), [200, 200, 200, 200], 'four kept-alive connections are served');

  const fifth = await openSocket(b.apiUrl());
  fifth.socket.write(health);
  const closedAt = await closedWithin(fifth, 2_000);
  t.ok(closedAt < 2_000, `the fifth is closed (after ${closedAt} ms)`);
  t.equal(fifth.received(), '', 'and gets no answer');

  held[0]?.socket.end();
  await held[0]?.closed;
  const next = await openSocket(b.apiUrl());
  next.socket.write(health);
  t.equal(await answered(next), 200, 'once one is gone, a new one is served');
  for (const open of [...held, next]) open.socket.destroy();
});
