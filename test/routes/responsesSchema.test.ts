// The Responses API door (src/workers/chat/responses.schema.ts, responses.ts) without a worker:
// every refusal of the strict request, with the field it names and why (checked on zod's issues
// and through a real listener); the chat completion request a Responses request stands for; and
// the worker's answers translated back, JSON and stream, each Response and each event validated
// against openapi.json, for answers the real llama-server writes (text, reasoning, function
// calls, logprobs, usage, the token limit) and for the failures (the relay's error event, a stream
// that ends early).
import t, { type Test } from 'tap';
import { createListenerApp } from '../../src/app.js';
import type { ErrorBody } from '../../src/errors.js';
import { validationError } from '../../src/routes/errors.js';
import { chatParamsSchema } from '../../src/store/profile.schema.js';
import { createLogger } from '../../src/system/observe/log.js';
import { upstreamBody } from '../../src/workers/chat/chat.schema.js';
import { chatRequestOf, ResponseAnswer } from '../../src/workers/chat/responses.js';
import { BUILT_IN_CHOICES, BUILT_IN_ITEMS, BUILT_IN_TOOLS, responsesRequestSchema, type ResponsesRequest } from '../../src/workers/chat/responses.schema.js';
import { matchesSchema, OPENAPI_FILE, SCHEMA_SKIP, unionTypes } from '../helpers/openapi.js';

const base = { model: 'tiny', input: 'hello' };

/**
 * OpenAI's own lists, less what this endpoint takes: every built-in tool, tool choice and input
 * item type that openapi.json names gets a refusal row (the route's lists stand in without it).
 */
const without = (types: string[], taken: string[]) => types.filter((type) => !taken.includes(type));
const OPENAI = OPENAPI_FILE
  ? {
      tools: without(unionTypes('Tool'), ['function']),
      choices: without(unionTypes('ToolChoiceParam'), ['function', 'allowed_tools']),
      items: without(unionTypes('InputItem'), ['message', 'function_call', 'function_call_output', 'reasoning', 'item_reference', 'compaction', 'compaction_trigger']),
    }
  : { tools: [...BUILT_IN_TOOLS], choices: [...BUILT_IN_CHOICES], items: [...BUILT_IN_ITEMS] };

t.test("the route's lists of built-in tools, tool choices and items are OpenAI's", async (t) => {
  if (!OPENAPI_FILE) return t.pass("the route's lists are OpenAI's", { skip: SCHEMA_SKIP });
  t.same([...BUILT_IN_TOOLS].sort(), OPENAI.tools, 'every Tool type but function');
  t.same([...BUILT_IN_CHOICES].sort(), OPENAI.choices, 'every ToolChoiceParam type but function and allowed_tools');
  t.same([...BUILT_IN_ITEMS].sort(), OPENAI.items, 'every InputItem type but the messages, function calls and outputs, reasoning, references and compaction');
});
const NOT_OFFERED = /is not offered by this endpoint: /;
const NO_CONVERSATIONS = /is not offered by this endpoint: the service keeps no conversation objects, only recent responses for a while/;
const BUILT_IN = /is not offered by this endpoint: only function tools are offered/;

interface Refusal {
  name: string;
  body: Record<string, unknown>;
  code?: 'unknown_parameter' | 'invalid_value';
  param: string;
  message: RegExp;
}

