// What a client may hold of a listener: a request has a time limit to arrive in
// whole (headers, then body), an answer sent before the body was read ends the connection, a
// connection beyond the cap is answered 503 and closed, half-open connections have a budget of
// their own (the oldest goes), and one that sends nothing goes early. Limits are shortened here through their
// environment variables; every check runs on raw loopback sockets and is bounded in time.
import { createServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { guardConnections, MAX_LINGERING, PENDING_GRACE_MS, type ConnectionGuard, type ConnectionLimits } from '../../src/routes/connections.js';
import { build, PASSWORD, TOKEN, type Built } from '../helpers/build.js';
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

/** A request under way that holds its place: the token, then a body trickled (the request limit ends it). */
async function heldRequest(url: string): Promise<OpenSocket> {
  const open = await openSocket(url);
  open.socket.write(head('POST', '/v1/chat/completions', [`Authorization: Bearer ${TOKEN}`, 'Content-Type: application/json', 'Content-Length: 100000']) + '{"model":');
  trickle(open);
  return open;
}

const health = head('GET', '/health', [`Authorization: Bearer ${TOKEN}`]);

/** Waits until `open` has an answer (at most 3 s) and gives its status (0: none). */
async function answered(open: OpenSocket): Promise<number> {
  for (let waited = 0; waited < 3_000 && !/\r\n\r\n/.test(open.received()); waited += 20) await new Promise((r) => setTimeout(r, 20));
  return parseRaw(open.received()).status;
}

t.test('past the cap a connection is answered 503 with Retry-After and Connection: close, then closed', async (t) => {
  const b = await setUp(t);
  // Four requests under way hold every place: none of them waits for anything.
  const held = await Promise.all(Array.from({ length: 4 }, () => heldRequest(b.apiUrl())));
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

  held[0]?.socket.destroy();
  await held[0]?.closed;
  const next = await openSocket(b.apiUrl());
  next.socket.write(health);
  t.equal(await answered(next), 200, 'once one is gone, a new one is served');
  for (const open of [...held, next]) open.socket.destroy();
});

t.test('at the cap, a kept-alive connection between requests and a login still sending its body make room', async (t) => {
  const b = await setUp(t);
  // Four kept-alive connections, answered and now idle: they wait for a next request.
  const idle: OpenSocket[] = [];
  for (let i = 0; i < 4; i += 1) {
    const open = await openSocket(b.apiUrl());
    open.socket.write(health);
    t.equal(await answered(open), 200, `kept-alive connection ${i + 1} is served`);
    idle.push(open);
  }
  const fifth = await openSocket(b.apiUrl());
  fifth.socket.write(health);
  t.equal(await answered(fifth), 200, 'a new connection is served, not refused');
  t.ok((await closedWithin(idle[0]!, 1_000)) < Infinity, 'the one idle the longest made room');
  t.same(await Promise.all(idle.slice(1).map((o) => closedWithin(o, 200))), [Infinity, Infinity, Infinity], 'the others stay');

  // The admin listener: logins that trickle their body hold every place, and the operator logs in.
  const logins: OpenSocket[] = [];
  for (let i = 0; i < 4; i += 1) {
    const open = await openSocket(b.adminUrl);
    open.socket.write(head('POST', '/api/v1/session', ['X-Service-Deck: 1', 'Content-Type: application/json', 'Content-Length: 100']) + '{"password":"');
    trickle(open);
    logins.push(open);
  }
  const login = await rawRequest(`${b.adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1' }, body: JSON.stringify({ password: PASSWORD }) });
  t.equal(login.status, 200, 'the operator logs in');
  t.ok((await closedWithin(logins[0]!, 1_000)) < Infinity, 'the oldest trickled login made room');
  for (const open of [...idle, fifth, ...logins]) open.socket.destroy();
});

t.test('below the cap nothing is closed for another: half-open connections beyond the pending share all stay', async (t) => {
  const b = await build(t, {
    env: { SERVICE_DECK_HEADERS_TIMEOUT_MS: '20000', SERVICE_DECK_REQUEST_TIMEOUT_MS: '30000', SERVICE_DECK_MAX_PENDING_CONNECTIONS: '3', SERVICE_DECK_MAX_CONNECTIONS: '50' },
  });
  await b.startEndpoint();
  const halfOpen = await Promise.all(
    Array.from({ length: 6 }, async () => {
      const open = await openSocket(b.apiUrl());
      open.socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: ');
      return open;
    }),
  );
  // Longer than any stall the guard used to close them for; the request limit is far off.
  t.same(await Promise.all(halfOpen.map((o) => closedWithin(o, 1_500))), halfOpen.map(() => Infinity), 'all six stay');
  const reply = await rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(reply.status, 200, 'a client that sends its request at once is served beside them');
  for (const open of halfOpen) open.socket.destroy();
});

t.test('at the cap a new connection takes the place of the oldest waiting one while waiting ones hold their share', async (t) => {
  const b = await setUp(t);
  const stalledOnes: OpenSocket[] = [];
  for (let i = 0; i < 4; i += 1) {
    const open = await openSocket(b.apiUrl());
    open.socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Stall: ');
    stalledOnes.push(open);
  }
  // Four waiting ones, two over their share (half the cap): the oldest goes at once, young as it is.
  const reply = await rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(reply.status, 200, 'the new client is served, not refused');
  t.ok((await closedWithin(stalledOnes[0]!, 1_000)) < Infinity, 'the oldest waiting connection made room');
  t.same(await Promise.all(stalledOnes.slice(1).map((o) => closedWithin(o, 200))), [Infinity, Infinity, Infinity], 'the others stay');
  for (const open of stalledOnes) open.socket.destroy();
});

t.test('a head sent in three pieces 300 ms apart is answered at the cap while new connections knock; waiting for its next request, it makes room after the grace', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_REQUEST_TIMEOUT_MS: '20000', SERVICE_DECK_HEADERS_TIMEOUT_MS: '10000', SERVICE_DECK_MAX_CONNECTIONS: '4' } });
  await b.startEndpoint();
  // Three requests under way and one slow head: nothing else waits.
  const held = await Promise.all(Array.from({ length: 3 }, () => heldRequest(b.apiUrl())));
  const slow = await openSocket(b.apiUrl());
  /** A new connection's answer: the place of the slow one, or 503. */
  const knock = async () => {
    const open = await openSocket(b.apiUrl());
    open.socket.write(head('GET', '/health', [`Authorization: Bearer ${TOKEN}`, 'Connection: close']));
    await open.closed;
    return parseRaw(open.received()).status;
  };
  const knocks: number[] = [];
  let knocking = true;
  const knocker = (async () => {
    while (knocking) {
      const status = await knock();
      if (knocking) knocks.push(status);
    }
  })();
  for (const piece of ['GET /health HTTP/1.1\r\n', 'Host: 127.0.0.1\r\n', `Authorization: Bearer ${TOKEN}\r\n\r\n`]) {
    slow.socket.write(piece);
    if (!piece.endsWith('\r\n\r\n')) await new Promise((r) => setTimeout(r, 300));
  }
  // Kept alive, it waits again, young: the knocks stay refused until they are stopped.
  t.equal(await answered(slow), 200, 'the slow head is answered');
  knocking = false;
  await knocker;
  t.ok(knocks.length > 0 && knocks.every((status) => status === 503), `the ${knocks.length} new connections meanwhile were refused, not given its place (${[...new Set(knocks)].join(', ')})`);

  // Waiting for its next request, it keeps its place for the grace, then makes room.
  t.equal(await knock(), 503, 'at first a new connection is refused');
  let served = 0;
  for (let tries = 0; tries < 50 && served !== 200; tries += 1) {
    served = await knock();
    if (served !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(served, 200, 'later one takes its place');
  t.ok((await closedWithin(slow, 1_000)) < Infinity, 'the kept-alive connection was closed for it');
  for (const open of [...held, slow]) open.socket.destroy();
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

t.test('connections past the cap that trickle heads, idle between requests or trickle logins leave ordinary requests and operator logins served', async (t) => {
  // The trickle attack scaled down (bench/flood.ts runs it at 2000 connections): 26 connections
  // per listener against a cap of 24, none of them ever quiet for 250 ms, none with a credential:
  // request heads on the inference listener; heads, complete requests to a route that needs no
  // session on kept-alive connections, and logins with trickled bodies on the admin listener.
  // Before, they held every place: ordinary requests and logins were refused.
  const b = await build(t, { env: { SERVICE_DECK_MAX_CONNECTIONS: '24' } });
  await b.startEndpoint();
  let stopping = false;
  let reconnects = 0;
  const kinds = {
    head: (open: OpenSocket, path: string) => {
      open.socket.write(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: `);
      trickle(open);
    },
    idle: (open: OpenSocket) => {
      const request = head('GET', '/api/v1/session', ['X-Service-Deck: 1']);
      open.socket.write(request);
      const timer = setInterval(() => (open.socket.writable ? open.socket.write(request) : clearInterval(timer)), 400);
      void open.closed.then(() => clearInterval(timer));
    },
    body: (open: OpenSocket) => {
      open.socket.write(head('POST', '/api/v1/session', ['X-Service-Deck: 1', 'Content-Type: application/json', 'Content-Length: 150']) + '{"password":"');
      trickle(open);
    },
  };
  const attacker = async (url: string, start: (open: OpenSocket) => void) => {
    while (!stopping) {
      const open = await openSocket(url).catch(() => undefined);
      if (!open) continue;
      start(open);
      await open.closed;
      if (!stopping) reconnects += 1;
    }
  };
  const attackers = [
    ...Array.from({ length: 26 }, () => attacker(b.apiUrl(), (o) => kinds.head(o, '/v1/chat/completions'))),
    ...Array.from({ length: 9 }, () => attacker(b.adminUrl, (o) => kinds.head(o, '/api/v1/session'))),
    ...Array.from({ length: 8 }, () => attacker(b.adminUrl, kinds.idle)),
    ...Array.from({ length: 9 }, () => attacker(b.adminUrl, kinds.body)),
  ];
  await new Promise((r) => setTimeout(r, 1_000));
  // Ordinary requests, five at a time, and the operator's logins, one at a time, side by side.
  const statuses: number[] = [];
  const logins: number[] = [];
  await Promise.all([
    (async () => {
      for (let batch = 0; batch < 8; batch += 1) {
        statuses.push(...(await Promise.all(Array.from({ length: 5 }, () => rawRequest(`${b.apiUrl()}/health`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.status, () => 0)))));
      }
    })(),
    (async () => {
      for (let i = 0; i < 4; i += 1) {
        logins.push(await rawRequest(`${b.adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1' }, body: JSON.stringify({ password: PASSWORD }) }).then((r) => r.status, () => 0));
      }
    })(),
  ]);
  stopping = true;
  const served = statuses.filter((s) => s === 200).length;
  const loggedIn = logins.filter((s) => s === 200).length;
  t.ok(served >= 38, `${served} of 40 ordinary requests were answered normally (${statuses.join(' ')})`);
  t.ok(loggedIn >= 4, `${loggedIn} of 4 logins were answered normally (${logins.join(' ')})`);
  t.ok(reconnects > 0, `the attack was on: its connections were closed and came back (${reconnects} times)`);
  void Promise.allSettled(attackers);
});

/** A bare HTTP server behind the guard: `/hold` is answered only when the test ends, anything else at once. */
async function bareServer(t: Test, limits: ConnectionLimits): Promise<{ url: string; guard: ConnectionGuard }> {
  const held: ServerResponse[] = [];
  const server = createServer((request, response) => {
    if (request.url === '/hold') held.push(response);
    else response.end('ok');
  });
  const guard = guardConnections(server, limits);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const response of held) response.end();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const address = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${address.port}`, guard };
}

/** Waits until `ready()` holds, at most `ms`; whether it did. */
async function until(ready: () => boolean, ms = 3_000): Promise<boolean> {
  for (let waited = 0; waited < ms && !ready(); waited += 10) await new Promise((r) => setTimeout(r, 10));
  return ready();
}

t.test('a burst the server has not yet read is not taken for slow, however long the event loop was busy', async (t) => {
  const { url, guard } = await bareServer(t, { maxConnections: 10, maxPendingConnections: 5, firstByteTimeoutMs: 5_000 });
  const held = await Promise.all(Array.from({ length: 6 }, async () => {
    const open = await openSocket(url);
    open.socket.write('GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    return open;
  }));
  t.ok(await until(() => guard.counts().open === 6 && guard.counts().pending === 0), 'six requests under way');
  const burst = await Promise.all(Array.from({ length: 4 }, () => openSocket(url)));
  t.ok(await until(() => guard.counts().pending === 4), 'four more connections, the cap reached');
  // One more knocks (Node connects on the next tick); right after, the four send their requests,
  // and the event loop is busy for longer than the grace before it reads any of it. Then the
  // guard's timer runs, and the listener takes the new connection while their requests wait unread.
  await new Promise((resolve) => setImmediate(resolve));
  const knock = connect({ host: '127.0.0.1', port: Number(new URL(url).port) });
  let knockReply = '';
  knock.setEncoding('utf8');
  knock.on('data', (chunk: string) => (knockReply += chunk));
  knock.on('error', () => undefined);
  process.nextTick(() => {
    for (const open of burst) open.socket.write('GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
    const busyUntil = Date.now() + PENDING_GRACE_MS + 500;
    while (Date.now() < busyUntil);
  });
  t.same(await Promise.all(burst.map(answered)), [200, 200, 200, 200], 'the whole burst is served');
  t.equal(guard.counts().evicted, 0, 'none of it was closed for the new one');
  t.ok(await until(() => knockReply.startsWith('HTTP/1.1 503')), 'the new one was refused with 503 instead');
  knock.destroy();
  for (const open of [...held, ...burst]) open.socket.destroy();
});

t.test(`at most ${MAX_LINGERING} refusals linger for their 503; further refused connections are closed at once`, async (t) => {
  const { url, guard } = await bareServer(t, { maxConnections: 1, maxPendingConnections: 1, firstByteTimeoutMs: 5_000 });
  const held = await openSocket(url);
  held.socket.write('GET /hold HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  t.ok(await until(() => guard.counts().pending === 0), 'one request under way holds the only place');
  // Clients that never close their side: each refusal would linger its full second.
  const port = Number(new URL(url).port);
  const refused = await Promise.all(
    Array.from({ length: MAX_LINGERING + 8 }, async () => {
      const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
      let reply = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => (reply += chunk));
      socket.on('error', () => undefined);
      await new Promise((resolve) => socket.once('connect', resolve));
      return { socket, reply: () => reply };
    }),
  );
  t.ok(await until(() => guard.counts().refused + guard.counts().dropped === refused.length), 'every one was refused');
  const counts = guard.counts();
  t.equal(counts.lingering, MAX_LINGERING, `${counts.lingering} linger at once`);
  t.equal(counts.dropped, refused.length - MAX_LINGERING, `${counts.dropped} were closed at once`);
  // The lingering ones are closed after their second; the client's side stays open (it never closes it).
  t.ok(await until(() => guard.counts().lingering === 0), 'none lingers after its second');
  const answers = refused.map((o) => parseRaw(o.reply()).status);
  t.equal(answers.filter((status) => status === 503).length, MAX_LINGERING, 'each lingering one had its 503');
  t.equal(answers.filter((status) => status === 0).length, counts.dropped, 'the ones closed at once got no answer');
  for (const o of refused) o.socket.destroy();
  held.socket.destroy();
});
