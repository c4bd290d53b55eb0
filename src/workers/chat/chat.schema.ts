// Spec 4.2: the chat completion request, strict. Every field of OpenAI's
// CreateChatCompletionRequest is known and has its fate (CHAT_FIELDS): the ordinary
// messages (text content only: there is no vision input), tools and tool_choice, response_format,
// the sampling overrides, stop, seed, the token limits, stream and stream_options and
// reasoning_effort are honoured or passed to llama-server; identifiers, cache and tier hints,
// verbosity and predicted output are accepted and ignored; audio output, web search, moderation
// and the deprecated functions are refused with a 400 that says so. Any other field is an unknown
// extension field and is rejected with 400 unknown_parameter (spec 4.2, 7). `null` counts as not
// set, as in OpenAI's schema. The extension sampling fields top_k, min_p and repeat_penalty are
// accepted because the profile's sampling defaults name them.
import { z } from 'zod';
import type { ChatParams } from '../../store/profile.schema.js';
import { notOffered, refusedField, type FieldFates } from '../fields.js';
import { boundedJsonSchema } from './grammarCost.js';

const onlyText = "only text content parts ({ type: 'text', text }) are accepted: this endpoint has no vision, audio or file input";
const textPart = z.strictObject({ type: z.literal('text', onlyText), text: z.string() });
const content = z.union([z.string(), z.array(textPart)]);

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * A tool call's arguments, any string, as OpenAI takes them: a call that the token limit cut off
 * (finish_reason "length") has arguments that are not JSON, and OpenAI's guide and LangChain send
 * the whole answer back. The worker gets a JSON text instead (workerArguments).
 */
export const toolArguments = z.string();

/** The key under which arguments that are not JSON reach the worker (workerArguments). */
export const UNPARSED_ARGUMENTS = 'unparsed_arguments';

/**
 * The arguments the worker gets for a call sent back. llama-server parses a call's arguments as
 * JSON before it renders them into the prompt whenever the model's chat template reads them as an
 * object (`arguments | items`, `arguments.city`: common/chat.cpp, func_args_not_string), and answers
 * 500 "Failed to parse tool call arguments as JSON" to anything else. So arguments that are not
 * JSON (a call cut by the token limit) go as an object holding their text, which every template
 * renders, as an object or through `tojson`, and the model still sees what it wrote; empty
 * arguments (a call without parameters) go as `{}`. JSON arguments go as they are.
 */
export function workerArguments(text: string): string {
  if (text.trim() === '') return '{}';
  return isJson(text) ? text : JSON.stringify({ [UNPARSED_ARGUMENTS]: text });
}

const toolCall = z.strictObject({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.strictObject({ name: z.string().min(1), arguments: toolArguments }),
});

const message = z.discriminatedUnion('role', [
  z.strictObject({ role: z.literal('system'), content, name: z.string().optional() }),
  z.strictObject({ role: z.literal('developer'), content, name: z.string().optional() }),
  z.strictObject({ role: z.literal('user'), content, name: z.string().optional() }),
  z.strictObject({
    role: z.literal('assistant'),
    content: content.nullish(),
    name: z.string().optional(),
    refusal: z.string().nullish(),
    tool_calls: z.array(toolCall).optional(),
  }),
  // `name` on a tool message is not in OpenAI's schema, but OpenAI's API takes it, and LangChain
  // sends it on every tool result (ToolMessage.name). llama-server hands it to the chat template
  // as the message's `name`, as for every other role.
  z.strictObject({ role: z.literal('tool'), content, tool_call_id: z.string().min(1), name: z.string().optional() }),
]);

export const functionName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a function name: letters, digits, _ and -, at most 64');

const tool = z.strictObject({
  type: z.literal('function'),
  function: z.strictObject({
    name: functionName,
    description: z.string().optional(),
    parameters: boundedJsonSchema.optional(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: functionName }) }),
]);

