// Clients that half-close (both listeners). A client may end its side of the connection as soon as
// its request is sent (`shutdown(SHUT_WR)`: `nc -N`, a script that closes its input, some
// proxies) and still read the answer. Node's HTTP server took that end for a client that left: it
// ended the connection, and the answer was lost. Here the listener keeps the connection for the
// answer (`httpAllowHalfOpen`), and Node closes it once that answer is written (it is marked the
// connection's last).
//
// The same end is all a client that closed its socket entirely sends: the two are told apart only
// by writing to them. A closed socket answers a write with a reset, and the write after that fails,
// which closes the connection and fires the request's client-gone signal (src/routes/client.ts)
// as before. So while the answer has not begun, the listener writes an interim `100 Continue`
// (which every HTTP/1.1 client reads past) at once and then at growing intervals, up to
// PROBE_MAX_MS apart; once the answer has begun, its own writes do the same. An end that comes
// after the answer has begun is a client that left, and ends the connection at once, as Node did.
// HTTP/1.0 clients get no interim answers: theirs is the answer itself.
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyPluginAsync } from 'fastify';

/** The first interim answers follow each other this fast, then twice as slowly each time. */
export const PROBE_FIRST_MS = 100;
/** Never further apart than this: how late a client that left while its job waits is noticed, at worst. */
export const PROBE_MAX_MS = 5_000;

/** Writes interim answers to `response` until its answer begins or it closes. */
function probe(response: ServerResponse): void {
  let delay = PROBE_FIRST_MS;
  let timer: NodeJS.Timeout | undefined;
  const stop = () => clearTimeout(timer);
  const next = () => {
    if (response.headersSent || response.writableEnded || response.destroyed) return;
    response.writeContinue();
    timer = setTimeout(next, delay).unref();
    delay = Math.min(delay * 2, PROBE_MAX_MS);
  };
  response.once('close', stop);
  next();
}

/** What the end of a client's side means for the request on that connection. */
function clientEnded(socket: Socket, response: ServerResponse | undefined): void {
  // Between requests Node ends the connection itself; an unfinished request body is Node's parse error.
  if (response === undefined || response.writableEnded || !response.req.complete) return;
  if (response.headersSent) {
    socket.end();
    return;
  }
  // The answer says what happens after it: the connection closes.
  response.shouldKeepAlive = false;
  if (response.req.httpVersionMajor === 1 && response.req.httpVersionMinor === 0) return;
  probe(response);
}

/** Answers clients that half-close after their request; a plugin of each listener (src/app.ts). */
export const halfClose: FastifyPluginAsync = async (app) => {
  const server = app.server;
  // Node's own switch for this (http and https servers have had it since 0.x; its types lack it).
  (server as typeof server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  /** The request now answered on each connection. */
  const current = new WeakMap<Socket, ServerResponse>();
  const watched = new WeakSet<Socket>();
  server.on('request', (request: { socket: Socket }, response: ServerResponse) => {
    const { socket } = request;
    current.set(socket, response);
    if (watched.has(socket)) return;
    watched.add(socket);
    if (socket.readableEnded) clientEnded(socket, response);
    else socket.once('end', () => clientEnded(socket, current.get(socket)));
  });
};
