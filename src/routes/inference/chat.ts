// Spec 4.2: POST /v1/chat/completions, JSON or SSE. The route validates the strict request,
// resolves the published profile (its snapshot is kept for the whole request), fills the
// profile's sampling defaults, and hands the request to the scheduler and the chat worker
// (src/workers/chatRequest.ts). A buffered answer is relayed as the worker wrote it; a stream is
// relayed chunk by chunk, never buffered. A client that goes away cancels its queued job, or
// closes the worker connection so llama-server frees the slot.
import { PassThrough } from 'node:stream';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../system/service.js';
import type { ChatProfile } from '../../workers/chat.js';
import { CHAT_LIMITS, completeAnswer, openChat, readBody, workerError, workerStatusError, type ChatLimits, type OpenedChat } from '../../workers/chatRequest.js';
import { errors, type ApiError } from '../errors.js';
import { chatRequestSchema, effectiveEffort, upstreamBody, type ChatRequest } from './chat.schema.js';

/** Spec 4.2: the three headers of an answer whose request set a reasoning effort. */
export function reasoningHeaders(requested: ChatRequest['reasoning_effort']): Record<string, string> {
  const effective = effectiveEffort(requested);
  if (effective === null || requested === undefined || requested === null) return {};
  return {
    'x-service-reasoning-requested': requested,
    'x-service-reasoning-effective': effective,
    'x-service-reasoning-semantics': 'model-template-hint',
  };
}

/** Aborted when the client closes its connection before the answer is complete. */
export function clientGone(request: FastifyRequest, reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const onClose = () => {
    if (!reply.raw.writableFinished) controller.abort(new Error('the client went away'));
  };
  reply.raw.once('close', onClose);
  request.raw.once('close', () => {
    if (request.raw.destroyed && !reply.raw.headersSent) onClose();
  });
  return controller.signal;
}

/** An SSE event carrying an error, the contract's ending of a stream that already started. */
export const sseError = (error: ApiError): string => `data: ${JSON.stringify(error.body())}\n\n`;

/**
 * Relays a worker's SSE stream to `out` chunk by chunk. Ends after the worker's last byte, or with
 * an error event when the worker fails, goes quiet (120 s) or runs past the SSE limit (600 s).
 * Resolves when the relay is over (never rejects); `onChunk` sees every chunk (the chat test).
 */
export function relayStream(
  opened: OpenedChat,
  out: NodeJS.WritableStream & { destroyed?: boolean },
  options: { limits: ChatLimits; signal: AbortSignal; onChunk?: (chunk: Buffer) => void; onError?: (error: ApiError) => void },
): Promise<void> {
  const { response, lease } = opened;
  return new Promise<void>((resolve) => {
    let over = false;
    const finish = (error?: ApiError) => {
      if (over) return;
      over = true;
      clearTimeout(limitTimer);
      options.signal.removeEventListener('abort', onClientGone);
      if (error) {
        options.onError?.(error);
        if (!out.destroyed) out.write(sseError(error));
      }
      out.end();
      resolve();
    };
    const fail = (failure: unknown) => {
      opened.abort();
      void workerError(lease, failure, options.limits).then(finish);
    };
    const onClientGone = () => {
      opened.abort();
      finish();
    };
    const limitTimer = setTimeout(
      () => fail(errors.workerFailed(`The stream ran for ${Math.round(options.limits.streamMs / 1000)} s, the limit for running SSE output; it was ended.`)),
      options.limits.streamMs,
    );
    if (options.signal.aborted) onClientGone();
    else options.signal.addEventListener('abort', onClientGone, { once: true });
    response.on('data', (chunk: Buffer) => {
      if (over) return;
      options.onChunk?.(chunk);
      out.write(chunk);
    });
    response.on('end', () => finish());
    response.on('aborted', () => fail(new Error('the chat worker closed the stream')));
    response.on('error', (error) => fail(error));
  });
}

export const chatRoutes: FastifyPluginAsync<{ service: Service; limits?: ChatLimits }> = async (base, { service, limits = CHAT_LIMITS }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/chat/completions', { schema: { body: chatRequestSchema } }, async (request, reply) => {
    const body = request.body;
    const profile = (await service.catalog.resolve('chat', body.model)) as ChatProfile | undefined;
    if (!profile) throw errors.modelNotFound(body.model);
    const stream = body.stream === true;
    const signal = clientGone(request, reply);
    const opened = await openChat(service, profile, upstreamBody(body, profile), { source: 'api', stream, signal, limits });
    const { response, lease } = opened;
    const headers = reasoningHeaders(body.reasoning_effort);

    if (response.statusCode !== 200) {
      try {
        const text = await readBody(response, 64 * 1024).catch(() => Buffer.alloc(0));
        throw workerStatusError(response.statusCode ?? 502, text);
      } finally {
        lease.release();
      }
    }

    if (!stream) {
      let answer: Buffer;
      try {
        answer = await readBody(response, limits.bufferedBytes);
      } catch (error) {
        opened.abort();
        const failure = await workerError(lease, error, limits);
        lease.release();
        throw failure;
      }
      lease.release();
      return reply.code(200).headers(headers).type('application/json').send(completeAnswer(answer));
    }

    // SSE: headers go out now, then every chunk as it comes; the reservation is kept until the end.
    const out = new PassThrough();
    void relayStream(opened, out, { limits, signal }).finally(() => lease.release());
    return reply
      .code(200)
      .headers({ ...headers, 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
      .type('text/event-stream; charset=utf-8')
      .send(out);
  });
};
