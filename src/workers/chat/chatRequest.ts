// One chat request through the scheduler and the chat worker, shared by the API route and the
// admin chat test: reserve (FIFO queue, memory check, start plan; a grant that needs a worker
// start comes with that start, sent by the supervisor), wait until the worker start the grant
// names is loaded, then send the request to llama-server and hand back its response.
//
// Internal worker HTTP rules (spec 4.2, 8): 120 s without response data ends the request; a
// buffered answer is limited to 16 MiB; running SSE output ends after 600 s. A stream always
// takes a fresh connection (llama-server closes a connection after a stream, so it is never
// reused); buffered answers reuse keep-alive connections. When the worker dies, the supervisor
// revokes the request's reservation with the diagnosis, which becomes the 502 `worker_failed`.
// A request that gets no token for 30 s has its worker probed; one held by an answer (its loop
// answers no probe for 30 s more) is restarted when others wait (stallWatch.ts).
import http from 'node:http';
import type { Service } from '../../service.js';
import type { Lease } from '../../system/scheduler.js';
import { clientOrLease, revocation, withLease } from '../lease.js';
import { ApiError, errors } from '../../errors.js';
import { WorkerGone, type ChatConnection, type ChatProfile } from './chat.js';
import { EVENT_LIMIT, eventData, eventStart, nextBlankLine, wholeEventsEnd } from './sse.js';
import { StallWatch } from './stallWatch.js';
import { contextNote, refuseUnfitPrompt, type ContextProfile } from './promptFit.js';

export const CHAT_LIMITS = {
  /** Spec 8: 120 s without response data from the worker. */
  idleMs: 120_000,
  /** Spec 8: 600 s at most for running SSE output. */
  streamMs: 600_000,
  /** Spec 8: a buffered (non-streamed) chat answer is at most 16 MiB. */
  bufferedBytes: 16 * 1024 * 1024,
  /** How long a failed request waits for the supervisor's diagnosis of a dead worker. */
  diagnosisWaitMs: 2_000,
  /**
   * A request that got no token for this long has its worker probed, and a worker that answers no
   * probe for this long again is held by one answer: it is restarted when others wait (stallWatch.ts).
   */
  stallMs: 30_000,
} as const;

export interface ChatLimits {
  idleMs: number;
  streamMs: number;
  bufferedBytes: number;
  diagnosisWaitMs: number;
  stallMs: number;
}

export interface OpenedChat {
  lease: Lease;
  connection: ChatConnection;
  response: http.IncomingMessage;
  /** Ends the worker request (the worker notices the closed connection and frees the slot). */
  abort(): void;
  /** A stream's stall watch: told of each chunk, stopped at the end (a buffered answer's ended when it came). */
  stall: Pick<StallWatch, 'token' | 'stop'>;
}

export class UpstreamFailure extends Error {
  override name = 'UpstreamFailure';
  constructor(
    readonly kind: 'timeout' | 'connection' | 'too_large' | 'stream_limit',
    message: string,
  ) {
    super(message);
  }
}

/**
 * The error a failed worker request answers with: the supervisor's diagnosis when the worker
 * died (it names the likely cause), else what went wrong on the connection.
 */
export async function workerError(lease: Lease, error: unknown, limits: ChatLimits = CHAT_LIMITS): Promise<ApiError> {
  if (error instanceof ApiError) return error;
  const revoked = await revocation(lease, error instanceof UpstreamFailure && error.kind !== 'connection' ? 0 : limits.diagnosisWaitMs);
  if (revoked) return revoked.code === 'worker_failed' ? errors.workerFailed(revoked.message) : errors.unavailable(revoked.code, revoked.message);
  if (error instanceof UpstreamFailure) {
    if (error.kind === 'too_large') return new ApiError(502, 'server_error', 'response_too_large', error.message);
    return errors.workerFailed(error.message);
  }
  if (error instanceof WorkerGone) return errors.workerFailed(`The chat worker stopped before it was ready: ${error.message}`);
  return errors.workerFailed(`The chat worker request failed: ${(error as Error).message}`);
}

