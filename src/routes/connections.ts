// Which connections a listener takes (both listeners). Node's own cap
// (`server.maxConnections`) closes a connection beyond it without a word, so a client sees a reset
// and has to guess; and connections that trickle their request, or idle between requests, could
// each hold a place for as long as the listener's time limits allow, so that a few thousand of them,
// with no credential, starved everyone else. Here:
//
// - **A connection that is waiting is pending.** It waits for a request head (a new connection,
//   or a kept-alive one between requests), or for the body of a request that proved no credential
//   before it (a login). A request that proved one (the bearer token, an admin session) before its
//   body was read, or whose body came in whole, holds its connection until its answer is over,
//   bounded only by the listener's time limits. Pending connections are judged by how long they
//   have been waiting, not by their last byte: one that trickles a byte at a time is as slow as one
//   that stops.
// - **Below the cap nothing is closed for another.** A burst of any size up to the cap is served.
// - **At the cap a pending connection makes room.** Past `maxConnections`, a new connection takes
//   the place of the oldest pending one once that one has waited PENDING_GRACE_MS, or at once while
//   pending connections hold `maxPendingConnections` places or more (their share). Only when
//   neither holds (the cap is full of requests under way) is the new one refused, and then in HTTP:
//   `503` with `Retry-After` and `Connection: close` (the OpenAI error body, code
//   `too_many_connections`), a moment to read it while what it sends is drained, then the close.
//   Node's HTTP parser never sees it. At most MAX_LINGERING refusals linger at once: past that a
//   refused connection is closed at once, without the answer.
// - **Waiting is counted in the listener's own time.** Each sweep counts at most its own interval,
//   so a stretch in which the event loop was busy (and read nothing) is held against no one: a burst
//   the server has not yet read is never taken for slow.
// - **A connection that sends nothing goes early.** No byte within `firstByteTimeoutMs` (shorter
//   than the headers limit, which Node applies to a request that has begun) closes it.
//
// Accepted connections go to Node's HTTP connection handler as before: its parser, limits and
// error answers are untouched.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import { errors } from '../errors.js';

export interface ConnectionLimits {
  maxConnections: number;
  maxPendingConnections: number;
  firstByteTimeoutMs: number;
}

/** What the guard did, for the tests and the log. */
export interface ConnectionCounts {
  open: number;
  pending: number;
  /** Refused connections still reading their 503. */
  lingering: number;
  /** Answered 503 past the cap. */
  refused: number;
  /** Refused while MAX_LINGERING refusals lingered: closed at once, without the 503. */
  dropped: number;
  /** Pending connections closed for a new one at the cap. */
  evicted: number;
  /** Closed for sending nothing within the first-byte limit. */
  silent: number;
}

/** How long a pending connection keeps its place at the cap while pending connections are within their share: a request head sent in a few pieces takes well under it. */
export const PENDING_GRACE_MS = 1_000;
/** Refused connections that may read their 503 at once; further refusals are closed at once. */
export const MAX_LINGERING = 64;

/** An open connection. */
interface Connection {
  /** The listener's time at which it began waiting for its current request. */
  since: number;
  /** Its requests under way: head in, answer not yet over. */
  requests: number;
  /** Its request whose body it waits for (no credential proved before the body). */
  body?: IncomingMessage | undefined;
}

/** Whether a request has a body to wait for. */
const hasBody = (request: IncomingMessage) =>
  request.headers['transfer-encoding'] !== undefined || (request.headers['content-length'] !== undefined && request.headers['content-length'] !== '0');

/** How long a refused connection may read its 503 before it is closed. */
const LINGER_MS = 1_000;
const RETRY_AFTER_SECONDS = 1;