export const schemaName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'a schema name: letters, digits, _ and -, at most 64');

const responseFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    json_schema: z.strictObject({
      name: schemaName,
      description: z.string().optional(),
      schema: boundedJsonSchema.optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

/** Spec 4.2: passed to the worker unchanged; `ultra` is mapped to `max`. */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/** `ultra` is this endpoint's own name for the highest effort (`max` for the worker). */
export const reasoningEffort = z.enum([...REASONING_EFFORTS, 'ultra']);

export const maxTokens = z.number().int().min(1).max(1_048_576).nullish();

/** Both doors (chat completions, the Responses API): `stream_options` only with `stream: true`. */
export const streamOptionsOnlyWhenStreaming = (r: { stream_options?: unknown; stream?: boolean | null }): boolean => r.stream_options == null || r.stream === true;
export const STREAM_OPTIONS_ISSUE = { path: ['stream_options'], message: 'stream_options is only allowed when stream is true' };

export const chatRequestSchema = z.strictObject({
  model: z.string().min(1),
  messages: z.array(message).min(1, 'at least one message'),
  // Sampling overrides (OpenAI's, and the profile's sampling names).
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  top_k: z.number().int().min(0).max(1000).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  repeat_penalty: z.number().min(0).max(5).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: z.record(z.string().regex(/^\d+$/, 'a token id'), z.number().min(-100).max(100)).nullish(),
  seed: z.number().int().nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  max_tokens: maxTokens,
  max_completion_tokens: maxTokens,
  n: z.literal(1, 'only n = 1 is supported').nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  // Output shape.
  tools: z.array(tool).max(128).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: responseFormat.nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.strictObject({ include_usage: z.boolean().optional(), include_obfuscation: z.boolean().optional() }).nullish(),
  reasoning_effort: reasoningEffort.nullish(),
  // Text is the only output: audio output is refused.
  modalities: z
    .array(z.enum(['text', 'audio']))
    .refine((kinds) => !kinds.includes('audio'), notOffered('audio output (modalities "audio")', 'the answer is text'))
    .nullish(),
  // Accepted and not passed on: nothing is stored, and the ids, hints and tiers are only the client's.
  user: z.string().max(256).nullish(),
  store: z.literal(false, 'nothing is stored: store must be false or absent').nullish(),
  metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  safety_identifier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().max(1024).nullish(),
  prompt_cache_retention: z.enum(['in_memory', '24h']).nullish(),
  prompt_cache_options: z.strictObject({ ttl: z.enum(['30m']).optional(), mode: z.enum(['implicit', 'explicit']).optional() }).nullish(),
  service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority', 'fast']).nullish(),
  verbosity: z.enum(['low', 'medium', 'high']).nullish(),
  prediction: z.strictObject({ type: z.literal('content'), content }).nullish(),
  // Refused whatever their value (null aside).
  audio: refusedField('audio', 'the answer is text; there is no audio output'),
  web_search_options: refusedField('web_search_options', 'the model has no web search'),
  moderation: refusedField('moderation', 'nothing moderates the request or the answer'),
  functions: refusedField('functions', 'send tools (the deprecated functions are not translated)'),
  function_call: refusedField('function_call', 'send tool_choice (the deprecated function_call is not translated)'),
}).refine(streamOptionsOnlyWhenStreaming, STREAM_OPTIONS_ISSUE);

export type ChatRequest = z.output<typeof chatRequestSchema>;

/**
 * The fate of every field of OpenAI's CreateChatCompletionRequest (fields.ts). Ignoring is
 * harmless for each `ignored` one: identifiers and metadata (nothing is stored, nothing is
 * moderated), prompt cache hints (llama-server keeps each slot's prompt cache itself), the
 * service tier (one FIFO queue serves every request), verbosity (a length hint; max_tokens and
 * the prompt decide), and a predicted output (it only speeds an answer up, never changes it).
 */
export const CHAT_FIELDS = {
  model: 'honoured',
  messages: 'passed',
  temperature: 'passed',
  top_p: 'passed',
  frequency_penalty: 'passed',
  presence_penalty: 'passed',
  logit_bias: 'passed',
  seed: 'passed',
  stop: 'passed',
  logprobs: 'passed',
  top_logprobs: 'passed',
  tools: 'passed',
  tool_choice: 'passed',
  parallel_tool_calls: 'passed',
  response_format: 'passed',
  max_tokens: 'honoured',
  max_completion_tokens: 'honoured',
  n: 'honoured',
  stream: 'honoured',
  stream_options: 'honoured',
  reasoning_effort: 'honoured',
  modalities: 'honoured',
  store: 'honoured',
  user: 'ignored',
  metadata: 'ignored',
  safety_identifier: 'ignored',
  prompt_cache_key: 'ignored',
  prompt_cache_retention: 'ignored',
  prompt_cache_options: 'ignored',
  service_tier: 'ignored',
  verbosity: 'ignored',
  prediction: 'ignored',
  audio: 'refused',
  web_search_options: 'refused',
  moderation: 'refused',
  functions: 'refused',
  function_call: 'refused',
} as const satisfies FieldFates;

/** The extension fields the schema takes beyond OpenAI's: the profile's sampling names, passed on. */
export const CHAT_EXTENSIONS = ['top_k', 'min_p', 'repeat_penalty'] as const;

/** The effort the worker gets (spec 4.2), or null when the request set none. */
export function effectiveEffort(requested: ChatRequest['reasoning_effort']): ReasoningEffort | null {
  if (requested === undefined || requested === null) return null;
  return requested === 'ultra' ? 'max' : requested;
}

type Message = ChatRequest['messages'][number];

/** A message as the worker gets it: an assistant's calls with their arguments as JSON (workerArguments). */
function workerMessage(message: Message): Message {
  if (message.role !== 'assistant' || !message.tool_calls) return message;
  const toolCalls = message.tool_calls.map((call) => ({ ...call, function: { ...call.function, arguments: workerArguments(call.function.arguments) } }));
  return { ...message, tool_calls: toolCalls };
}

const PASSED_ON = [
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'repeat_penalty',
  'frequency_penalty',
  'presence_penalty',
  'logit_bias',
  'seed',
  'stop',
  'logprobs',
  'top_logprobs',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
] as const;

/**
 * The body the worker gets: the request's messages (the arguments of calls sent back as JSON:
 * workerMessage), its own fields (nulls dropped), the profile's sampling
 * defaults where the request leaves a value out, the profile name as `model`, `max_tokens` for
 * either token limit, and the effective reasoning effort. `includeUsage` asks for the usage
 * chunk at the end of a stream (the chat test always wants it).
 */
export function upstreamBody(request: ChatRequest, profile: { name: string; params: ChatParams }, options: { includeUsage?: boolean } = {}): Record<string, unknown> {
  const body: Record<string, unknown> = { model: profile.name, messages: request.messages.map(workerMessage) };
  for (const key of PASSED_ON) {
    const value = request[key];
    if (value !== undefined && value !== null) body[key] = value;
  }
  const sampling = profile.params.sampling;
  for (const key of ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty'] as const) {
    if (body[key] === undefined && sampling[key] !== undefined) body[key] = sampling[key];
  }
  const limit = request.max_completion_tokens ?? request.max_tokens ?? sampling.max_tokens;
  if (limit !== undefined) body.max_tokens = limit;
  const effort = effectiveEffort(request.reasoning_effort);
  if (effort !== null) body.reasoning_effort = effort;
  if (request.stream === true) {
    body.stream = true;
    const includeUsage = options.includeUsage === true || request.stream_options?.include_usage === true;
    if (includeUsage) body.stream_options = { include_usage: true };
  }
  return body;
}