const refusals: Refusal[] = [
  { name: 'conversation by id', body: { conversation: 'conv_1' }, param: 'conversation', message: NO_CONVERSATIONS },
  { name: 'conversation as an object', body: { conversation: { id: 'conv_1' } }, param: 'conversation', message: NO_CONVERSATIONS },
  { name: 'an empty previous_response_id', body: { previous_response_id: '' }, param: 'previous_response_id', message: /Too small: expected string to have >=1 characters/ },
  { name: 'background: true', body: { background: true }, param: 'background', message: /background: true is not offered by this endpoint: nothing is kept/ },
  { name: 'a stored prompt', body: { prompt: { id: 'pmpt_1' } }, param: 'prompt', message: /prompt is not offered by this endpoint: there are no stored prompt templates/ },
  { name: 'context_management', body: { context_management: [{ type: 'compaction' }] }, param: 'context_management', message: /no conversation to compact/ },
  { name: 'moderation', body: { moderation: { model: 'omni-moderation-latest' } }, param: 'moderation', message: /nothing moderates/ },
  { name: "truncation 'auto'", body: { truncation: 'auto' }, param: 'truncation', message: /truncation 'auto' is not offered by this endpoint: no input is dropped/ },
  ...OPENAI.tools.map((type) => ({ name: `the built-in tool ${type}`, body: { tools: [{ type }] }, param: 'tools.0.type', message: new RegExp(`^Invalid value for 'tools\\.0\\.type': the ${type} tool ${BUILT_IN.source}`) })),
  ...OPENAI.choices.map((type) => ({ name: `tool_choice ${type}`, body: { tool_choice: { type } }, param: 'tool_choice.type', message: new RegExp(`tool_choice of type ${type} ${BUILT_IN.source}`) })),
  ...OPENAI.items.map((type) => ({ name: `a ${type} input item`, body: { input: [{ type, id: 'x' }] }, param: 'input.0.type', message: new RegExp(`a ${type} item ${BUILT_IN.source}`) })),
  { name: 'an item_reference without an id', body: { input: [{ type: 'item_reference' }] }, param: 'input.0.id', message: /./ },
  { name: 'a compaction item', body: { input: [{ type: 'compaction', encrypted_content: 'x' }] }, param: 'input.0.type', message: /a compaction item is not offered/ },
  {
    name: 'an input_image part',
    body: { input: [{ role: 'user', content: [{ type: 'input_text', text: 'look' }, { type: 'input_image', image_url: 'data:image/png;base64,AA==', detail: 'auto' }] }] },
    param: 'input.0.content.1.type',
    message: /input_image content is not offered by this endpoint: the chat profiles read text only/,
  },
  { name: 'an input_file part', body: { input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file_1' }] }] }, param: 'input.0.content.0.type', message: /input_file content is not offered/ },
  {
    name: 'an image in a function output',
    body: { input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_image', image_url: 'data:,' }] }] },
    param: 'input.1.output.0.type',
    message: /input_image content is not offered/,
  },
  { name: 'a deferred function tool', body: { tools: [{ type: 'function', name: 'f', parameters: {}, strict: true, defer_loading: true }] }, param: 'tools.0.defer_loading', message: /there is no tool search/ },
  { name: 'allowed_callers of a function tool', body: { tools: [{ type: 'function', name: 'f', parameters: {}, strict: true, allowed_callers: ['program'] }] }, param: 'tools.0.allowed_callers', message: NOT_OFFERED },
  { name: 'stream_options without stream', body: { stream_options: { include_obfuscation: false } }, param: 'stream_options', message: /only allowed when stream is true/ },
  { name: 'no input items', body: { input: [] }, param: 'input', message: /at least one input item/ },
  { name: 'an unknown role', body: { input: [{ role: 'tool', content: 'x' }] }, param: 'input.0.role', message: /expected one of "user"\|"assistant"\|"system"\|"developer"/ },
  { name: 'max_output_tokens 0', body: { max_output_tokens: 0 }, param: 'max_output_tokens', message: />=1/ },
  { name: 'an unknown reasoning effort', body: { reasoning: { effort: 'huge' } }, param: 'reasoning.effort', message: /ultra/ },
  { name: 'an unknown top-level field', body: { cache_prompt: true }, code: 'unknown_parameter', param: 'cache_prompt', message: /^Unknown parameter: 'cache_prompt'\.$/ },
  { name: 'an unknown field in a message', body: { input: [{ role: 'user', content: 'x', name: 'bob' }] }, code: 'unknown_parameter', param: 'input.0.name', message: /input\.0\.name/ },
  { name: 'an unknown field in the text format', body: { text: { format: { type: 'json_object', schema: {} } } }, code: 'unknown_parameter', param: 'text.format.schema', message: /text\.format\.schema/ },
  { name: 'an unknown field in reasoning', body: { reasoning: { effort: 'low', budget: 100 } }, code: 'unknown_parameter', param: 'reasoning.budget', message: /reasoning\.budget/ },
  // The schemas the worker turns into a grammar (grammarCost.ts), as on the chat completions door.
  {
    name: 'a text.format pattern whose repetitions nest five levels deep (it held the real worker past 40 s without a first token)',
    body: { text: { format: { type: 'json_schema', name: 'x', schema: { type: 'string', pattern: '^((((a{0,9}){0,9}){0,9}){0,9}){0,9}$' } } } },
    param: 'text.format.schema.pattern',
    message: /^Invalid value for 'text\.format\.schema\.pattern': the pattern nests repetitions whose bounds multiply to 59049, over the limit of 100 \(\*, \+ and \{m,\} count as 10\)/,
  },
  {
    name: 'a function tool whose parameters nest * in {0,9} in {0,9}',
    body: { tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: '((a*){0,9}){0,9}' } } }, strict: true }] },
    param: 'tools.0.parameters.properties.a.pattern',
    message: /multiply to 810, over the limit of 100/,
  },
];

