// What the two doors into the chat worker share, POST /v1/chat/completions (chat.ts) and
// POST /v1/responses (responses.ts): the profile look-up, the reasoning headers, and one request's
// way through the scheduler and the chat worker (src/workers/chat/chatRequest.ts): a buffered
// answer whole, or a stream chunk by chunk as the worker sends it, never buffered, measured as it
// passes, then translated into the door's own events (StreamTranslation), with the SSE limits and
// the client's leaving as chat completions have them.
import { Transform, type Readable, type TransformCallback } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Service } from '../../service.js';
import type { ChatProfile } from '../../workers/chat/chat.js';
import { bufferedAnswer, openChat, relayStream, type ChatLimits, type ChatParts } from '../../workers/chat/chatRequest.js';
import { effectiveEffort, type ChatRequest } from '../../workers/chat/chat.schema.js';
import { chatStreamTap, noteAnswer } from '../metrics.js';

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

/** How a door other than chat completions rewrites the worker's events as they pass (the Responses API's ResponseAnswer). */
export interface StreamTranslation {
  /** This door's events for a chunk of the worker's whole events. */
  chunk(events: Buffer): string;
  /** This door's last events, once the worker's stream is over. */
  end(): string;
  /** The translation ended the answer early (a chunk it cannot read): the worker's stream is no longer wanted. */
  readonly failed: boolean;
}

/**
 * A stream's events in its door's words, after the metrics' tap has measured the worker's own. A
 * translation that ends the answer early stops the worker (`stop`); one that throws ends this
 * stream with the error (Fastify ends the answer) rather than throwing out of the relay's write.
 */
class TranslatedStream extends Transform {
  constructor(
    readonly translation: StreamTranslation,
    readonly stop: () => void,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.#step(() => this.translation.chunk(chunk), done);
  }

  override _flush(done: TransformCallback): void {
    this.#step(() => this.translation.end(), done);
  }

  #step(translate: () => string, done: TransformCallback): void {
    let text: string;
    try {
      text = translate();
    } catch (error) {
      this.stop();
      done(error as Error);
      return;
    }
    if (this.translation.failed) this.stop();
    done(null, text === '' ? undefined : text);
  }
}

/** What one door into the chat worker sends it and how it answers (chat completions, the Responses API: responses.ts). */
export interface ChatDoor {
  profile: ChatProfile;
  /** The worker's request body. */
  upstream: Record<string, unknown>;
  stream: boolean;
  /** The answer's own headers (the reasoning headers). */
  headers: Record<string, string>;
  /** A buffered answer (the worker's chat completion) as this door sends it. */
  json(answer: Buffer): Buffer;
  /** A stream's events as this door sends them; without it, the worker's events as they are. */
  events?: () => StreamTranslation;
  /** The request's field that holds the prompt (`messages`, the Responses API's `input`). */
  promptField: string;
}

/** The published, executable chat profile `model` names (404 model_not_found otherwise). */
export async function chatProfile(service: Pick<Service, 'catalog'>, model: string): Promise<ChatProfile> {
  // Known at once when nothing the profile needs changed since it was last checked.
  return (service.catalog.readyNow('chat', model) ?? (await service.catalog.require('chat', model))) as ChatProfile;
}

/**
 * One request through a door into the chat worker: the job is reserved and sent (openChat); a
 * buffered answer, or the worker's error, comes back whole; a stream goes out chunk by chunk as
 * the worker sends it, never buffered, measured as it passes, its reservation kept to its end.
 * `signal` is the request's clientGone signal.
 */
export async function answerChat(service: ChatParts & Pick<Service, 'metrics' | 'profiles'>, limits: ChatLimits, request: FastifyRequest, reply: FastifyReply, signal: AbortSignal, door: ChatDoor): Promise<FastifyReply> {
  const { profile, stream } = door;
  const opened = await openChat(service, profile, door.upstream, {
    source: 'api',
    stream,
    signal,
    limits,
    promptField: door.promptField,
    onGranted: (lease) => noteAnswer(request, { queueMs: lease.waitedMs }),
  });
  if (!stream || opened.response.statusCode !== 200) {
    // The answer, or the worker's error, is in memory: the worker's part is done.
    const answer = await bufferedAnswer(opened, signal, limits, request.log, profile);
    return reply.code(200).headers(door.headers).type('application/json').send(door.json(answer));
  }

  // SSE: the headers go out with the worker's first chunk, then every chunk as it comes; the
  // reservation is kept until the end.
  // The output stream measures itself for the metrics as the events pass (no extra stream per
  // token); a door with its own events translates them after it.
  const tap = chatStreamTap(service.metrics, service.profiles, request, reply);
  const translation = door.events?.();
  let out: Readable = tap;
  let relaySignal = signal;
  if (translation) {
    // A translation that ended the answer ends the relay as a client that left does: the worker's connection closes.
    const stopped = new AbortController();
    const stop = () => stopped.abort();
    if (signal.aborted) stop();
    else signal.addEventListener('abort', stop, { once: true });
    relaySignal = stopped.signal;
    out = tap.pipe(new TranslatedStream(translation, stop));
  }
  void relayStream(opened, tap, { limits, signal: relaySignal, log: request.log, profile }).finally(() => opened.lease.release());
  return reply
    .code(200)
    .headers({ ...door.headers, 'cache-control': 'no-cache', 'x-accel-buffering': 'no' })
    .type('text/event-stream; charset=utf-8')
    .send(out);
}
