// OpenAI's Responses API as a second door to the chat worker. A Responses request becomes a chat
// completion request (chatRequestOf: `instructions` and `input` become messages, function_call and
// function_call_output items the assistant's tool calls and the tool messages, `text.format` the
// response_format), which goes the chat completion way: the same queue, reservation, limits,
// abort-on-leave and metrics (src/routes/inference/chat.ts, chatRequest.ts). The worker's answer
// comes back as OpenAI's `Response` (ResponseAnswer): a buffered chat completion as one Response
// object, a stream event by event as it comes, never buffered, as ResponseStreamEvents with their
// sequence numbers, output and content indexes and item ids, ending with `response.completed`,
// `response.incomplete` (the token limit) or `response.failed`. A failed stream's error is the
// service's own (the relay's error event, chatRequest.ts), never the worker's text.
import { randomUUID } from 'node:crypto';
import { errors } from '../../errors.js';
import { effectiveEffort, type ChatRequest } from './chat.schema.js';
import { LOGPROBS, type ContentPart, type ResponsesRequest } from './responses.schema.js';
import { EVENT_LIMIT, SseReader } from './sse.js';

type ChatMessage = ChatRequest['messages'][number];
type Json = Record<string, unknown>;

/** The text of a content part (the schema refuses every part without one). */
const textOf = (part: ContentPart): string => ('text' in part && typeof part.text === 'string' ? part.text : 'refusal' in part && typeof part.refusal === 'string' ? part.refusal : '');

const partsOf = (content: string | ContentPart[]) => (typeof content === 'string' ? content : content.map((part) => ({ type: 'text' as const, text: textOf(part) })));

/** The conversation as chat messages: the instructions first, then each item in order. */
function messagesOf(request: ResponsesRequest): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (request.instructions) messages.push({ role: 'system', content: request.instructions });
  if (typeof request.input === 'string') {
    messages.push({ role: 'user', content: request.input });
    return messages;
  }
  for (const item of request.input) {
    switch (item.type) {
      case undefined:
      case 'message':
        messages.push({ role: item.role, content: partsOf(item.content) });
        break;
      case 'function_call': {
        // The calls of one answer, with its text before them, are one assistant message.
        const call = { id: item.call_id, type: 'function' as const, function: { name: item.name, arguments: item.arguments } };
        const last = messages.at(-1);
        if (last?.role === 'assistant') (last.tool_calls ??= []).push(call);
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        break;
      }
      case 'function_call_output':
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: partsOf(item.output) });
        break;
      default:
        // Reasoning items: chat templates leave an earlier answer's reasoning out. (The schema refused every other kind.)
        break;
    }
  }
  return messages;
}

function toolsOf(request: ResponsesRequest): ChatRequest['tools'] {
  const choice = request.tool_choice;
  const allowed = typeof choice === 'object' && choice?.type === 'allowed_tools' ? new Set(choice.tools.map((t) => t.name)) : undefined;
  const tools = (request.tools ?? []).flatMap((tool) =>
    tool.type === 'function' && (!allowed || allowed.has(tool.name))
      ? [{ type: 'function' as const, function: { name: tool.name, description: tool.description ?? undefined, parameters: tool.parameters ?? undefined, strict: tool.strict } }]
      : [],
  );
  return tools.length > 0 ? tools : undefined;
}

function toolChoiceOf(choice: ResponsesRequest['tool_choice']): ChatRequest['tool_choice'] {
  if (choice === undefined || choice === null || typeof choice === 'string') return choice;
  if (choice.type === 'function') return { type: 'function', function: { name: choice.name } };
  if (choice.type === 'allowed_tools') return choice.mode;
  return undefined;
}

function formatOf(format: NonNullable<ResponsesRequest['text']>['format']): ChatRequest['response_format'] {
  if (format?.type !== 'json_schema') return format;
  const { name, description, schema, strict } = format;
  return { type: 'json_schema', json_schema: { name, description, schema, strict } };
}

/** The chat completion request a Responses request stands for (chat.schema.ts's upstreamBody makes the worker's body of it). */
export function chatRequestOf(request: ResponsesRequest): ChatRequest {
  const logprobs = request.include?.includes(LOGPROBS) === true;
  return {
    model: request.model,
    messages: messagesOf(request),
    temperature: request.temperature,
    top_p: request.top_p,
    logprobs: logprobs ? true : undefined,
    top_logprobs: request.top_logprobs,
    max_completion_tokens: request.max_output_tokens,
    tools: toolsOf(request),
    tool_choice: toolChoiceOf(request.tool_choice),
    parallel_tool_calls: request.parallel_tool_calls,
    response_format: formatOf(request.text?.format),
    reasoning_effort: request.reasoning?.effort,
    stream: request.stream,
  };
}