t.test('every refusal names its field and says why (zod issues as the contract 400)', async (t) => {
  for (const r of refusals) {
    const parsed = responsesRequestSchema.safeParse({ ...base, ...r.body });
    t.notOk(parsed.success, `${r.name}: refused`);
    if (parsed.success) continue;
    const error = validationError(parsed.error.issues);
    t.match(error.body(), { error: { type: 'invalid_request_error', code: r.code ?? 'invalid_value', param: r.param } }, `${r.name}: ${r.code ?? 'invalid_value'} naming ${r.param}`);
    t.match(error.message, r.message, `${r.name}: ${error.message}`);
  }
});

t.test('every refusal through a real listener (Fastify hands the zod issues over in its own shape)', async (t) => {
  const app = createListenerApp('inference', createLogger({ level: 'silent' }));
  app.post('/v1/responses', { schema: { body: responsesRequestSchema } }, async () => ({ ok: true }));
  await app.ready();
  t.teardown(() => app.close());
  for (const r of refusals) {
    const response = await app.inject({ method: 'POST', url: '/v1/responses', payload: { ...base, ...r.body } });
    t.equal(response.statusCode, 400, `${r.name}: 400`);
    const body = response.json<ErrorBody>();
    t.match(body, { error: { type: 'invalid_request_error', code: r.code ?? 'invalid_value', param: r.param } }, `${r.name}: code and param`);
    t.match(body.error.message, r.message, `${r.name}: message`);
  }
  t.equal((await app.inject({ method: 'POST', url: '/v1/responses', payload: base })).statusCode, 200, 'a plain request passes');
});

t.test('accepted: what the clients send, nulls as not set, the values that keep nothing, and what names a kept response', async (t) => {
  const accepted: Array<[string, Record<string, unknown>]> = [
    ['store: false, background: false, truncation disabled', { store: false, background: false, truncation: 'disabled' }],
    ["store: true (the AI SDK's default), previous_response_id, item_reference items", { store: true, previous_response_id: 'resp_1', input: [{ type: 'item_reference', id: 'msg_1' }, { role: 'user', content: 'and?' }] }],
    ['every nullable field null', { instructions: null, temperature: null, top_p: null, max_output_tokens: null, tools: null, tool_choice: null, text: null, reasoning: null, stream: null, previous_response_id: null, conversation: null, prompt: null, store: null }],
    ['reasoning with a summary', { reasoning: { effort: 'ultra', summary: 'auto' } }],
    ['a reasoning item of an earlier answer', { input: [{ type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'thought' }] }, { role: 'user', content: 'go on' }] }],
    ['the ids and hints', { metadata: { team: 'docs' }, user: 'u1', safety_identifier: 's1', prompt_cache_key: 'k', service_tier: 'flex', max_tool_calls: 3, include: ['reasoning.encrypted_content'] }],
    [
      "the AI SDK's assistant message and function call",
      {
        input: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: [{ type: 'input_text', text: 'weather?' }] },
          { role: 'assistant', content: [{ type: 'output_text', text: 'Let me see.' }], id: 'msg_1' },
          { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{"city":"Berlin"}' },
          { type: 'function_call_output', call_id: 'c1', output: '{"temperature":21}' },
        ],
      },
    ],
    ['allowed tools', { tools: [{ type: 'function', name: 'a', parameters: null, strict: null }], tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'a' }] } }],
    // OpenAI's guide sends the whole output back, a call cut by the token limit included (chat.schema.ts, workerArguments).
    ['function call arguments that the token limit cut', { input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":' }, { type: 'function_call_output', call_id: 'c1', output: 'x' }] }],
    ['a text.format pattern within the grammar limits', { text: { format: { type: 'json_schema', name: 'x', schema: { type: 'string', pattern: '^([a-z0-9]+\\.)+[a-z]{2,}$' } } } }],
  ];
  for (const [name, over] of accepted) t.ok(responsesRequestSchema.safeParse({ ...base, ...over }).success, name);
});