/** POSTs the body to the worker; resolves with the response once its headers arrive. */
export function postToWorker(
  connection: ChatConnection,
  body: Buffer,
  options: { stream: boolean; signal: AbortSignal; idleMs: number },
): { response: Promise<http.IncomingMessage>; abort: () => void } {
  const request = http.request({
    host: '127.0.0.1',
    port: connection.port,
    path: '/v1/chat/completions',
    method: 'POST',
    // A stream's connection is never reused: llama-server closes it after the stream.
    agent: options.stream ? false : connection.agent,
    headers: {
      authorization: `Bearer ${connection.key}`,
      'content-type': 'application/json',
      'content-length': body.length,
      ...(options.stream ? { connection: 'close', accept: 'text/event-stream' } : {}),
    },
  });
  const abort = () => request.destroy();
  let answer: http.IncomingMessage | undefined;
  const response = new Promise<http.IncomingMessage>((resolve, reject) => {
    // Spec 8: 120 s without response data (before the headers or between chunks) ends the request.
    request.setTimeout(options.idleMs, () => {
      const failure = new UpstreamFailure('timeout', `The chat worker sent no data for ${Math.round(options.idleMs / 1000)} s (timeout).`);
      answer?.destroy(failure);
      request.destroy(failure);
    });
    request.on('response', (incoming) => {
      answer = incoming;
      resolve(incoming);
    });
    request.on('error', (error) => {
      reject(error instanceof UpstreamFailure ? error : new UpstreamFailure('connection', `The connection to the chat worker failed: ${error.message}`));
    });
    if (options.signal.aborted) abort();
    else options.signal.addEventListener('abort', abort, { once: true });
    request.end(body);
  });
  return { response, abort };
}

/** Reads a buffered answer, at most `limit` bytes (spec 8: 16 MiB). */
export function readBody(response: http.IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    /** Set when we end the answer ourselves: it wins over the events that destroying causes. */
    let ours: UpstreamFailure | undefined;
    const broke = (detail?: string) =>
      reject(ours ?? new UpstreamFailure('connection', `The chat worker's answer broke off${detail ? `: ${detail}` : '.'}`));
    response.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > limit) {
        ours ??= new UpstreamFailure('too_large', `The chat answer is larger than the ${Math.round(limit / 1024 / 1024)} MiB limit for buffered answers; stream it instead.`);
        response.destroy(ours);
        return;
      }
      chunks.push(chunk);
    });
    response.on('end', () => resolve(Buffer.concat(chunks)));
    response.on('error', (error) => (error instanceof UpstreamFailure ? reject(error) : broke(error.message)));
    // A destroy with our own failure also aborts the response; the failure's 'error' comes next.
    response.on('aborted', () => setImmediate(() => broke()));
  });
}

/**
 * A buffered answer as OpenAI's schema has it: llama-server leaves out the required
 * `choices[].logprobs` and `message.refusal` when they are null, so they are added. Everything
 * else is the worker's answer as it is. A body that is not a completion is left alone.
 */
export function completeAnswer(body: Buffer): Buffer {
  let parsed: { choices?: Array<{ logprobs?: unknown; message?: { refusal?: unknown } }> };
  try {
    parsed = JSON.parse(body.toString('utf8')) as typeof parsed;
  } catch {
    return body;
  }
  if (!Array.isArray(parsed.choices)) return body;
  for (const choice of parsed.choices) {
    if (choice.logprobs === undefined) choice.logprobs = null;
    if (choice.message && choice.message.refusal === undefined) choice.message.refusal = null;
  }
  return Buffer.from(JSON.stringify(parsed));
}

const CHAT_WORKER = { component: 'chat', name: 'chat worker' } as const;

