// OpenAI's Responses API request (`POST /v1/responses`, OpenAI's CreateResponse), strict, on the
// chat profiles: a second door to the chat worker beside chat completions. Every field of
// CreateResponse is known and has its fate (RESPONSES_FIELDS): the conversation (`input` as text
// or items, `instructions`), function tools and their round trip, the structured output, the
// sampling overrides, the token limit, the reasoning effort and the stream are honoured or passed
// to llama-server (as a chat completion request: responses.ts); identifiers, cache and tier hints
// are accepted and ignored. Recent answers are kept in memory for a while (`store`, on unless
// `false`; responseMemory.ts), so `previous_response_id` and `item_reference` items name them; what
// needs state the service does not keep (`conversation`, stored prompts, background answers,
// compaction) and OpenAI's built-in tools (web search, file search, computer use, MCP, …) are
// refused with a 400 that names the field and says why. Any other field is an unknown extension field (400
// unknown_parameter). `null` counts as not set, as in OpenAI's schema.
import { z } from 'zod';
import { notOffered, refusedField, type FieldFates } from '../fields.js';
import { boundedJsonSchema } from './grammarCost.js';
import { functionName, maxTokens, reasoningEffort, schemaName, STREAM_OPTIONS_ISSUE, streamOptionsOnlyWhenStreaming, toolArguments } from './chat.schema.js';

/** Why whatever needs more than the recent responses kept in memory is refused. */
const NO_CONVERSATIONS =
  'the service keeps no conversation objects, only recent responses for a while: name the last one in previous_response_id, or send the whole conversation in input';

/** An object of one of `types` whose every value is refused with `what` and `why`, naming its `type`. */
function refusedKinds<const T extends readonly [string, ...string[]]>(types: T, what: (type: string) => string, why: string) {
  return z.looseObject({ type: z.enum(types) }).refine(() => false, {
    path: ['type'],
    error: (issue) => notOffered(what(String((issue.input as { type?: unknown }).type)), why),
  });
}

const TEXT_ONLY = 'the chat profiles read text only: there is no vision or file input';
const inputText = z.strictObject({
  type: z.literal('input_text'),
  text: z.string(),
  prompt_cache_breakpoint: z.strictObject({ mode: z.literal('explicit') }).nullish(),
});
const otherInput = refusedKinds(['input_image', 'input_file'], (type) => `${type} content`, TEXT_ONLY);

/** A message's content parts: text as the user wrote it or as an earlier answer gave it. */
const contentPart = z.discriminatedUnion('type', [
  inputText,
  z.strictObject({ type: z.literal('output_text'), text: z.string(), annotations: z.array(z.unknown()).optional(), logprobs: z.array(z.unknown()).optional() }),
  z.strictObject({ type: z.literal('refusal'), refusal: z.string() }),
  otherInput,
]);

const itemStatus = z.enum(['in_progress', 'completed', 'incomplete']);

/** OpenAI's EasyInputMessage, InputMessage and OutputMessage in one: a message of any role. */
const messageItem = z.strictObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(contentPart)]),
  id: z.string().optional(),
  status: itemStatus.optional(),
  phase: z.enum(['commentary', 'final_answer']).nullish(),
});

/** A function call an earlier answer made (FunctionToolCall). */
const functionCallItem = z.strictObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: toolArguments,
  id: z.string().optional(),
  status: itemStatus.optional(),
});

/** The result of a function call, sent back by the client (FunctionCallOutputItemParam). */
const functionCallOutputItem = z.strictObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1).max(64),
  output: z.union([z.string(), z.array(z.discriminatedUnion('type', [inputText, otherInput]))]),
  id: z.string().nullish(),
  status: itemStatus.nullish(),
});

/** Reasoning an earlier answer showed: accepted and left out of the worker's conversation, as chat templates leave earlier reasoning out. */
const reasoningItem = z.strictObject({
  type: z.literal('reasoning'),
  id: z.string().optional(),
  summary: z.array(z.strictObject({ type: z.literal('summary_text'), text: z.string() })),
  content: z.array(z.strictObject({ type: z.literal('reasoning_text'), text: z.string() })).optional(),
  encrypted_content: z.string().nullish(),
  status: itemStatus.optional(),
});