const profile = { name: 'tiny-chat', params: chatParamsSchema.parse({ model: '/models/tiny.gguf', sampling: { temperature: 0.6, max_tokens: 99 } }) };
const upstream = (over: Record<string, unknown>) => upstreamBody(chatRequestOf(responsesRequestSchema.parse({ ...base, ...over })), profile, { includeUsage: true });

t.test('a Responses request becomes the chat completion request the worker gets', async (t) => {
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
    [
      'text input, instructions, the token limit and the stream',
      { instructions: 'Be brief.', input: 'Hi', max_output_tokens: 20, stream: true, top_p: 0.5 },
      { model: 'tiny-chat', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }], top_p: 0.5, temperature: 0.6, max_tokens: 20, stream: true, stream_options: { include_usage: true } },
    ],
    [
      'a call cut by the token limit: the worker gets its text inside a JSON object',
      { input: [{ type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":' }, { type: 'function_call_output', call_id: 'c1', output: 'x' }] },
      {
        model: 'tiny-chat',
        messages: [
          { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"unparsed_arguments":"{\\"a\\":"}' } }] },
          { role: 'tool', tool_call_id: 'c1', content: 'x' },
        ],
        temperature: 0.6,
        max_tokens: 99,
      },
    ],
    ["the profile's defaults where the request leaves them out", { temperature: 0 }, { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], temperature: 0, max_tokens: 99 }],
    [
      'items: text parts, an answer with its calls as one assistant message, the outputs as tool messages, reasoning left out',
      {
        input: [
          { role: 'developer', content: [{ type: 'input_text', text: 'a' }, { type: 'input_text', text: 'b' }] },
          { type: 'reasoning', id: 'rs_1', summary: [] },
          { type: 'message', role: 'assistant', id: 'msg_1', status: 'completed', content: [{ type: 'output_text', text: 'Checking.', annotations: [] }] },
          { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{"city":"Berlin"}' },
          { type: 'function_call', call_id: 'c2', name: 'weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: 'c1', output: '21' },
          { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: '24' }] },
          { type: 'function_call', call_id: 'c3', name: 'weather', arguments: '{}' },
        ],
      },
      {
        model: 'tiny-chat',
        messages: [
          { role: 'developer', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
          {
            role: 'assistant',
            content: [{ type: 'text', text: 'Checking.' }],
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Berlin"}' } },
              { id: 'c2', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', content: '21' },
          { role: 'tool', tool_call_id: 'c2', content: [{ type: 'text', text: '24' }] },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c3', type: 'function', function: { name: 'weather', arguments: '{}' } }] },
        ],
        temperature: 0.6,
        max_tokens: 99,
      },
    ],
    [
      'function tools and a named function',
      { tools: [{ type: 'function', name: 'weather', description: 'the weather', parameters: { type: 'object' }, strict: true }], tool_choice: { type: 'function', name: 'weather' }, parallel_tool_calls: false },
      {
        model: 'tiny-chat',
        messages: [{ role: 'user', content: 'hello' }],
        tools: [{ type: 'function', function: { name: 'weather', description: 'the weather', parameters: { type: 'object' }, strict: true } }],
        tool_choice: { type: 'function', function: { name: 'weather' } },
        parallel_tool_calls: false,
        temperature: 0.6,
        max_tokens: 99,
      },
    ],
    [
      'allowed_tools: only the allowed tools, and its mode',
      { tools: ['a', 'b'].map((name) => ({ type: 'function', name, parameters: null, strict: null })), tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'b' }] } },
      { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], tools: [{ type: 'function', function: { name: 'b', strict: null } }], tool_choice: 'required', temperature: 0.6, max_tokens: 99 },
    ],
    [
      'text.format json_schema as the response_format',
      { text: { format: { type: 'json_schema', name: 'pick', schema: { type: 'object' }, strict: true }, verbosity: 'low' } },
      { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: { type: 'object' }, strict: true } }, temperature: 0.6, max_tokens: 99 },
    ],
    ['text.format json_object', { text: { format: { type: 'json_object' } } }, { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], response_format: { type: 'json_object' }, temperature: 0.6, max_tokens: 99 }],
    ['reasoning.effort ultra as max; the summary is not passed on', { reasoning: { effort: 'ultra', summary: 'detailed' } }, { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], temperature: 0.6, max_tokens: 99, reasoning_effort: 'max' }],
    ['the logprobs include and top_logprobs', { include: ['message.output_text.logprobs'], top_logprobs: 3 }, { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], logprobs: true, top_logprobs: 3, temperature: 0.6, max_tokens: 99 }],
    [
      'the ignored fields reach no worker',
      { metadata: { a: 'b' }, user: 'u', safety_identifier: 's', prompt_cache_key: 'k', prompt_cache_retention: '24h', prompt_cache_options: { ttl: '30m' }, service_tier: 'flex', max_tool_calls: 2, include: ['reasoning.encrypted_content'], store: false, background: false, truncation: 'disabled' },
      { model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }], temperature: 0.6, max_tokens: 99 },
    ],
  ];
  for (const [name, over, expected] of cases) t.same(upstream(over), expected, name);
});

