// A request's own AbortSignal that fires only when the client goes away before its answer is
// complete. (Fastify's `request.signal` also fires once a request body has been read on Node 20,
// which is not a disconnect.)
import type { FastifyReply } from 'fastify';

export function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const response = reply.raw;
  const gone = () => controller.abort(new Error('the client went away'));
  // A connection that closed before this was called never fires 'close' again.
  if (response.destroyed || (response.socket?.destroyed ?? false)) gone();
  else {
    response.once('close', () => {
      if (!response.writableFinished) gone();
    });
  }
  return controller.signal;
}