/** What the worker's chat completions and chunks hold that the Responses door reads. */
interface ChatLogprob {
  token: string;
  logprob: number;
  bytes?: number[] | null;
  top_logprobs?: Array<{ token: string; logprob: number; bytes?: number[] | null }>;
}
interface ChatToolCall {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}
interface ChatDelta {
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: ChatToolCall[];
}
interface ChatChoice {
  delta?: ChatDelta;
  message?: ChatDelta;
  finish_reason?: string | null;
  logprobs?: { content?: ChatLogprob[] | null } | null;
}
interface ChatUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}
interface ChatAnswer {
  choices?: ChatChoice[];
  usage?: ChatUsage | null;
  error?: { message?: string; type?: string } | null;
}

function usageOf(usage: ChatUsage): Json {
  const input = usage.prompt_tokens ?? 0;
  const output = usage.completion_tokens ?? 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0, cache_write_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.total_tokens ?? input + output,
  };
}

/** The worker's logprobs as OpenAI's LogProb (the bytes llama-server leaves out are empty). */
const logprobOf = (entry: ChatLogprob): Json => ({
  token: entry.token,
  logprob: entry.logprob,
  bytes: entry.bytes ?? [],
  top_logprobs: (entry.top_logprobs ?? []).map((top) => ({ token: top.token, logprob: top.logprob, bytes: top.bytes ?? [] })),
});

/** Why an answer of another shape than a chat completion's ends (never the worker's text). */
const UNREADABLE = "The chat worker's answer has a shape this door cannot read as a chat completion; the answer was ended.";

/** The classes of the service's error body as OpenAI's ResponseErrorCode. */
const ERROR_CODES: Readonly<Record<string, string>> = { server_error: 'server_error', rate_limit_error: 'rate_limit_exceeded' };

type Kind = 'message' | 'reasoning' | 'function_call';
const PREFIX: Readonly<Record<Kind, string>> = { message: 'msg', reasoning: 'rs', function_call: 'fc' };

/** The id of the Response whose output holds the item `itemId` (`msg_<hex>_<index>` is an item of `resp_<hex>`), if it is one of ours. */
export function responseIdOfItem(itemId: string): string | undefined {
  const hex = /^(?:msg|rs|fc)_([0-9a-f]{32})_\d+$/.exec(itemId)?.[1];
  return hex === undefined ? undefined : `resp_${hex}`;
}

/** How a Response is kept once it ends (responseMemory.ts): `store` is what the Response says. */
export interface Keeping {
  store: boolean;
  /** The Response once it ended: completed, incomplete or failed. */
  onEnd?: (response: Readonly<Record<string, unknown>>) => void;
}
/** What ends an answer early, as OpenAI's incomplete_details.reason. */
const INCOMPLETE: Readonly<Record<string, string>> = { length: 'max_output_tokens', content_filter: 'content_filter' };

interface Open {
  kind: Kind;
  index: number;
  item: Json;
  /** The message's output_text or the reasoning's reasoning_text part. */
  part?: Json & { text: string };
  /** Its done events went out. */
  done?: boolean;
}

/**
 * One Response as it is made from the worker's answer: the Response object (`response`), its
 * output items in order, and the stream events that made them, numbered. A stream feeds it the
 * worker's SSE chunks (`chunk`, then `end`), which come back as this door's SSE text; a buffered
 * answer is one chat completion (`completion`), the whole answer as one delta.
 */