/** The input item types of OpenAI's built-in tools and of its server-side state. */
export const BUILT_IN_ITEMS = [
  'file_search_call',
  'computer_call',
  'computer_call_output',
  'web_search_call',
  'image_generation_call',
  'code_interpreter_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'mcp_list_tools',
  'mcp_approval_request',
  'mcp_approval_response',
  'mcp_call',
  'custom_tool_call',
  'custom_tool_call_output',
  'tool_search_call',
  'tool_search_output',
  'additional_tools',
  'program',
  'program_output',
] as const;
const BUILT_IN_TOOLS_WHY = 'only function tools are offered: OpenAI\'s built-in tools (web search, file search, computer use, MCP, code interpreter, image generation, shells, patches, tool search, custom tools) do not run here; declare a function tool and run it yourself';

export const inputItem = z.discriminatedUnion('type', [
  messageItem,
  functionCallItem,
  functionCallOutputItem,
  reasoningItem,
  // An item of a kept response, by its id (responseMemory.ts puts the item in its place).
  z.strictObject({ type: z.literal('item_reference'), id: z.string().min(1) }),
  refusedKinds(['compaction', 'compaction_trigger'], (type) => `a ${type} item`, 'the service keeps no conversation to compact'),
  refusedKinds(BUILT_IN_ITEMS, (type) => `a ${type} item`, BUILT_IN_TOOLS_WHY),
]);

export type InputItem = z.output<typeof inputItem>;
export type ContentPart = z.output<typeof contentPart>;

const functionTool = z.strictObject({
  type: z.literal('function'),
  name: functionName,
  description: z.string().nullish(),
  parameters: boundedJsonSchema.nullish(),
  strict: z.boolean().nullish(),
  // Describes what the function returns; nothing here reads it.
  output_schema: z.record(z.string(), z.unknown()).nullish(),
  defer_loading: z.literal(false, notOffered('defer_loading: true', 'there is no tool search: every tool is in the prompt')).optional(),
  allowed_callers: refusedField('allowed_callers', 'there is no programmatic tool calling: the model calls the function, the client runs it'),
});

/** OpenAI's Tool types but `function`. */
export const BUILT_IN_TOOLS = [
  'file_search',
  'computer',
  'computer_use_preview',
  'web_search',
  'web_search_2025_08_26',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'mcp',
  'code_interpreter',
  'programmatic_tool_calling',
  'image_generation',
  'local_shell',
  'shell',
  'custom',
  'namespace',
  'tool_search',
  'apply_patch',
] as const;

const tool = z.discriminatedUnion('type', [functionTool, refusedKinds(BUILT_IN_TOOLS, (type) => `the ${type} tool`, BUILT_IN_TOOLS_WHY)]);

/** OpenAI's ToolChoiceParam types but the options, `function` and `allowed_tools`. */
export const BUILT_IN_CHOICES = [
  'file_search',
  'web_search_preview',
  'computer',
  'computer_use_preview',
  'computer_use',
  'web_search_preview_2025_03_11',
  'image_generation',
  'code_interpreter',
  'mcp',
  'custom',
  'programmatic_tool_calling',
  'apply_patch',
  'shell',
] as const;

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.discriminatedUnion('type', [
    z.strictObject({ type: z.literal('function'), name: functionName }),
    z.strictObject({
      type: z.literal('allowed_tools'),
      mode: z.enum(['auto', 'required']),
      tools: z.array(z.strictObject({ type: z.literal('function'), name: functionName })).min(1),
    }),
    refusedKinds(BUILT_IN_CHOICES, (type) => `tool_choice of type ${type}`, BUILT_IN_TOOLS_WHY),
  ]),
]);

const textFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    name: schemaName,
    description: z.string().optional(),
    schema: boundedJsonSchema,
    strict: z.boolean().nullish(),
  }),
]);

const summary = z.enum(['auto', 'concise', 'detailed']);

/** OpenAI's IncludeEnum: only the logprobs are output this endpoint makes. */
export const INCLUDE = [
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
  'reasoning.encrypted_content',
  'message.output_text.logprobs',
] as const;
export const LOGPROBS = 'message.output_text.logprobs';

