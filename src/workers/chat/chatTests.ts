// The operator's chat test (spec 2.5, 4.7): one test job at a time, run through the same
// scheduler and chat worker as the API (source `test`: no publication needed), streamed from the
// worker so its timings and usage come from the final stream reply. The job lives in RAM only:
// neither prompt nor answer is written to a file or a log, and the next test replaces it.
//
// - job.timings: prefill and generation, each tokens, milliseconds and tokens per second, from
//   the worker's own `timings` (prefill counts only the computed prompt tokens, not the reused
//   cache; model loading and queue waiting are not part of them).
// - job.usage: the final stream reply's usage (the whole input, reused context included).
// - Cancel closes only this test's connection; during its own model start it aborts that start;
//   while it waits in the queue it leaves the queue. Measurements stay empty after a cancel.
// - Every change of the job (phase, position, each streamed piece of the answer) emits `change`.
// - `api` picks the door the test goes through: chat completions, or OpenAI's Responses API
//   (responses.ts translates the request, and the worker's stream into Responses events, from
//   which the answer, its end and its usage are read; the timings are the worker's either way).
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { EventEmitter } from 'eventemitter3';
import { errors } from '../../errors.js';
import type { ChatProfile } from './chat.js';
import { chatRequestSchema, upstreamBody } from './chat.schema.js';
import { CHAT_LIMITS, openChat, refusal, relayStream, type ChatLimits, type ChatParts } from './chatRequest.js';
import { jobFailure } from '../lease.js';
import { SseReader } from './sse.js';
import { chatRequestOf, ResponseAnswer } from './responses.js';
import { responsesRequestSchema } from './responses.schema.js';
import type { ChatTestJob, ChatTestPhase, Throughput } from '../../system/observe/console.types.js';

export const CHAT_TEST_MAX_TOKENS = 4096;

/** The door a chat test goes through: `/v1/chat/completions` or `/v1/responses`. */
export const CHAT_TEST_APIS = ['chat_completions', 'responses'] as const satisfies ReadonlyArray<ChatTestJob['api']>;
export type ChatTestApi = (typeof CHAT_TEST_APIS)[number];

export interface TestMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

const ENDED: readonly ChatTestPhase[] = ['done', 'cancelled', 'failed'];
const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

function throughput(tokens: unknown, ms: unknown, perSecond: unknown): Throughput | null {
  if (typeof tokens !== 'number' || typeof ms !== 'number') return null;
  const rate = typeof perSecond === 'number' && Number.isFinite(perSecond) ? perSecond : ms > 0 ? (tokens * 1000) / ms : 0;
  return { tokens, ms: round(ms, 3), tokens_per_second: round(rate) };
}

interface StreamChunk {
  choices?: Array<{ delta?: { content?: string | null }; finish_reason?: string | null }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } };
  timings?: { prompt_n?: number; prompt_ms?: number; prompt_per_second?: number; predicted_n?: number; predicted_ms?: number; predicted_per_second?: number };
}

/** The Responses events a test reads (responses.ts). */
interface ResponsesEvent {
  type?: string;
  delta?: string;
  response?: {
    status?: string;
    incomplete_details?: { reason?: string } | null;
    usage?: { input_tokens?: number; output_tokens?: number; total_tokens?: number; input_tokens_details?: { cached_tokens?: number } };
    error?: { message?: string } | null;
  };
}

/** The worker's request of a test through `api`, and what turns its stream into that door's events (none for chat completions). */
function testRequest(api: ChatTestApi, profile: ChatProfile, messages: TestMessage[], maxTokens: number): { body: Record<string, unknown>; door?: ResponseAnswer } {
  if (api === 'chat_completions') {
    return { body: upstreamBody(chatRequestSchema.parse({ model: profile.name, messages, max_tokens: maxTokens, stream: true }), profile, { includeUsage: true }) };
  }
  const request = responsesRequestSchema.parse({ model: profile.name, input: messages, max_output_tokens: maxTokens, stream: true });
  const body = upstreamBody(chatRequestOf(request), profile, { includeUsage: true });
  return { body, door: new ResponseAnswer(request, profile.name, body) };
}

export class ChatTests extends EventEmitter<{ change: [] }> {
  #job: ChatTestJob | null = null;
  #abort: AbortController | null = null;
  #done: Promise<void> | null = null;

  constructor(
    readonly service: ChatParts,
    readonly limits: ChatLimits = CHAT_LIMITS,
  ) {
    super();
  }

  current(): ChatTestJob | null {
    return this.#job ? structuredClone(this.#job) : null;
  }

  running(): boolean {
    return this.#job !== null && !ENDED.includes(this.#job.phase);
  }

  /** Resolves when the current job has ended (tests and shutdown). */
  async settled(): Promise<void> {
    await this.#done;
  }

