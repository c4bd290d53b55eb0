// The access line of a request (method, route, status, duration, request id; never its URL,
// headers or body), written once: by the listener's onResponse hook, or by a stream route whose
// client went away (Fastify runs onResponse only for an answer that was sent whole).
import type { FastifyReply, FastifyRequest } from 'fastify';

/** What a listener records of each answered request (the status counters, the metrics). */
export type AccessRecorder = (route: string, status: number, request: FastifyRequest, reply: FastifyReply) => void;

const logged = new WeakSet<FastifyRequest>();

export function logAccess(request: FastifyRequest, reply: FastifyReply, onAccess?: AccessRecorder): void {
  if (logged.has(request)) return;
  logged.add(request);
  const route = request.routeOptions.url ?? '(unmatched)';
  request.log.info({ method: request.method, route, status: reply.statusCode, duration_ms: Math.round(reply.elapsedTime * 10) / 10 }, 'access');
  onAccess?.(route, reply.statusCode, request, reply);
}