// ---------------------------------------------------------------------------------------------
// The worker's answers, back as Responses

const request = (over: Record<string, unknown> = {}): ResponsesRequest => responsesRequestSchema.parse({ ...base, ...over });
const answerFor = (over: Record<string, unknown> = {}) => new ResponseAnswer(request(over), 'tiny-chat', upstream(over));

/** A chat.completion.chunk event as llama-server writes it. */
const chunk = (choice: Record<string, unknown> | undefined, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ choices: choice ? [{ index: 0, finish_reason: null, ...choice }] : [], created: 1, id: 'chatcmpl-1', model: 'tiny-chat', object: 'chat.completion.chunk', ...extra })}\n\n`;
const USAGE = { usage: { completion_tokens: 3, prompt_tokens: 21, total_tokens: 24, prompt_tokens_details: { cached_tokens: 20 } }, timings: { prompt_n: 1, predicted_n: 3 } };
const logprob = (token: string) => ({ id: 1, token, bytes: [...Buffer.from(token)], logprob: -0.5, top_logprobs: [{ id: 1, token, bytes: [...Buffer.from(token)], logprob: -0.5 }] });

/** A text answer cut by the token limit, with its usage chunk and [DONE], as llama-server streams it. */
const TEXT_STREAM = [
  chunk({ delta: { role: 'assistant', content: null } }),
  chunk({ delta: { content: 'a' }, logprobs: { content: [logprob('a')] } }),
  chunk({ delta: { content: 'A' }, logprobs: { content: [logprob('A')] } }),
  chunk({ delta: { content: 'N' }, logprobs: { content: [logprob('N')] } }),
  chunk({ delta: {}, finish_reason: 'length' }),
  chunk(undefined, USAGE),
  'data: [DONE]\n\n',
].join('');

/** Reasoning, text, then two function calls, ended by the model. */
const CALLS_STREAM = [
  chunk({ delta: { role: 'assistant', content: null } }),
  chunk({ delta: { reasoning_content: 'Think' } }),
  chunk({ delta: { reasoning_content: 'ing.' } }),
  chunk({ delta: { content: 'Let me look.' } }),
  chunk({ delta: { tool_calls: [{ index: 0, id: 'call_A', type: 'function', function: { name: 'weather', arguments: '{' } }] } }),
  chunk({ delta: { tool_calls: [{ index: 0, function: { arguments: '"city":"Berlin"}' } }] } }),
  chunk({ delta: { tool_calls: [{ index: 1, id: 'call_B', type: 'function', function: { name: 'weather', arguments: '' } }] } }),
  chunk({ delta: { tool_calls: [{ index: 1, function: { arguments: '{"city":"Paris"}' } }] } }),
  chunk({ delta: {}, finish_reason: 'tool_calls' }),
  chunk(undefined, USAGE),
  'data: [DONE]\n\n',
].join('');

interface Event {
  type: string;
  sequence_number: number;
  output_index?: number;
  item_id?: string;
  delta?: string;
  response?: Record<string, unknown> & { output: Array<Record<string, unknown>> };
  [key: string]: unknown;
}

/** Feeds `stream` to a new answer in pieces of `size` bytes (0: whole), and reads the SSE text back as events. */
function translate(stream: string, size = 0, over: Record<string, unknown> = {}): Event[] {
  const answer = answerFor({ ...over, stream: true });
  const bytes = Buffer.from(stream);
  let out = '';
  for (let at = 0; at < bytes.length; at += size || bytes.length) out += answer.chunk(bytes.subarray(at, at + (size || bytes.length)));
  out += answer.end();
  return out
    .trim()
    .split('\n\n')
    .map((event) => {
      const [name, data] = event.split('\n');
      const parsed = JSON.parse(data?.replace(/^data: /, '') ?? '') as Event;
      if (name !== `event: ${parsed.type}`) throw new Error(`the event line ${name} is not the event's type ${parsed.type}`);
      return parsed;
    });
}