function refusal(maxConnections: number): string {
  const error = errors.unavailable('too_many_connections', `This listener has ${maxConnections} connections open, its limit: retry in a moment.`);
  const body = JSON.stringify(error.body());
  return (
    `HTTP/1.1 503 ${STATUS_CODES[503]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
    `retry-after: ${RETRY_AFTER_SECONDS}\r\nconnection: close\r\n\r\n${body}`
  );
}

/** Answers 503 and closes, draining what the client sends meanwhile (closing on unread bytes would reset the connection and could drop the answer). */
function answerAndClose(socket: Socket, answer: string): void {
  socket.on('error', () => socket.destroy());
  socket.on('data', () => {});
  socket.once('end', () => socket.destroy());
  socket.end(answer);
  socket.once('finish', () => setTimeout(() => socket.destroy(), LINGER_MS).unref());
}

export interface ConnectionGuard {
  counts(): ConnectionCounts;
  /** The request on `socket` proved its credential before its body: it holds its connection until its answer is over. */
  trust(socket: Socket): void;
  /** Closes every connection waiting for a request head (the listener is closing: no request of theirs has begun). */
  closePending(): void;
}

/**
 * Puts the guard in front of `server`'s connection handling. Call it once, after the HTTP server is
 * made and before it listens.
 */
export function guardConnections(server: Server, limits: ConnectionLimits, now: () => number = performance.now.bind(performance)): ConnectionGuard {
  // Node's HTTP handling of a new connection: only accepted connections reach it.
  const handlers = server.listeners('connection') as Array<(socket: Socket) => void>;
  server.removeAllListeners('connection');
  server.maxConnections = Infinity;
  const answer = refusal(limits.maxConnections);
  const open = new Map<Socket, Connection>();
  /** Pending connections, the longest waiting first. */
  const pending = new Set<Socket>();
  const counts = { refused: 0, dropped: 0, evicted: 0, silent: 0 };
  let lingering = 0;
  const sweepMs = Math.max(50, Math.min(125, Math.floor(limits.firstByteTimeoutMs / 4)));
  /** The listener's time: it advances by at most one sweep interval per sweep. */
  let time = 0;
  let sweptAt = now();

  /** Waits for its next request, behind every connection that waited longer. */
  const wait = (socket: Socket, connection: Connection) => {
    connection.since = time;
    connection.body = undefined;
    pending.delete(socket);
    pending.add(socket);
  };
  const settle = (socket: Socket) => {
    pending.delete(socket);
    const connection = open.get(socket);
    if (connection) connection.body = undefined;
  };
  /** The connection of a pending socket, or undefined when it no longer waits (its body came in whole). */
  const waiting = (socket: Socket) => {
    const connection = open.get(socket);
    if (connection && !connection.body?.complete) return connection;
    settle(socket);
    return undefined;
  };
  const close = (socket: Socket) => {
    pending.delete(socket);
    open.delete(socket);
    socket.destroy();
  };

  /** At the cap: closes the oldest pending connection if it may make room; whether it did. */
  const makeRoom = () => {
    for (const socket of pending) {
      const connection = waiting(socket);
      if (!connection) continue;
      if (time - connection.since < PENDING_GRACE_MS && pending.size < limits.maxPendingConnections) return false;
      close(socket);
      counts.evicted += 1;
      return true;
    }
    return false;
  };

  /** Answers 503 and closes, or closes at once while MAX_LINGERING refusals linger. */
  const refuse = (socket: Socket) => {
    if (lingering >= MAX_LINGERING) {
      counts.dropped += 1;
      socket.destroy();
      return;
    }
    counts.refused += 1;
    lingering += 1;
    socket.once('close', () => (lingering -= 1));
    answerAndClose(socket, answer);
  };

  server.on('connection', (socket: Socket) => {
    if (open.size >= limits.maxConnections && !makeRoom()) {
      refuse(socket);
      return;
    }
    const connection: Connection = { since: time, requests: 0 };
    open.set(socket, connection);
    pending.add(socket);
    socket.once('close', () => {
      open.delete(socket);
      pending.delete(socket);
    });
    for (const handler of handlers) handler.call(server, socket);
  });
  // A request head arrived (before Fastify sees it, which may trust it at once): the connection
  // waits on only for a body, and for its next request once the answer is over.
  server.prependListener('request', (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket;
    const connection = open.get(socket);
    if (!connection) return;
    connection.requests += 1;
    if (hasBody(request) && pending.has(socket)) connection.body = request;
    else settle(socket);
    response.once('close', () => {
      connection.requests -= 1;
      if (connection.requests === 0 && open.has(socket)) wait(socket, connection);
    });
  });

  // Moves the listener's time on, and closes the connections that sent nothing in time.
  const sweep = setInterval(() => {
    const at = now();
    time += Math.min(at - sweptAt, sweepMs);
    sweptAt = at;
    for (const socket of pending) {
      const connection = waiting(socket);
      if (!connection || socket.bytesRead > 0 || time - connection.since < limits.firstByteTimeoutMs) continue;
      close(socket);
      counts.silent += 1;
    }
  }, sweepMs);
  sweep.unref();
  server.once('close', () => clearInterval(sweep));
  return {
    counts: () => {
      for (const socket of pending) waiting(socket);
      return { open: open.size, pending: pending.size, lingering, ...counts };
    },
    trust: settle,
    closePending() {
      for (const socket of pending) if (open.get(socket)?.requests === 0) close(socket);
    },
  };
}
