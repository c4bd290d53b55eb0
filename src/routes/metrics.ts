// What the listeners record for GET /metrics (src/system/observe/metrics.ts): one access hook per listener
// counts each answered request by route, model and status with its latency, and the inference
// listener's onSend hook measures a chat answer as it leaves (time to its first byte, the token
// usage and speed the worker wrote at its end). Nothing here reads a prompt or keeps an answer: a
// buffered answer's last bytes and a stream's last two chunks are searched for the worker's
// `usage` and `timings` objects, which hold only numbers.
import { Transform, type TransformCallback } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ProfileStore } from '../store/profiles.js';
import { IMAGE_ALIAS } from '../store/profile.schema.js';
import { NO_MODEL, type ChatSeries, type Metrics } from '../system/observe/metrics.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The profile a route resolved, for the metrics' model label (multipart routes, whose body Fastify does not parse). */
    metricsModel?: string;
    /** What a chat answer's measures said, for the recent-requests view (src/routes/recent.ts): numbers only. */
    answerFacts?: AnswerFacts;
  }
}

/** A chat answer's measures: time to its first byte, the worker's usage and speed, its queue wait. */
export interface AnswerFacts {
  ttftMs?: number;
  usage?: AnswerUsage;
  queueMs?: number;
  stream?: boolean;
}

/** Notes `facts` on the request, over what it had. */
export function noteAnswer(request: FastifyRequest, facts: AnswerFacts): void {
  request.answerFacts = { ...request.answerFacts, ...facts };
}

export const CHAT_ROUTE = '/v1/chat/completions';
/** How much of an answer's end is searched for its usage: the worker writes `usage` and `timings` last. */
const TAIL_BYTES = 2 * 1024;

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

/** How far past `"usage":{` or `"timings":{` their numbers are looked for (the objects are short). */
const OBJECT_SPAN = 600;
const KEYS = {
  usage: Buffer.from('"usage":{'),
  timings: Buffer.from('"timings":{'),
  promptTokens: Buffer.from('"prompt_tokens":'),
  completionTokens: Buffer.from('"completion_tokens":'),
  promptN: Buffer.from('"prompt_n":'),
  cacheN: Buffer.from('"cache_n":'),
  predictedN: Buffer.from('"predicted_n":'),
  perSecond: Buffer.from('"predicted_per_second":'),
};

/**
 * The number after `key` within the object that starts at `from`, read from the bytes: no string
 * is made and nothing is parsed whole. Undefined when absent or not a plain number.
 */
function numberIn(bytes: Buffer, from: number, key: Buffer): number | undefined {
  if (from < 0) return undefined;
  const at = bytes.indexOf(key, from);
  if (at < 0 || at - from > OBJECT_SPAN) return undefined;
  let i = at + key.length;
  while (bytes[i] === 0x20) i += 1;
  let whole = 0;
  let digits = 0;
  for (let c = bytes[i]; c !== undefined && c >= 0x30 && c <= 0x39; c = bytes[++i]) {
    whole = whole * 10 + (c - 0x30);
    digits += 1;
  }
  if (digits === 0) return undefined;
  let scale = 1;
  let fraction = 0;
  if (bytes[i] === 0x2e) {
    for (let c = bytes[++i]; c !== undefined && c >= 0x30 && c <= 0x39; c = bytes[++i]) {
      scale /= 10;
      fraction += (c - 0x30) * scale;
    }
  }
  // An exponent (1e-05) would be misread: such a value is left out rather than guessed.
  return bytes[i] === 0x65 || bytes[i] === 0x45 ? undefined : whole + fraction;
}

export interface AnswerUsage {
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** Generated tokens per second, from the worker's timings. */
  perSecond: number | undefined;
}

/**
 * The usage of a chat answer from its last bytes: OpenAI's `usage` where the worker sent it (a
 * buffered answer, a stream with `include_usage`), else llama-server's `timings` (every answer's
 * end: `prompt_n` computed and `cache_n` reused prompt tokens, `predicted_n` generated ones). The
 * answer's own text cannot fake these keys: inside a JSON string their quotes are escaped.
 */