function valid(t: Test, events: Event[], what: string): void {
  t.same(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
    `${what}: numbered 0 to ${events.length - 1}`,
  );
  events.forEach((event, i) => matchesSchema(t, 'ResponseStreamEvent', event, `${what}: event ${i} (${event.type}) matches ResponseStreamEvent`));
}

t.test('a text stream: each event valid and numbered, the deltas and logprobs as they came, incomplete at the limit', async (t) => {
  const events = translate(TEXT_STREAM, 0, { include: ['message.output_text.logprobs'], max_output_tokens: 3 });
  valid(t, events, 'text');
  t.same(
    events.map((e) => e.type),
    [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.incomplete',
    ],
  );
  t.same(events.filter((e) => e.type === 'response.output_text.delta').map((e) => [e.delta, e.output_index, e.content_index, (e.logprobs as Array<{ token: string }>)[0]?.token]), [
    ['a', 0, 0, 'a'],
    ['A', 0, 0, 'A'],
    ['N', 0, 0, 'N'],
  ]);
  t.match(events[0], { response: { status: 'in_progress', output: [], model: 'tiny-chat', max_output_tokens: 3 } }, 'created: the Response in progress, no output yet');
  const last = events.at(-1)!;
  t.match(last.response, {
    status: 'incomplete',
    incomplete_details: { reason: 'max_output_tokens' },
    output: [{ type: 'message', status: 'incomplete', content: [{ type: 'output_text', text: 'aAN' }] }],
    usage: { input_tokens: 21, input_tokens_details: { cached_tokens: 20 }, output_tokens: 3, total_tokens: 24 },
  });
  t.equal((last.response?.output[0]?.content as Array<{ logprobs: unknown[] }>)[0]?.logprobs.length, 3, 'the logprobs of every token');
  const ids = new Set(events.filter((e) => e.item_id !== undefined).map((e) => e.item_id));
  t.same([...ids], [last.response?.output[0]?.id], 'every text event names the message item');
  t.match(String(last.response?.output[0]?.id), /^msg_[0-9a-f]{32}_0$/);
});

t.test("reasoning, text and two function calls: one item each, in order; text is done when the next item begins, a call when the answer ends", async (t) => {
  const events = translate(CALLS_STREAM);
  valid(t, events, 'calls');
  const added = events.filter((e) => e.type === 'response.output_item.added').map((e) => [e.output_index, (e.item as { type: string }).type]);
  t.same(added, [
    [0, 'reasoning'],
    [1, 'message'],
    [2, 'function_call'],
    [3, 'function_call'],
  ]);
  t.same(
    events.filter((e) => e.type.endsWith('.delta')).map((e) => [e.type, e.output_index, e.delta]),
    [
      ['response.reasoning_text.delta', 0, 'Think'],
      ['response.reasoning_text.delta', 0, 'ing.'],
      ['response.output_text.delta', 1, 'Let me look.'],
      ['response.function_call_arguments.delta', 2, '{'],
      ['response.function_call_arguments.delta', 2, '"city":"Berlin"}'],
      ['response.function_call_arguments.delta', 3, '{"city":"Paris"}'],
    ],
  );
  // Text is done before the next item is added; a call only at the end (a later chunk may still add to its arguments).
  const order = events.filter((e) => e.type === 'response.output_item.added' || e.type === 'response.output_item.done').map((e) => `${e.type.endsWith('added') ? '+' : '-'}${e.output_index}`);
  t.same(order, ['+0', '-0', '+1', '-1', '+2', '+3', '-2', '-3']);
  t.match(events.find((e) => e.type === 'response.function_call_arguments.done' && e.output_index === 2), { name: 'weather', arguments: '{"city":"Berlin"}' });
  const last = events.at(-1)!;
  t.equal(last.type, 'response.completed', 'tool_calls ends the answer: completed');
  t.match(last.response, {
    status: 'completed',
    incomplete_details: null,
    output: [
      { type: 'reasoning', status: 'completed', content: [{ type: 'reasoning_text', text: 'Thinking.' }], summary: [] },
      { type: 'message', status: 'completed', content: [{ type: 'output_text', text: 'Let me look.' }] },
      { type: 'function_call', status: 'completed', call_id: 'call_A', name: 'weather', arguments: '{"city":"Berlin"}' },
      { type: 'function_call', status: 'completed', call_id: 'call_B', name: 'weather', arguments: '{"city":"Paris"}' },
    ],
  });
  t.type(last.response?.completed_at, 'number');
});

