// Spec 4.2, 4.6 and CONTRACT section 5: chunked request bodies (Transfer-Encoding) are refused
// with 400 chunked_upload. The refusal waits until the client has sent its body, which is read
// and dropped up to the route's upload limit: a client that is still writing when the answer
// comes and the connection closes sees a broken pipe (EPIPE) instead of the answer, and the
// openai client retries a connection error. The message says how to send a file with a
// Content-Length, and `x-should-retry: false` tells the openai client not to try again.
import type { IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errors } from '../errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The most of a chunked body that is read (and dropped) before its refusal; default the route's bodyLimit. */
    uploadLimit?: number;
  }
}

/** Reads and drops the body until it ends, the client goes, or more than `limit` bytes came. */
function drain(raw: IncomingMessage, limit: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const done = () => {
      raw.off('data', onData).off('end', done).off('close', done).off('error', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > limit) {
        raw.pause();
        done();
      }
    };
    if (raw.complete || raw.destroyed) return resolve();
    raw.on('data', onData).once('end', done).once('close', done).once('error', done);
  });
}

/** The onRequest hook: a request with Transfer-Encoding gets its refusal once its body is in (or over the limit). */
export function refuseChunked(request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void): void {
  // The callback form: a request without a chunked body (nearly all) costs no promise.
  if (request.headers['transfer-encoding'] === undefined) {
    done();
    return;
  }
  // drain() never rejects: it resolves at the end, the limit, an error or the close.
  void drain(request.raw, request.routeOptions.config.uploadLimit ?? request.routeOptions.bodyLimit ?? 0).then(() => {
    // Over the limit, the rest is not read: the connection goes with the answer.
    reply.header('connection', 'close');
    done(errors.chunked((request.headers['content-type'] ?? '').toLowerCase().startsWith('multipart/')));
  });
}
