// Which connections a listener takes (both listeners). Node's own cap
// (`server.maxConnections`) closes a connection beyond it without a word, so a client sees a reset
// and has to guess; and connections that stall in the middle of their headers each hold a place
// until the headers limit, so a few hundred of them starved everyone else. Here:
//
// - **Waiting for headers is bounded on its own.** A connection that has not yet sent a whole
//   request head is *pending*; one that has made no progress (no new byte) for PENDING_GRACE_MS is
//   *stalled*. At most `maxPendingConnections` may be pending: past that, the oldest stalled ones
//   are closed, never the new one (a client that sends its request at once is never stalled).
// - **At the cap, a new connection takes the place of a stalled one.** Past `maxConnections`, the
//   oldest stalled pending connection is closed for the new one; only when none is stalled is the
//   new one refused, and then in HTTP: `503` with `Retry-After` and `Connection: close` (the OpenAI
//   error body, code `too_many_connections`), a moment to read it while what it sends is drained,
//   then the close. Node's HTTP parser never sees it.
// - **A connection that sends nothing goes early.** No byte within `firstByteTimeoutMs` (shorter
//   than the headers limit, which Node applies to a request that has begun) closes it.
//
// Accepted connections go to Node's HTTP connection handler as before: its parser, limits and
// error answers are untouched.
import type { Server } from 'node:http';
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
  /** Answered 503 past the cap. */
  refused: number;
  /** Stalled pending connections closed: past the pending budget, or for a new one at the cap. */
  evicted: number;
  /** Closed for sending nothing within the first-byte limit. */
  silent: number;
}

/** A pending connection without a new byte for this long is stalled: a client sends its request head at once. */
export const PENDING_GRACE_MS = 250;

interface Pending {
  /** When it came, its bytes read at the last look, and when they last grew (or it came). */
  at: number;
  bytes: number;
  progressAt: number;
}
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
function refuse(socket: Socket, answer: string): void {
  socket.on('error', () => socket.destroy());
  socket.on('data', () => {});
  socket.once('end', () => socket.destroy());
  socket.end(answer);
  socket.once('finish', () => setTimeout(() => socket.destroy(), LINGER_MS).unref());
}

export interface ConnectionGuard {
  counts(): ConnectionCounts;
  /** Closes every pending connection (the listener is closing: no request of theirs has begun). */
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
  const open = new Set<Socket>();
  /** Pending connections, oldest first. */
  const pending = new Map<Socket, Pending>();
  const counts = { refused: 0, evicted: 0, silent: 0 };

  /** Whether a pending connection has sent no new byte for the grace (its progress noted on the way). */
  const stalled = (socket: Socket, entry: Pending, at: number) => {
    if (socket.bytesRead !== entry.bytes) {
      entry.bytes = socket.bytesRead;
      entry.progressAt = at;
    }
    return at - entry.progressAt >= PENDING_GRACE_MS;
  };

  /** Closes the oldest stalled pending connections while more than `keep` are pending; how many it closed. */
  const evict = (keep: number) => {
    const at = now();
    let closed = 0;
    for (const [socket, entry] of pending) {
      if (pending.size <= keep) break;
      if (!stalled(socket, entry, at)) continue;
      pending.delete(socket);
      open.delete(socket);
      counts.evicted += 1;
      closed += 1;
      socket.destroy();
    }
    return closed;
  };

  server.on('connection', (socket: Socket) => {
    // At the cap the oldest stalled connection makes room; with none stalled the new one is refused.
    if (open.size >= limits.maxConnections && evict(pending.size - 1) === 0) {
      counts.refused += 1;
      refuse(socket, answer);
      return;
    }
    open.add(socket);
    const at = now();
    pending.set(socket, { at, bytes: 0, progressAt: at });
    socket.once('close', () => {
      open.delete(socket);
      pending.delete(socket);
    });
    if (pending.size > limits.maxPendingConnections) evict(limits.maxPendingConnections);
    for (const handler of handlers) handler.call(server, socket);
  });
  // A whole request head arrived: the connection is no longer pending (one Map lookup per request).
  server.on('request', (request: { socket: Socket }) => {
    pending.delete(request.socket);
  });

  // Notes each pending connection's progress, closes the silent ones, and brings the pending back within its budget.
  const sweep = setInterval(
    () => {
      const at = now();
      for (const [socket, entry] of pending) {
        stalled(socket, entry, at);
        if (entry.bytes > 0 || at - entry.at < limits.firstByteTimeoutMs) continue;
        pending.delete(socket);
        counts.silent += 1;
        socket.destroy();
      }
      if (pending.size > limits.maxPendingConnections) evict(limits.maxPendingConnections);
    },
    Math.max(50, Math.min(PENDING_GRACE_MS / 2, Math.floor(limits.firstByteTimeoutMs / 4))),
  );
  sweep.unref();
  server.once('close', () => clearInterval(sweep));
  return {
    counts: () => ({ open: open.size, pending: pending.size, ...counts }),
    closePending() {
      for (const socket of pending.keys()) socket.destroy();
      pending.clear();
    },
  };
}