t.test("calls whose arguments interleave: no delta after its call's done, each call's arguments whole", async (t) => {
  const call = (index: number, args: string, first = false) =>
    chunk({ delta: { tool_calls: [{ index, ...(first ? { id: `call_${index}`, type: 'function', function: { name: 'weather', arguments: args } } : { function: { arguments: args } }) }] } });
  const events = translate(
    [
      chunk({ delta: { role: 'assistant', content: null } }),
      call(0, '{"city":', true),
      call(1, '{"city":', true),
      call(0, '"Berlin"}'),
      call(1, '"Paris"}'),
      chunk({ delta: {}, finish_reason: 'tool_calls' }),
      'data: [DONE]\n\n',
    ].join(''),
  );
  valid(t, events, 'interleaved');
  for (const index of [0, 1]) {
    const of = events.filter((e) => e.output_index === index);
    const done = of.findIndex((e) => e.type === 'response.function_call_arguments.done');
    t.ok(done > 0, `call ${index} is done`);
    t.same(of.slice(done).filter((e) => e.type === 'response.function_call_arguments.delta'), [], `no delta of call ${index} after its done`);
    t.equal(of[done]?.arguments, index === 0 ? '{"city":"Berlin"}' : '{"city":"Paris"}', `call ${index}'s done has its arguments whole`);
  }
  t.match(events.at(-1), { type: 'response.completed', response: { output: [{ arguments: '{"city":"Berlin"}', status: 'completed' }, { arguments: '{"city":"Paris"}', status: 'completed' }] } });
});

t.test('a chunk of another shape, or an event over 1 MiB, ends the answer with response.failed instead of throwing', async (t) => {
  const shapes: Array<[string, Record<string, unknown>]> = [
    ['tool_calls that is no list', { delta: { tool_calls: 5 } }],
    ['logprobs that are no list', { delta: { content: 'a' }, logprobs: { content: { token: 'a' } } }],
  ];
  for (const [name, choice] of shapes) {
    const events = translate(`${chunk({ delta: { content: 'x' } })}${chunk(choice)}${chunk({ delta: { content: 'y' } })}`);
    valid(t, events, name);
    t.match(events.at(-1), { type: 'response.failed', response: { status: 'failed', error: { code: 'server_error', message: /shape this door cannot read as a chat completion/ } } }, `${name}: response.failed`);
    t.notOk(events.some((e) => e.delta === 'y'), `${name}: nothing after it is read`);
  }
  const huge = translate(`${chunk({ delta: { content: 'x' } })}data: {"choices":[{"delta":{"content":"${'z'.repeat(1024 * 1024)}`);
  t.match(huge.at(-1), { type: 'response.failed', response: { error: { message: /larger than 1 MiB/ } } }, 'an event over 1 MiB is not held: the answer fails');
  t.throws(() => answerFor().completion(Buffer.from(JSON.stringify({ choices: [{ finish_reason: 'stop', message: { content: 'a', tool_calls: { id: 'x' } } }] }))), { statusCode: 502, code: 'worker_failed' }, 'a buffered answer of another shape is 502 worker_failed');
});

