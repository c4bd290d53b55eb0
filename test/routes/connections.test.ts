// What a client may hold of a listener: a request has a time limit to arrive in
// whole (headers, then body), an answer sent before the body was read ends the connection, a
// connection beyond the cap is answered 503 and closed, half-open connections have a budget of
// their own (the oldest goes), and one that sends nothing goes early. Limits are shortened here through their
// environment variables; every check runs on raw loopback sockets and is bounded in time.
import t, { type Test } from 'tap';
import { build, TOKEN, type Built } from '../helpers/build.js';
import { openSocket, parseRaw, rawRequest, type OpenSocket } from '../helpers/raw.js';

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

t.test('past the cap a connection is answered 503 with Retry-After and Connection: close, then closed', async (t) => {
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
  const closedAt = await closedWithin(fifth, 3_000);
  t.ok(closedAt < 3_000, `the fifth is closed (after ${closedAt} ms)`);
  const reply = fifth.received();
  const { status, body } = parseRaw(reply);
  t.equal(status, 503, 'with an answer, not a reset');
  t.match(reply, /\r\nretry-after: 1\r\n/i);
  t.match(reply, /\r\nconnection: close\r\n/i);
  t.match(body, { error: { type: 'server_error', code: 'too_many_connections', param: null, message: /4 connections open/ } }, 'the OpenAI error body');

  held[0]?.socket.end();
  await held[0]?.closed;
  const next = await openSocket(b.apiUrl());
  next.socket.write(health);
  t.equal(await answered(next), 200, 'once one is gone, a new one is served');
  for (const open of [...held, next]) open.socket.destroy();
});

t.test('half-open connections have a budget of their own: past it the oldest goes, not the new one', async (t) => {
  const b = await build(t, {
    env: { SERVICE_DECK_HEADERS_TIMEOUT_MS: '20000', SERVICE_DECK_REQUEST_TIMEOUT_MS: '30000', SERVICE_DECK_MAX_PENDING_CONNECTIONS: '3', SERVICE_DECK_MAX_CONNECTIONS: '50' },
  });
  await b.startEndpoint();
  const halfOpen = async () => {
    const open = await openSocket(b.apiUrl());
    open.socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: ');
    return open;
  };
  const old = [await halfOpen(), await halfOpen(), await halfOpen()];
  await new Promise((r) => setTimeout(r, 400));
  const young = [await halfOpen(), await halfOpen()];
  const oldClosed = await Promise.all(old.slice(0, 2).map((o) => closedWithin(o, 2_000)));
  t.ok(oldClosed.every((at) => at < Infinity), 'the two oldest half-open connections were closed');
  t.equal(await closedWithin(old[2]!, 300), Infinity, 'the third oldest stays: three fit the budget');
  t.same(await Promise.all(young.map((o) => closedWithin(o, 300))), [Infinity, Infinity], 'the new ones stay');
  const reply = await rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(reply.status, 200, 'a client that sends its request at once is served beside them');
  for (const open of [...old, ...young]) open.socket.destroy();
});

t.test('at the cap a new connection takes the place of the oldest stalled one', async (t) => {
  const b = await setUp(t);
  const stalledOnes: OpenSocket[] = [];
  for (let i = 0; i < 4; i += 1) {
    const open = await openSocket(b.apiUrl());
    open.socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: ');
    stalledOnes.push(open);
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 400));
  const reply = await rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(reply.status, 200, 'the new client is served, not refused');
  t.ok((await closedWithin(stalledOnes[0]!, 1_000)) < Infinity, 'the oldest stalled connection made room');
  t.same(await Promise.all(stalledOnes.slice(1).map((o) => closedWithin(o, 200))), [Infinity, Infinity, Infinity], 'the others stay');
  for (const open of stalledOnes) open.socket.destroy();
});

t.test('a connection that sends nothing goes after the first-byte limit; one that has begun its request gets the headers limit', async (t) => {
  const b = await build(t, {
    env: { SERVICE_DECK_HEADERS_TIMEOUT_MS: String(4 * HEADERS_MS), SERVICE_DECK_REQUEST_TIMEOUT_MS: String(8 * HEADERS_MS), SERVICE_DECK_FIRST_BYTE_TIMEOUT_MS: '500' },
  });
  await b.startEndpoint();
  const silent = await openSocket(b.apiUrl());
  const begun = await openSocket(b.apiUrl());
  begun.socket.write('GET /health HTTP/1.1\r\n');
  const silentAt = await closedWithin(silent, 500 + SLACK_MS);
  t.ok(silentAt >= 400 && silentAt < 500 + SLACK_MS, `the silent one closed after ${silentAt} ms (limit 500 ms)`);
  t.equal(await closedWithin(begun, 1_000), Infinity, 'the one that began its request is still open');
  begun.socket.destroy();
  silent.socket.destroy();
});

t.test('260 connections stalled in their headers, reconnecting as they are closed, leave ordinary requests served', async (t) => {
  // The attack at the default limits: before, the 256-connection cap filled with stalled
  // connections and 98 % of ordinary requests failed.
  const b = await build(t);
  await b.startEndpoint();
  let stopping = false;
  let reconnects = 0;
  const attacker = async () => {
    while (!stopping) {
      const open = await openSocket(b.apiUrl()).catch(() => undefined);
      if (!open) continue;
      open.socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: a');
      await Promise.race([open.closed, new Promise((r) => setTimeout(r, 60_000).unref())]);
      open.socket.destroy();
      if (!stopping) reconnects += 1;
    }
  };
  const attackers = Array.from({ length: 260 }, () => attacker());
  await new Promise((r) => setTimeout(r, 1_000));
  const began = Date.now();
  const statuses: number[] = [];
  for (let batch = 0; batch < 10; batch += 1) {
    const replies = await Promise.all(
      Array.from({ length: 10 }, () => rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.status, () => 0)),
    );
    statuses.push(...replies);
  }
  stopping = true;
  const served = statuses.filter((s) => s === 200).length;
  t.ok(served >= 95, `${served} of 100 ordinary requests were served in ${Date.now() - began} ms while 260 stalled connections churned (${reconnects} reconnects)`);
  t.ok(reconnects > 0, 'the attack was on: stalled connections were closed and came back');
  void Promise.allSettled(attackers);
});