export class ResponseAnswer {
  readonly response: Json;
  readonly #hex = randomUUID().replaceAll('-', '');
  readonly #output: Json[] = [];
  /**
   * The function calls by the chat tool call's index. They stay open until the answer ends: the
   * worker may add to a call's arguments after another call began, and no delta may follow a
   * call's done.
   */
  readonly #calls = new Map<number, Open>();
  readonly #events: Json[] = [];
  readonly #reader = new SseReader((data) => this.#read(data), {
    onOverflow: () => this.#fail('server_error', `An event of the chat worker's stream is larger than ${EVENT_LIMIT / 1024 / 1024} MiB; the answer was ended.`),
  });
  /** The open message or reasoning item. */
  #open: Open | undefined;
  #finish: string | undefined;
  #sequence = 0;
  #state: 'new' | 'running' | 'over' = 'new';
  readonly #onEnd: Keeping['onEnd'];

  constructor(request: ResponsesRequest, model: string, upstream: Readonly<Record<string, unknown>>, keeping: Keeping = { store: false }) {
    this.#onEnd = keeping.onEnd;
    const number = (value: unknown) => (typeof value === 'number' ? value : null);
    this.response = {
      id: `resp_${this.#hex}`,
      object: 'response',
      created_at: Math.floor(Date.now() / 1000),
      status: 'in_progress',
      background: false,
      completed_at: null,
      error: null,
      incomplete_details: null,
      instructions: request.instructions ?? null,
      max_output_tokens: number(upstream.max_tokens),
      max_tool_calls: request.max_tool_calls ?? null,
      model,
      output: this.#output,
      parallel_tool_calls: request.parallel_tool_calls ?? true,
      previous_response_id: request.previous_response_id ?? null,
      prompt_cache_key: request.prompt_cache_key ?? null,
      reasoning: { effort: effectiveEffort(request.reasoning?.effort), summary: null },
      safety_identifier: request.safety_identifier ?? null,
      store: keeping.store,
      temperature: number(upstream.temperature),
      text: { format: request.text?.format ?? { type: 'text' }, verbosity: request.text?.verbosity ?? 'medium' },
      tool_choice: request.tool_choice ?? 'auto',
      tools: (request.tools ?? []).map((tool) => ({ ...tool, parameters: tool.parameters ?? null, strict: tool.strict ?? null })),
      top_logprobs: request.top_logprobs ?? 0,
      top_p: number(upstream.top_p),
      truncation: 'disabled',
      ...(request.user ? { user: request.user } : {}),
      metadata: request.metadata ?? {},
    };
  }

  /** Whether the answer failed (the worker's stream is no longer read: its worker may stop). */
  get failed(): boolean {
    return this.response.status === 'failed';
  }

  /** A buffered chat completion as the Response's JSON. */
  completion(body: Buffer): Buffer {
    let answer: ChatAnswer;
    try {
      answer = JSON.parse(body.toString('utf8')) as ChatAnswer;
    } catch {
      throw errors.workerFailed("The chat worker's answer is not JSON.");
    }
    const choice = answer.choices?.[0];
    if (!choice) throw errors.workerFailed("The chat worker's answer holds no choice.");
    try {
      const message = choice.message ?? {};
      this.#apply({ ...message, tool_calls: message.tool_calls?.map((call, index) => ({ ...call, index })) }, choice, answer.usage);
    } catch {
      throw errors.workerFailed(UNREADABLE);
    }
    this.#end();
    this.#events.length = 0;
    return Buffer.from(JSON.stringify(this.response));
  }

  /** Whole SSE events of the worker's stream (chat.completion.chunk), as this door's events. */
  chunk(events: Buffer): string {
    this.#reader.push(events);
    return this.#sse();
  }

  /** The stream's last events, once the worker's stream is over. */
  end(): string {
    if (this.#state !== 'over') this.#end();
    return this.#sse();
  }

  #read(data: string): void {
    if (this.#state === 'over' || data === '[DONE]') return;
    let chunk: ChatAnswer;
    try {
      chunk = JSON.parse(data) as ChatAnswer;
    } catch {
      return;
    }
    try {
      // The relay's own error event (the worker's error, a limit, a dead worker): the answer failed.
      if (chunk.error) {
        this.#fail(ERROR_CODES[chunk.error.type ?? ''] ?? 'invalid_prompt', chunk.error.message ?? 'The chat worker failed.');
        return;
      }
      const choice = chunk.choices?.[0];
      this.#apply(choice?.delta ?? {}, choice, chunk.usage);
    } catch {
      // A chunk of another shape than a chat completion chunk's (a tool_calls that is no list, …).
      this.#fail('server_error', UNREADABLE);
    }
  }

  #apply(delta: ChatDelta, choice: ChatChoice | undefined, usage: ChatUsage | null | undefined): void {
    this.#start();
    if (delta.reasoning_content) this.#append(this.#item('reasoning'), delta.reasoning_content, 'response.reasoning_text.delta');
    if (delta.content) this.#append(this.#item('message'), delta.content, 'response.output_text.delta', choice?.logprobs?.content ?? undefined);
    for (const call of delta.tool_calls ?? []) this.#call(call);
    if (choice?.finish_reason) this.#finish = choice.finish_reason;
    if (usage) this.response.usage = usageOf(usage);
  }

  #emit(event: Json): void {
    event.sequence_number = this.#sequence++;
    this.#events.push(event);
  }

  #sse(): string {
    let text = '';
    for (const event of this.#events) text += `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;
    this.#events.length = 0;
    return text;
  }

  #start(): void {
    if (this.#state !== 'new') return;
    this.#state = 'running';
    this.#emit({ type: 'response.created', response: { ...this.response, output: [] } });
    this.#emit({ type: 'response.in_progress', response: { ...this.response, output: [] } });
  }

  /** The open message or reasoning item, or a new one after the open one is done. */
  #item(kind: Exclude<Kind, 'function_call'>): Open {
    if (this.#open?.kind === kind) return this.#open;
    this.#closeText();
    const opened = this.#added(kind, (id) => {
      const part = kind === 'message' ? { type: 'output_text', text: '', annotations: [], logprobs: [] } : { type: 'reasoning_text', text: '' };
      const item = kind === 'message' ? { type: 'message', id, role: 'assistant', status: 'in_progress', content: [part] } : { type: 'reasoning', id, summary: [], content: [part], status: 'in_progress' };
      return { item, part };
    });
    this.#open = opened;
    return opened;
  }

  /** A new output item, announced. */
  #added(kind: Kind, make: (id: string, index: number) => { item: Json; part?: Json & { text: string } }): Open {
    const index = this.#output.length;
    const id = `${PREFIX[kind]}_${this.#hex}_${index}`;
    const { item, part } = make(id, index);
    const opened: Open = { kind, index, item, ...(part ? { part } : {}) };
    this.#output.push(item);
    this.#emit({ type: 'response.output_item.added', output_index: index, item: part ? { ...item, content: [] } : { ...item } });
    if (part) this.#emit({ type: 'response.content_part.added', item_id: id, output_index: index, content_index: 0, part: { ...part } });
    return opened;
  }

  #append(open: Open, delta: string, type: string, logprobs?: ChatLogprob[]): void {
    const part = open.part!;
    part.text += delta;
    const event: Json = { type, item_id: open.item.id, output_index: open.index, content_index: 0, delta };
    if (open.kind === 'message') {
      const added = (logprobs ?? []).map(logprobOf);
      (part.logprobs as Json[]).push(...added);
      event.logprobs = added;
    }
    this.#emit(event);
  }

  #call(call: ChatToolCall): void {
    const key = call.index ?? this.#calls.size;
    let open = this.#calls.get(key);
    if (!open) {
      // A call ends the text before it.
      this.#closeText();
      open = this.#added('function_call', (id, index) => ({
        item: { type: 'function_call', id, call_id: call.id ?? `call_${this.#hex}_${index}`, name: call.function?.name ?? '', arguments: '', status: 'in_progress' },
      }));
      this.#calls.set(key, open);
    }
    const delta = call.function?.arguments ?? '';
    if (delta === '') return;
    open.item.arguments = `${String(open.item.arguments)}${delta}`;
    this.#emit({ type: 'response.function_call_arguments.delta', item_id: open.item.id, output_index: open.index, delta });
  }

  /** The open message or reasoning item is done. */
  #closeText(): void {
    if (this.#open) this.#close(this.#open, 'completed');
    this.#open = undefined;
  }

  /** Every item not yet done, in output order. */
  #pending(): Open[] {
    return [...(this.#open ? [this.#open] : []), ...this.#calls.values()].filter((open) => !open.done).sort((a, b) => a.index - b.index);
  }

  /** An item is done: its text or arguments whole, then the item. */
  #close(open: Open, status: 'completed' | 'incomplete'): void {
    open.done = true;
    const { item, index, part } = open;
    const at = { item_id: item.id, output_index: index };
    if (open.kind === 'function_call') {
      this.#emit({ type: 'response.function_call_arguments.done', ...at, name: item.name, arguments: item.arguments });
    } else if (part) {
      const message = open.kind === 'message';
      this.#emit({ type: message ? 'response.output_text.done' : 'response.reasoning_text.done', ...at, content_index: 0, text: part.text, ...(message ? { logprobs: part.logprobs } : {}) });
      this.#emit({ type: 'response.content_part.done', ...at, content_index: 0, part: { ...part } });
    }
    item.status = status;
    this.#emit({ type: 'response.output_item.done', output_index: index, item: { ...item } });
  }

  /** The worker's answer is over: completed, or incomplete when the token limit ended it. */
  #end(): void {
    this.#start();
    if (this.#finish === undefined) {
      this.#fail('server_error', "The chat worker's answer ended before it was complete.");
      return;
    }
    const reason = INCOMPLETE[this.#finish];
    // The last item the limit cut is incomplete; the ones before it are whole.
    const pending = this.#pending();
    pending.forEach((open, i) => this.#close(open, reason && i === pending.length - 1 ? 'incomplete' : 'completed'));
    this.#open = undefined;
    this.#state = 'over';
    this.response.status = reason ? 'incomplete' : 'completed';
    this.response.incomplete_details = reason ? { reason } : null;
    this.response.completed_at = reason ? null : Math.floor(Date.now() / 1000);
    this.#emit({ type: reason ? 'response.incomplete' : 'response.completed', response: this.response });
    this.#onEnd?.(this.response);
  }

  #fail(code: string, message: string): void {
    if (this.#state === 'over') return;
    this.#start();
    for (const open of this.#pending()) open.item.status = 'incomplete';
    this.#open = undefined;
    this.#state = 'over';
    this.response.status = 'failed';
    this.response.error = { code, message };
    this.#emit({ type: 'response.failed', response: this.response });
    this.#onEnd?.(this.response);
  }
}