/** Where the worker's error text comes from llama.cpp's C++ internals rather than from words written for users. */
const INTERNALS = /\[json\.exception\.|std::|unordered_map::|vector::|basic_string|what\(\)/;

/** The JSON parser's exceptions that the request's own content causes (nlohmann::json's ids). */
const CONTENT_UNREADABLE: ReadonlyArray<[RegExp, string]> = [
  [/\[json\.exception\.parse_error\.\d+\]/, 'it holds text the chat worker cannot read (for example a lone UTF-16 surrogate such as \\ud800)'],
  [/\[json\.exception\.out_of_range\.406\]/, 'it holds a number beyond the range the chat worker can read'],
];

/** A quoted span: a quote mark after a space, an opening bracket, `=`, `:` or `,` (an apostrophe inside a word is none), to its closing mark or the end. */
const QUOTED = /(^|[\s([=:,])(['"`])(?:(?!\2)[\s\S])*(?:\2|$)/g;

/**
 * A worker's error text as the log keeps it: llama-server's own words, never the request's. What
 * may quote the request (a prompt, a message, a JSON schema, a tool definition) is left out: the
 * JSON parser's quote (`last read: '…'`, `parsing '…'`), a schema place with what follows it
 * (`JSON schema error at #/properties/<name>: unrecognized type <type>`), every line after the
 * first (a schema or grammar dump), quoted text ('…', "…", `…`) and JSON text ({…}). The rest is
 * bounded. The client's own answer is another matter (workerStatusError).
 */
export function workerErrorDetail(message: string): string {
  const lines = message.split(/\r?\n/);
  const first = lines.length > 1 ? `${lines[0] ?? ''} (…)` : message;
  const unquoted = first
    .replace(/; last read: [\s\S]*$/, '; last read: (left out)')
    .replace(/ parsing '[\s\S]*$/, ' parsing (value left out)')
    .replace(/ at #[\s\S]*$/, ' at (the place in the schema and its detail left out)')
    .replace(QUOTED, '$1$2…$2')
    .replace(/\{[\s\S]*$/, '{…}');
  return unquoted.length > 500 ? `${unquoted.slice(0, 500)}…` : unquoted;
}

/** Where a worker's error detail is logged (never shown to the client). */
export type StatusLog = { warn: (fields: object, message: string) => void };
/** What a worker's error message is completed with (the context size a request ran past). */
export type StatusProfile = ContextProfile;

/**
 * llama-server's error answer (`{ error: { message, type } }`, OpenAI's shape) read, and its
 * message logged for the operator at warn without the request's text (workerErrorDetail): the
 * chat worker's and the prompt enhancer's alike. Empty when the body is no such answer.
 */
export function readWorkerError(status: number, body: Buffer | string, log: StatusLog, worker: { component: 'chat' | 'enhancer'; name: string }): { message?: string; type?: string } {
  let parsed: { error?: { message?: unknown; type?: unknown } } | null;
  try {
    parsed = JSON.parse(body.toString()) as typeof parsed;
  } catch {
    // Not JSON: the status alone says what happened.
    return {};
  }
  const message = typeof parsed?.error?.message === 'string' ? parsed.error.message : undefined;
  const type = typeof parsed?.error?.type === 'string' ? parsed.error.type : undefined;
  if (message !== undefined) log.warn({ component: worker.component, worker_status: status, worker_error: workerErrorDetail(message) }, `the ${worker.name} answered with an error`);
  return { ...(message === undefined ? {} : { message }), ...(type === undefined ? {} : { type }) };
}

/**
 * The worker's own error answer (OpenAI shape), as ours. The class stays: 4xx are the client's
 * error, 5xx become 502 `worker_failed`, except a JSON parser failure on the request's content,
 * which is the client's 400. llama-server's message reaches the client only where it is written
 * for users; the text of its C++ internals (`unordered_map::at`, the JSON parser's exception,
 * which quotes the request back) is replaced by a summary, and the detail goes to `log`.
 */
export function workerStatusError(status: number, body: Buffer, log: StatusLog, profile?: StatusProfile): ApiError {
  const { message, type: code } = readWorkerError(status, body, log, CHAT_WORKER);
  const internal = message !== undefined && INTERNALS.test(message);
  // What came before the internals is llama-server's own words ("Failed to parse tool call arguments as JSON").
  const lead = message?.split(INTERNALS)[0]?.replace(/[\s:]+$/, '');
  const unreadable = message === undefined ? undefined : CONTENT_UNREADABLE.find(([pattern]) => pattern.test(message))?.[1];
  if (unreadable) {
    return errors.invalidValue(null, `The request was refused by the chat worker${lead ? ` (${lead})` : ''}: ${unreadable}.`);
  }
  if (status >= 400 && status < 500 && status !== 401 && status !== 403) {
    const text = message === undefined ? `The chat worker refused the request (${status}).` : internal ? `The chat worker refused the request${lead ? ` (${lead})` : ''}; the service log has its reason.` : message;
    if (code === 'exceed_context_size_error') return new ApiError(status === 404 ? 400 : status, 'invalid_request_error', 'context_length_exceeded', `${text}${contextNote(profile)}`);
    return new ApiError(status === 404 ? 400 : status, 'invalid_request_error', 'invalid_value', text);
  }
  if (message === undefined) return errors.workerFailed(`The chat worker answered ${status}.`);
  if (internal) return errors.workerFailed(`The chat worker failed on this request with an internal error${lead ? ` (${lead})` : ''}; the service log has the details.`);
  return errors.workerFailed(`The chat worker failed: ${message}`);
}

/** The parts of the service a chat request uses: the reservation, the chat worker, the log. */
export type ChatParts = Pick<Service, 'scheduler' | 'chat' | 'log'>;

/**
 * Reserves (its grant starts the worker, or joins its start), waits until it is loaded, and sends the request.
 * On any failure the reservation is given back (a start this job began and nobody else uses is
 * aborted) and the error is an ApiError, or the client's own abort reason.
 */
export async function openChat(
  service: ChatParts,
  profile: ChatProfile,
  body: Record<string, unknown>,
  options: {
    source: 'api' | 'test';
    stream: boolean;
    signal: AbortSignal;
    limits?: ChatLimits;
    /** The request's field that holds the prompt, for a prompt that cannot fit (default `messages`). */
    promptField?: string;
    onQueued?: (position: number) => void;
    /** The reservation is granted: the worker starts or is joined. */
    onGranted?: (lease: Lease) => void;
  },
): Promise<OpenedChat> {
  const limits = options.limits ?? CHAT_LIMITS;
  // What cannot fit the context is refused before it waits or holds a slot.
  await refuseUnfitPrompt(profile, body, options.promptField ?? 'messages');
  const lease = await service.scheduler.reserve(
    {
      kind: 'chat',
      source: options.source,
      profileId: profile.id,
      revision: profile.revision,
      slots: profile.params.slots,
      device: 'cpu',
      whenBusy: 'wait',
      profile,
    },
    { signal: options.signal, ...(options.onQueued ? { onQueued: options.onQueued } : {}) },
  );
  const both = clientOrLease(options.signal, lease);
  options.onGranted?.(lease);
  return withLease(
    lease,
    options.signal,
    async () => {
      const connection = await service.chat.connect(lease.generation, both);
      const sent = postToWorker(connection, Buffer.from(JSON.stringify(body)), { stream: options.stream, signal: both, idleMs: limits.idleMs });
      const stall = new StallWatch((signal) => service.chat.probe(lease.generation, signal), lease, limits.stallMs, service.log);
      try {
        const response = await sent.response;
        // A buffered answer comes whole, and an error answer is no stream: either way the worker is not held.
        if (!options.stream || response.statusCode !== 200) stall.stop();
        return { lease, connection, response, abort: sent.abort, stall };
      } catch (error) {
        stall.stop();
        throw error;
      }
    },
    (error) => workerError(lease, error, limits),
    'keep',
  );
}

/** The error a worker's answer with a status other than 200 stands for (its body read, at most 64 KiB). */
export async function refusal(response: http.IncomingMessage, log: StatusLog, profile?: StatusProfile): Promise<ApiError> {
  const text = await readBody(response, 64 * 1024).catch(() => Buffer.alloc(0));
  return workerStatusError(response.statusCode ?? 502, text, log, profile);
}

/**
 * A buffered answer, or the error its worker answered with, on an opened chat. The lease goes back
 * either way (withLease), after the supervisor's diagnosis when the worker died mid-answer.
 */
export function bufferedAnswer(opened: OpenedChat, client: AbortSignal, limits: ChatLimits, log: StatusLog, profile?: StatusProfile): Promise<Buffer> {
  const { response, lease } = opened;
  return withLease(
    lease,
    client,
    async () => {
      if (response.statusCode !== 200) throw await refusal(response, log, profile);
      try {
        return await readBody(response, limits.bufferedBytes);
      } catch (error) {
        opened.abort();
        throw error;
      }
    },
    (error) => workerError(lease, error, limits),
  );
}

/** An SSE event carrying an error, the contract's ending of a stream that already started. */
export const sseError = (error: ApiError): string => `data: ${JSON.stringify(error.body())}\n\n`;

/** Only an event that holds these bytes can be an error event (JSON escapes a quote inside a string). */
const ERROR_KEY = Buffer.from('"error"');

/**
 * The worker's error event among whole SSE events (llama-server ends a stream that fails after its
 * first event with `data: {"error": {code, message, type}}`): where it starts, and its status and
 * body as a non-streamed error answer would have them. Undefined when there is none.
 */
export function streamedError(events: Buffer): { at: number; status: number; body: Buffer } | undefined {
  let from = 0;
  while (from < events.length) {
    const found = events.indexOf(ERROR_KEY, from);
    if (found < 0) return undefined;
    const at = Math.max(from, eventStart(events, found));
    const blank = nextBlankLine(events, found);
    const end = blank?.at ?? events.length;
    const data = eventData(events.subarray(at, end).toString('utf8'));
    try {
      const parsed = JSON.parse(data) as unknown;
      if (typeof parsed === 'object' && parsed !== null && Object.hasOwn(parsed, 'error')) {
        const { error } = parsed as { error: { code?: unknown } | null };
        const status = typeof error?.code === 'number' && error.code >= 400 && error.code < 600 ? error.code : 500;
        return { at, status, body: Buffer.from(data) };
      }
    } catch {
      // Not a JSON event (a content chunk cannot hold `"error"` unescaped, but a stand-in may).
    }
    from = blank?.end ?? events.length;
  }
  return undefined;
}

/**
 * Relays a worker's SSE stream to `out`, whole events as they come (a chunk of whole events, the
 * usual case, goes out as it is; the start of an unfinished event waits for its end). Ends after
 * the worker's last byte, or with an error event of the service's own when the worker sends one
 * (its detail goes to `log`, as a non-streamed error answer's does: workerStatusError), fails,
 * goes quiet (120 s) or runs past the SSE limit (600 s). A client that stops reading pauses the
 * worker's response (backpressure, holdWorker) instead of piling its answer up in memory. An event the worker cut off halfway is
 * not relayed. Resolves when the relay is over (never rejects); `onChunk` sees what `out` gets of
 * the worker's events (the chat test), `onError` the error that ended the stream.
 */
export function relayStream(
  opened: OpenedChat,
  out: NodeJS.WritableStream & { destroyed?: boolean },
  options: {
    limits: ChatLimits;
    signal: AbortSignal;
    log: StatusLog;
    profile?: StatusProfile;
    onChunk?: (chunk: Buffer) => void;
    onError?: (error: ApiError) => void;
  },
): Promise<void> {
  const { response, lease } = opened;
  return new Promise<void>((resolve) => {
    let over = false;
    const finish = (error?: ApiError) => {
      if (over) return;
      over = true;
      opened.stall.stop();
      clearTimeout(limitTimer);
      options.signal.removeEventListener('abort', onClientGone);
      if (error) {
        options.onError?.(error);
        if (!out.destroyed) out.write(sseError(error));
      }
      out.end();
      resolve();
    };
    let failing = false;
    const fail = (failure: unknown) => {
      if (over || failing) return;
      failing = true;
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
    /** Relays whole events; the worker's error event ends the stream with ours instead. */
    const relay = (events: Buffer) => {
      const failed = events.includes(ERROR_KEY) ? streamedError(events) : undefined;
      const before = failed ? events.subarray(0, failed.at) : events;
      if (before.length > 0) {
        options.onChunk?.(before);
        if (!out.write(before) && !failed) holdWorker();
      }
      if (failed) {
        opened.abort();
        finish(workerStatusError(failed.status, failed.body, options.log, options.profile));
      }
    };
    /**
     * Backpressure: a client that reads slower than the worker writes (or not at all) pauses the
     * worker's response until `out` drains, so what waits in the service stays about one buffer,
     * whatever the answer's length; the worker's own socket buffers fill and llama-server waits
     * to send. The idle limit (the worker sending nothing) does not count while the client is the
     * one not reading; the SSE limit still does, so a stalled client frees its slot at that limit.
     */
    let holding = false;
    const holdWorker = () => {
      if (holding || over) return;
      holding = true;
      response.pause();
      response.socket?.setTimeout(0);
      out.once('drain', () => {
        holding = false;
        if (over) return;
        response.socket?.setTimeout(options.limits.idleMs);
        response.resume();
      });
    };
    /** The start of an event whose blank line has not come yet. */
    let held: Buffer | undefined;
    response.on('data', (chunk: Buffer) => {
      if (over || chunk.length === 0) return;
      opened.stall.token();
      const data = held ? Buffer.concat([held, chunk]) : chunk;
      const cut = wholeEventsEnd(data);
      held = cut < data.length ? data.subarray(cut) : undefined;
      if (cut > 0) relay(cut === data.length ? data : data.subarray(0, cut));
      if (held && held.length > EVENT_LIMIT && !over) {
        relay(held);
        held = undefined;
      }
    });
    response.on('end', () => {
      // The worker's last event without its blank line is relayed as it is.
      if (held && !over) relay(held);
      finish();
    });
    // A destroy with our own failure (the idle limit) also aborts the response; its 'error' comes next.
    response.on('aborted', () => setImmediate(() => fail(new UpstreamFailure('connection', 'The chat worker closed the stream.'))));
    response.on('error', (error) => fail(error));
  });
}