export function answerUsage(tail: Buffer): AnswerUsage | undefined {
  const usage = tail.lastIndexOf(KEYS.usage);
  const timings = tail.lastIndexOf(KEYS.timings);
  if (usage < 0 && timings < 0) return undefined;
  const computed = numberIn(tail, timings, KEYS.promptN);
  return {
    promptTokens: numberIn(tail, usage, KEYS.promptTokens) ?? (computed === undefined ? undefined : computed + (numberIn(tail, timings, KEYS.cacheN) ?? 0)),
    completionTokens: numberIn(tail, usage, KEYS.completionTokens) ?? numberIn(tail, timings, KEYS.predictedN),
    perSecond: numberIn(tail, timings, KEYS.perSecond),
  };
}

function recordUsage(series: ChatSeries, usage: AnswerUsage | undefined): void {
  if (!usage) return;
  if (usage.promptTokens !== undefined) series.promptTokens.inc(usage.promptTokens);
  if (usage.completionTokens !== undefined) series.completionTokens.inc(usage.completionTokens);
  if (usage.perSecond !== undefined && usage.perSecond > 0) series.tokensPerSecond.observe(usage.perSecond);
}

/**
 * A chat stream's own output stream (the route writes the relayed events into it, Fastify sends
 * it, or a door's translation of it): passes every chunk on unchanged, notes the first one's time
 * and reads the usage from the worker's last chunks. Being the stream itself, it costs no stream
 * of its own in between, on every token. Its series are looked up when they are recorded: a
 * profile deleted or renamed while it streams has had its series removed, and a child bound
 * before would bring them back.
 */
export class ChatStreamTap extends Transform {
  #first = true;
  #previous: Buffer | undefined;
  #last: Buffer | undefined;

  constructor(
    readonly reply: FastifyReply,
    readonly series: () => ChatSeries,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (this.#first && chunk.length > 0) {
      this.#first = false;
      this.series().firstToken.observe(this.reply.elapsedTime / 1000);
      noteAnswer(this.reply.request, { ttftMs: this.reply.elapsedTime, stream: true });
    }
    this.#previous = this.#last;
    this.#last = chunk;
    done(null, chunk);
  }

  override _flush(done: TransformCallback): void {
    const parts = [this.#previous, this.#last].filter((part): part is Buffer => part !== undefined);
    const usage = answerUsage(Buffer.concat(parts).subarray(-TAIL_BYTES));
    recordUsage(this.series(), usage);
    if (usage) noteAnswer(this.reply.request, { usage });
    done();
  }
}

/** The output stream of one chat stream on its route, measuring it as it passes (see ChatStreamTap). */
export function chatStreamTap(metrics: Metrics, profiles: ProfileStore, request: FastifyRequest, reply: FastifyReply): ChatStreamTap {
  const model = modelLabel(request, profiles);
  const route = request.routeOptions.url ?? CHAT_ROUTE;
  return new ChatStreamTap(reply, () => metrics.chat(route, model));
}

/** A buffered chat answer (the worker's chat completion) measured: its first byte is the whole answer, so its time is now; its usage is at its end. */
export function measureAnswer(metrics: Metrics, profiles: ProfileStore, request: FastifyRequest, reply: FastifyReply, answer: Buffer | string): void {
  const series = metrics.chat(request.routeOptions.url ?? CHAT_ROUTE, modelLabel(request, profiles));
  series.firstToken.observe(reply.elapsedTime / 1000);
  const usage = answerUsage(Buffer.isBuffer(answer) ? answer.subarray(-TAIL_BYTES) : Buffer.from(answer.slice(-TAIL_BYTES)));
  recordUsage(series, usage);
  noteAnswer(request, { ttftMs: reply.elapsedTime, stream: false, ...(usage ? { usage } : {}) });
}

/**
 * The inference listener's onSend hook for buffered chat answers (200 only): a buffered answer's
 * first byte is the whole answer, so its time is now, and its usage is at its end. A stream
 * measures itself (the route sends a chatStreamTap). Other routes and errors pass untouched.
 */
export function chatAnswerMetrics(metrics: Metrics, profiles: ProfileStore) {
  // The callback form: no promise per response on the inference listener's path.
  return (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: null, payload: unknown) => void): void => {
    if (reply.statusCode === 200 && request.routeOptions.url === CHAT_ROUTE && (Buffer.isBuffer(payload) || typeof payload === 'string')) {
      measureAnswer(metrics, profiles, request, reply, payload);
    }
    done(null, payload);
  };
}
