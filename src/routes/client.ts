// A request's own AbortSignal that fires only when the client goes away before its answer is
// complete. (Fastify's `request.signal` also fires once a request body has been read on Node 20,
// which is not a disconnect.) A client that leaves is no failure of the service: `clientLeft`
// tells the error handler, which logs it at info, without a stack.
import type { FastifyReply } from 'fastify';
import { AskTimeout } from '../system/ask.js';
import { ReservationAbandoned } from '../system/scheduler.js';

/** The abort reason of a request whose client went away before its answer was complete. */
export class ClientGone extends Error {
  override name = 'ClientGone';
}

export function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const response = reply.raw;
  const gone = () => controller.abort(new ClientGone('the client went away'));
  // A connection that closed before this was called never fires 'close' again.
  if (response.destroyed || (response.socket?.destroyed ?? false)) gone();
  else {
    response.once('close', () => {
      if (!response.writableFinished) gone();
    });
  }
  return controller.signal;
}

/**
 * Whether a route's failure is only its client leaving: the abort reason itself (thrown on by the
 * work it ended), its job leaving the queue, or a reply it no longer waits for.
 */
export function clientLeft(error: unknown): boolean {
  return error instanceof ClientGone || error instanceof ReservationAbandoned || error instanceof AskTimeout;
}