export const responsesRequestSchema = z
  .strictObject({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(inputItem).min(1, 'at least one input item')]),
    instructions: z.string().nullish(),
    // Sampling overrides.
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    top_logprobs: z.number().int().min(0).max(20).nullish(),
    include: z.array(z.enum(INCLUDE)).nullish(),
    max_output_tokens: maxTokens,
    // Output shape.
    tools: z.array(tool).max(128).nullish(),
    tool_choice: toolChoice.nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    text: z.strictObject({ format: textFormat.optional(), verbosity: z.enum(['low', 'medium', 'high']).nullish() }).nullish(),
    reasoning: z
      .strictObject({ effort: reasoningEffort.nullish(), summary: summary.nullish(), generate_summary: summary.nullish(), mode: z.string().nullish(), context: z.enum(['auto', 'current_turn', 'all_turns']).nullish() })
      .nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.strictObject({ include_obfuscation: z.boolean().optional() }).nullish(),
    truncation: z.literal('disabled', notOffered("truncation 'auto'", 'no input is dropped to fit the context: a request that does not fit is a 400 context_length_exceeded')).nullish(),
    // Kept in memory for a while unless false (responseMemory.ts); named later by previous_response_id or item_reference.
    store: z.boolean().nullish(),
    previous_response_id: z.string().min(1).nullish(),
    background: z.literal(false, notOffered('background: true', 'nothing is kept to be fetched later: stream the answer instead')).nullish(),
    // Accepted and not passed on.
    metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
    user: z.string().max(256).nullish(),
    safety_identifier: z.string().max(64).nullish(),
    prompt_cache_key: z.string().max(1024).nullish(),
    prompt_cache_retention: z.enum(['in_memory', '24h']).nullish(),
    prompt_cache_options: z.strictObject({ ttl: z.enum(['30m']).optional(), mode: z.enum(['implicit', 'explicit']).optional() }).nullish(),
    service_tier: z.enum(['auto', 'default', 'flex', 'scale', 'priority', 'fast', 'ultrafast']).nullish(),
    max_tool_calls: z.number().int().min(0).nullish(),
    // Refused whatever their value (null aside).
    conversation: refusedField('conversation', NO_CONVERSATIONS),
    prompt: refusedField('prompt', 'there are no stored prompt templates: send the instructions and the input themselves'),
    context_management: refusedField('context_management', 'the service keeps no conversation to compact'),
    moderation: refusedField('moderation', 'nothing moderates the request or the answer'),
  })
  .refine(streamOptionsOnlyWhenStreaming, STREAM_OPTIONS_ISSUE);

export type ResponsesRequest = z.output<typeof responsesRequestSchema>;

/**
 * The fate of every field of OpenAI's CreateResponse (fields.ts). Ignoring is harmless for each
 * `ignored` one: identifiers and metadata (nothing is stored or moderated; `metadata`, `user`,
 * `safety_identifier` and `prompt_cache_key` are echoed in the Response as OpenAI does), prompt
 * cache hints (llama-server keeps each slot's prompt cache itself), the service tier (one FIFO
 * queue serves every request), and max_tool_calls (it limits built-in tool calls, and there are
 * none).
 */
export const RESPONSES_FIELDS = {
  model: 'honoured',
  input: 'honoured',
  instructions: 'honoured',
  temperature: 'passed',
  top_p: 'passed',
  top_logprobs: 'passed',
  include: 'honoured',
  max_output_tokens: 'honoured',
  tools: 'honoured',
  tool_choice: 'honoured',
  parallel_tool_calls: 'passed',
  text: 'honoured',
  reasoning: 'honoured',
  stream: 'honoured',
  stream_options: 'honoured',
  truncation: 'honoured',
  store: 'honoured',
  background: 'honoured',
  metadata: 'ignored',
  user: 'ignored',
  safety_identifier: 'ignored',
  prompt_cache_key: 'ignored',
  prompt_cache_retention: 'ignored',
  prompt_cache_options: 'ignored',
  service_tier: 'ignored',
  max_tool_calls: 'ignored',
  previous_response_id: 'honoured',
  conversation: 'refused',
  prompt: 'refused',
  context_management: 'refused',
  moderation: 'refused',
} as const satisfies FieldFates;