  /** Starts a test job; the caller checked that no job runs. */
  start(profile: ChatProfile, messages: TestMessage[], maxTokens: number, api: ChatTestApi = 'chat_completions'): ChatTestJob {
    const job: ChatTestJob = {
      id: randomUUID(),
      profile_id: profile.id,
      revision: profile.revision,
      api,
      phase: 'waiting',
      max_tokens: maxTokens,
      answer: '',
      finish_reason: null,
      timings: { prefill: null, generation: null },
      usage: null,
      error: null,
      position: null,
      started_at: new Date().toISOString(),
      finished_at: null,
    };
    const abort = new AbortController();
    this.#job = job;
    this.#abort = abort;
    this.#done = this.#run(job, profile, messages, abort.signal);
    this.emit('change');
    return structuredClone(job);
  }

  /** Cancel: leaves the queue, aborts its own model start, or closes its own connection. */
  cancel(): boolean {
    if (!this.running() || !this.#abort) return false;
    this.#abort.abort(new Error('the chat test was cancelled'));
    return true;
  }

  #end(job: ChatTestJob, phase: 'done' | 'cancelled' | 'failed', error?: { code: string | null; message: string }): void {
    if (ENDED.includes(job.phase)) return;
    job.phase = phase;
    job.position = null;
    job.finished_at = new Date().toISOString();
    if (error) job.error = error;
    if (phase !== 'done') {
      // Missing measurements stay empty, especially after a cancel.
      job.timings = { prefill: null, generation: null };
      job.usage = null;
    }
    this.emit('change');
  }

  async #run(job: ChatTestJob, profile: ChatProfile, messages: TestMessage[], signal: AbortSignal): Promise<void> {
    const { body, door } = testRequest(job.api, profile, messages, job.max_tokens);
    try {
      const opened = await openChat(this.service, profile, body, {
        source: 'test',
        stream: true,
        signal,
        limits: this.limits,
        onQueued: (position) => {
          job.position = position;
          this.emit('change');
        },
        onGranted: () => {
          job.phase = 'starting';
          job.position = null;
          this.emit('change');
        },
      });
      try {
        if (opened.response.statusCode !== 200) {
          const failure = await refusal(opened.response, this.service.log, profile);
          this.#end(job, 'failed', { code: failure.code, message: failure.message });
          return;
        }
        job.phase = 'running';
        this.emit('change');
        let failed: { code: string | null; message: string } | undefined;
        const reader = new SseReader((data) => {
          if (data === '[DONE]') return;
          let chunk: StreamChunk;
          try {
            chunk = JSON.parse(data) as StreamChunk;
          } catch {
            return;
          }
          // Through the Responses API, the answer, its end and its usage come from its events (responsesReader).
          for (const choice of door ? [] : (chunk.choices ?? [])) {
            if (choice.delta?.content) job.answer += choice.delta.content;
            if (choice.finish_reason) job.finish_reason = choice.finish_reason;
          }
          if (chunk.usage && !door) {
            job.usage = {
              prompt_tokens: chunk.usage.prompt_tokens ?? 0,
              completion_tokens: chunk.usage.completion_tokens ?? 0,
              total_tokens: chunk.usage.total_tokens ?? 0,
              cached_tokens: chunk.usage.prompt_tokens_details?.cached_tokens ?? null,
            };
          }
          if (chunk.timings) {
            const t = chunk.timings;
            job.timings = {
              prefill: throughput(t.prompt_n, t.prompt_ms, t.prompt_per_second),
              generation: throughput(t.predicted_n, t.predicted_ms, t.predicted_per_second),
            };
          }
          this.emit('change');
        });
        const responsesReader = new SseReader((data) => {
          const event = JSON.parse(data) as ResponsesEvent;
          if (event.type === 'response.output_text.delta' && event.delta) job.answer += event.delta;
          const response = event.response;
          if (event.type === 'response.completed' || event.type === 'response.incomplete') job.finish_reason = response?.incomplete_details?.reason ?? response?.status ?? null;
          if (event.type === 'response.failed') failed = { code: 'worker_failed', message: response?.error?.message ?? 'The chat worker failed.' };
          if (response?.usage) {
            job.usage = {
              prompt_tokens: response.usage.input_tokens ?? 0,
              completion_tokens: response.usage.output_tokens ?? 0,
              total_tokens: response.usage.total_tokens ?? 0,
              cached_tokens: response.usage.input_tokens_details?.cached_tokens ?? null,
            };
          }
          this.emit('change');
        });
        const sink = new Writable({ write: (_chunk, _encoding, next) => next() });
        await relayStream(opened, sink, {
          limits: this.limits,
          signal,
          log: this.service.log,
          profile,
          onChunk: (chunk) => {
            reader.push(chunk);
            if (door) responsesReader.push(Buffer.from(door.chunk(chunk)));
          },
          onError: (error) => {
            failed = { code: error.code, message: error.message };
          },
        });
        if (door && !signal.aborted && !failed) responsesReader.push(Buffer.from(door.end()));
        if (signal.aborted) this.#end(job, 'cancelled');
        else if (failed) this.#end(job, 'failed', failed);
        else this.#end(job, 'done');
      } finally {
        opened.lease.release();
      }
    } catch (error) {
      if (signal.aborted) {
        this.#end(job, 'cancelled');
        return;
      }
      const failure = (jobFailure(error) ?? errors.internal());
      this.#end(job, 'failed', { code: failure.code, message: failure.message });
    }
  }
}
