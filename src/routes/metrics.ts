// What the listeners record for GET /metrics (src/system/metrics.ts): one access hook per listener
// counts each answered request by route, model and status with its latency, and the inference
// listener's onSend hook measures a chat answer as it leaves (time to its first byte, the token
// usage and speed the worker wrote at its end). Nothing here reads a prompt or keeps an answer: a
// buffered answer's last bytes and a stream's last two chunks are searched for the worker's
// `usage` and `timings` objects, which hold only numbers.
import { Transform, type TransformCallback } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ProfileStore } from '../store/profiles.js';
import { IMAGE_ALIAS } from '../store/profile.schema.js';
import { NO_MODEL, type ChatSeries, type Metrics } from '../system/metrics.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The profile a route resolved, for the metrics' model label (multipart routes, whose body Fastify does not parse). */
    metricsModel?: string;
  }
}

export const CHAT_ROUTE = '/v1/chat/completions';
/** How much of an answer's end is searched for its usage: the worker writes it last. */
const TAIL_BYTES = 8 * 1024;

/**
 * A request's model label: the profile a route named, else the JSON body's `model` when a stored
 * profile has that name (or it is the image alias). Any other value is a client's free text and
 * is never a label.
 */
export function modelLabel(request: FastifyRequest, profiles: ProfileStore): string {
  if (request.metricsModel !== undefined) return request.metricsModel;
  const model = (request.body as { model?: unknown } | null | undefined)?.model;
  if (typeof model !== 'string') return NO_MODEL;
  return model === IMAGE_ALIAS || profiles.byName(model) ? model : NO_MODEL;
}

/** The access hook's metrics part for one listener: requests by route, model and status, and their latency. */
export function requestMetrics(metrics: Metrics, listener: 'admin' | 'inference', profiles: ProfileStore) {
  const bound = metrics.requests(listener);
  return (route: string, status: number, request: FastifyRequest, reply: FastifyReply): void => {
    const model = modelLabel(request, profiles);
    metrics.request(bound.get(route, model), listener, route, model, status, reply.elapsedTime / 1000);
  };
}

/** The JSON object that follows the last `"key":` in `text`, or undefined. */
function objectAfter(text: string, key: string): Record<string, unknown> | undefined {
  const marker = `"${key}":`;
  const at = text.lastIndexOf(marker);
  if (at < 0) return undefined;
  let start = at + marker.length;
  while (text.charCodeAt(start) === 0x20) start += 1;
  if (text.charCodeAt(start) !== 0x7b) return undefined;
  let depth = 0;
  for (let i = start; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (c === 0x7b) depth += 1;
    else if (c === 0x7d && --depth === 0) {
      try {
        return JSON.parse(text.slice(start, i + 1)) as Record<string, unknown>;
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

const count = (value: unknown): number | undefined => (typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined);

export interface AnswerUsage {
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** Generated tokens per second, from the worker's timings. */
  perSecond: number | undefined;
}

/**
 * The usage of a chat answer from its last bytes: OpenAI's `usage` where the worker sent it (a
 * buffered answer, a stream with `include_usage`), else llama-server's `timings` (every answer's
 * end: `prompt_n` computed and `cache_n` reused prompt tokens, `predicted_n` generated ones).
 */
export function answerUsage(tail: string): AnswerUsage | undefined {
  const usage = objectAfter(tail, 'usage');
  const timings = objectAfter(tail, 'timings');
  if (!usage && !timings) return undefined;
  const computed = count(timings?.prompt_n);
  return {
    promptTokens: count(usage?.prompt_tokens) ?? (computed === undefined ? undefined : computed + (count(timings?.cache_n) ?? 0)),
    completionTokens: count(usage?.completion_tokens) ?? count(timings?.predicted_n),
    perSecond: count(timings?.predicted_per_second),
  };
}

function recordUsage(series: ChatSeries, usage: AnswerUsage | undefined): void {
  if (!usage) return;
  if (usage.promptTokens !== undefined) series.promptTokens.inc(usage.promptTokens);
  if (usage.completionTokens !== undefined) series.completionTokens.inc(usage.completionTokens);
  if (usage.perSecond !== undefined && usage.perSecond > 0) series.tokensPerSecond.observe(usage.perSecond);
}

/** Passes a chat stream through unchanged: notes its first chunk's time and reads the usage from its end. */
class ChatStreamTap extends Transform {
  #first = true;
  #previous: Buffer | undefined;
  #last: Buffer | undefined;

  constructor(
    readonly reply: FastifyReply,
    readonly series: ChatSeries,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.#first && chunk.length > 0) {
      this.#first = false;
      this.series.firstToken.observe(this.reply.elapsedTime / 1000);
    }
    this.#previous = this.#last;
    this.#last = chunk;
    done(null, chunk);
  }

  override _flush(done: TransformCallback): void {
    const parts = [this.#previous, this.#last].filter((part): part is Buffer => part !== undefined);
    recordUsage(this.series, answerUsage(Buffer.concat(parts).subarray(-TAIL_BYTES).toString('utf8')));
    done();
  }
}

/**
 * The inference listener's onSend hook for chat answers (200 only): a buffered answer's first byte
 * is the whole answer, so its time is now; a stream is passed through a tap that notes its first
 * chunk. Other routes and errors pass untouched.
 */
export function chatAnswerMetrics(metrics: Metrics, profiles: ProfileStore) {
  return async (request: FastifyRequest, reply: FastifyReply, payload: unknown): Promise<unknown> => {
    if (reply.statusCode !== 200 || request.routeOptions.url !== CHAT_ROUTE) return payload;
    const series = metrics.chat(CHAT_ROUTE, modelLabel(request, profiles));
    if (Buffer.isBuffer(payload) || typeof payload === 'string') {
      series.firstToken.observe(reply.elapsedTime / 1000);
      const tail = Buffer.isBuffer(payload) ? payload.subarray(-TAIL_BYTES).toString('utf8') : payload.slice(-TAIL_BYTES);
      recordUsage(series, answerUsage(tail));
      return payload;
    }
    if (payload && typeof (payload as NodeJS.ReadableStream).pipe === 'function') {
      return (payload as NodeJS.ReadableStream).pipe(new ChatStreamTap(reply, series));
    }
    return payload;
  };
}