t.test('the events are the same however the worker\'s bytes are cut', async (t) => {
  const shape = (events: Event[]) => events.map((e) => [e.type, e.sequence_number, e.output_index ?? null, e.delta ?? null]);
  const whole = shape(translate(CALLS_STREAM));
  for (const size of [1, 7, 64, 333]) t.same(shape(translate(CALLS_STREAM, size)), whole, `in pieces of ${size} bytes`);
});

t.test("a failed stream ends with response.failed and the relay's error, valid against the schema", async (t) => {
  const serviceError = { error: { message: 'The chat worker was ended by SIGKILL.', type: 'server_error', param: null, code: 'worker_failed' } };
  const failed = translate(`${chunk({ delta: { content: 'a' } })}data: ${JSON.stringify(serviceError)}\n\n`);
  valid(t, failed, 'failed');
  t.same(failed.map((e) => e.type).slice(-2), ['response.output_text.delta', 'response.failed'], 'response.failed right after the last delta');
  t.match(failed.at(-1)?.response, { status: 'failed', error: { code: 'server_error', message: 'The chat worker was ended by SIGKILL.' }, output: [{ type: 'message', status: 'incomplete' }] });

  const refused = translate(`data: ${JSON.stringify({ error: { message: 'too long', type: 'invalid_request_error', param: null, code: 'context_length_exceeded' } })}\n\n`);
  valid(t, refused, 'refused');
  t.same(refused.map((e) => e.type), ['response.created', 'response.in_progress', 'response.failed'], 'an error before any text');
  t.match(refused.at(-1)?.response, { error: { code: 'invalid_prompt', message: 'too long' } });

  const cut = translate(chunk({ delta: { content: 'a' } }));
  valid(t, cut, 'cut');
  t.match(cut.at(-1), { type: 'response.failed', response: { error: { code: 'server_error', message: /ended before it was complete/ } } }, 'a stream that ends without a finish failed');
});

t.test('a buffered chat completion as one Response, valid against the schema', async (t) => {
  const tools = [{ type: 'function', name: 'weather', parameters: { type: 'object' }, strict: true }];
  const completion = {
    choices: [
      {
        finish_reason: 'tool_calls',
        index: 0,
        message: { role: 'assistant', content: 'Let me look.', reasoning_content: 'Hm.', tool_calls: [{ type: 'function', id: 'call_A', function: { name: 'weather', arguments: '{"city":"Berlin"}' } }] },
      },
    ],
    created: 1,
    model: 'tiny-chat',
    object: 'chat.completion',
    ...USAGE,
  };
  const over = { instructions: 'Be brief.', tools, metadata: { team: 'docs' }, user: 'u1', reasoning: { effort: 'ultra' } };
  const response = JSON.parse(answerFor(over).completion(Buffer.from(JSON.stringify(completion))).toString()) as Record<string, unknown>;
  matchesSchema(t, 'Response', response, 'the Response matches the schema');
  t.match(response, {
    object: 'response',
    status: 'completed',
    model: 'tiny-chat',
    instructions: 'Be brief.',
    metadata: { team: 'docs' },
    user: 'u1',
    store: false,
    temperature: 0.6,
    max_output_tokens: 99,
    reasoning: { effort: 'max' },
    tools: [{ type: 'function', name: 'weather', strict: true }],
    output: [
      { type: 'reasoning', content: [{ text: 'Hm.' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Let me look.', annotations: [], logprobs: [] }] },
      { type: 'function_call', call_id: 'call_A', name: 'weather', arguments: '{"city":"Berlin"}' },
    ],
    usage: { input_tokens: 21, output_tokens: 3 },
  });

  const cut = { ...completion, choices: [{ finish_reason: 'length', index: 0, message: { role: 'assistant', content: 'aAN' } }] };
  const incomplete = JSON.parse(answerFor().completion(Buffer.from(JSON.stringify(cut))).toString()) as Record<string, unknown>;
  matchesSchema(t, 'Response', incomplete, 'an incomplete Response matches the schema');
  t.match(incomplete, { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, completed_at: null, output: [{ status: 'incomplete' }] });

  t.throws(() => answerFor().completion(Buffer.from('<html>')), { statusCode: 502, code: 'worker_failed' }, 'an answer that is not JSON is a 502');
  t.throws(() => answerFor().completion(Buffer.from('{"choices":[]}')), { statusCode: 502, code: 'worker_failed' }, 'nor one without a choice');
});
