// Spec 4.2 and CONTRACT section 5: the strict chat completion request and what the worker gets.
// Unknown fields, vision parts, n > 1 and wrong content types are refused with the contract's 400
// (checked on zod's issues and through a real listener, whose validator hands the issues over in
// Fastify's shape); the upstream body takes the request's own values, fills the profile's sampling
// defaults only where the request leaves a value out, maps the token limits and reasoning effort,
// and passes nothing else on.
import t from 'tap';
import { createListenerApp } from '../../src/app.js';
import type { ErrorBody } from '../../src/errors.js';
import { validationError } from '../../src/routes/errors.js';
import { chatRequestSchema, effectiveEffort, REASONING_EFFORTS, upstreamBody, type ChatRequest } from '../../src/workers/chat/chat.schema.js';
import { chatParamsSchema, type ChatParams } from '../../src/store/profile.schema.js';
import { createLogger } from '../../src/system/observe/log.js';

const base = { model: 'tiny', messages: [{ role: 'user', content: 'hello' }] };

/** A parsed request: the base with `over` on top. */
function request(over: Record<string, unknown> = {}): ChatRequest {
  return chatRequestSchema.parse({ ...base, ...over });
}

function profile(sampling: Record<string, number> = {}): { name: string; params: ChatParams } {
  return { name: 'chat-profile', params: chatParamsSchema.parse({ model: '/models/tiny.gguf', sampling }) };
}

// ---------------------------------------------------------------------------------------------
// Refused requests

/** An object schema `levels` deep: each level one property `a` (two levels of JSON each). */
function nested(levels: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < levels; i++) schema = { type: 'object', properties: { a: schema } };
  return schema;
}

interface Refusal {
  name: string;
  body: Record<string, unknown>;
  code: 'unknown_parameter' | 'invalid_value';
  param: string;
  message: RegExp;
}

const refusals: Refusal[] = [
  { name: 'an unknown top-level field', body: { ...base, cache_prompt: true }, code: 'unknown_parameter', param: 'cache_prompt', message: /^Unknown parameter: 'cache_prompt'\.$/ },
  {
    name: 'an unknown field in a message',
    body: { ...base, messages: [{ role: 'user', content: 'x', foo: 1 }] },
    code: 'unknown_parameter',
    param: 'messages.0.foo',
    message: /^Unknown parameter: 'messages\.0\.foo'\.$/,
  },
  {
    name: 'an unknown field in the second message',
    body: { ...base, messages: [{ role: 'system', content: 's' }, { role: 'assistant', content: 'a', audio: {} }] },
    code: 'unknown_parameter',
    param: 'messages.1.audio',
    message: /messages\.1\.audio/,
  },
  {
    name: 'an unknown field in a text part',
    body: { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'a', cache_control: {} }] }] },
    code: 'unknown_parameter',
    param: 'messages.0.content.0.cache_control',
    message: /cache_control/,
  },
  {
    name: 'an unknown field in a tool function',
    body: { ...base, tools: [{ type: 'function', function: { name: 'f', bogus: 1 } }] },
    code: 'unknown_parameter',
    param: 'tools.0.function.bogus',
    message: /tools\.0\.function\.bogus/,
  },
  {
    name: 'an unknown field in stream_options',
    body: { ...base, stream: true, stream_options: { include_usage: true, chunk_size: 4 } },
    code: 'unknown_parameter',
    param: 'stream_options.chunk_size',
    message: /stream_options\.chunk_size/,
  },
  {
    name: 'an unknown field in a json_schema response format',
    body: { ...base, response_format: { type: 'json_schema', json_schema: { name: 'x', extra: 1 } } },
    code: 'unknown_parameter',
    param: 'response_format.json_schema.extra',
    message: /response_format\.json_schema\.extra/,
  },
  {
    name: 'an image_url content part',
    body: { ...base, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] },
    code: 'invalid_value',
    param: 'messages.0.content.0.type',
    message: /only text content parts .* are accepted: this endpoint has no vision, audio or file input/,
  },
  {
    name: 'an image_url part after a text part',
    body: { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: 'data:,' } }] }] },
    code: 'invalid_value',
    param: 'messages.0.content.1.type',
    message: /only text content/,
  },
  {
    name: 'an input_audio content part',
    body: { ...base, messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: '', format: 'wav' } }] }] },
    code: 'invalid_value',
    param: 'messages.0.content.0.type',
    message: /only text content/,
  },
  { name: 'n: 2', body: { ...base, n: 2 }, code: 'invalid_value', param: 'n', message: /only n = 1 is supported/ },
  {
    name: 'content: 5',
    body: { ...base, messages: [{ role: 'user', content: 5 }] },
    code: 'invalid_value',
    param: 'messages.0.content',
    message: /^Invalid value for 'messages\.0\.content': expected string or array\.$/,
  },
  { name: 'store: true', body: { ...base, store: true }, code: 'invalid_value', param: 'store', message: /store must be false or absent/ },
  { name: 'an unknown reasoning effort', body: { ...base, reasoning_effort: 'huge' }, code: 'invalid_value', param: 'reasoning_effort', message: /ultra/ },
  { name: 'no messages', body: { ...base, messages: [] }, code: 'invalid_value', param: 'messages', message: /at least one message/ },
  {
    name: 'an unknown role',
    body: { ...base, messages: [{ role: 'robot', content: 'x' }] },
    code: 'invalid_value',
    param: 'messages.0.role',
    message: /'system' \| 'developer' \| 'user' \| 'assistant' \| 'tool'/,
  },
  {
    name: 'an unknown field in a tool message beside its name',
    body: { ...base, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, { role: 'tool', tool_call_id: 'c1', name: 'f', content: 'y', artifact: {} }] },
    code: 'unknown_parameter',
    param: 'messages.2.artifact',
    message: /^Unknown parameter: 'messages\.2\.artifact'\.$/,
  },
  {
    name: 'a name on a tool call (it belongs in its function)',
    body: { ...base, messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', name: 'f', function: { name: 'f', arguments: '{}' } }] }] },
    code: 'unknown_parameter',
    param: 'messages.1.tool_calls.0.name',
    message: /messages\.1\.tool_calls\.0\.name/,
  },
  {
    name: 'a tool message without its tool_call_id',
    body: { ...base, messages: [{ role: 'tool', name: 'f', content: 'y' }] },
    code: 'invalid_value',
    param: 'messages.0.tool_call_id',
    message: /messages\.0\.tool_call_id/,
  },
  {
    name: 'tool call arguments that are not a string',
    body: { ...base, messages: [{ role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: { a: 1 } } }] }] },
    code: 'invalid_value',
    param: 'messages.0.tool_calls.0.function.arguments',
    message: /expected string/,
  },
  { name: 'five stop sequences', body: { ...base, stop: ['a', 'b', 'c', 'd', 'e'] }, code: 'invalid_value', param: 'stop', message: /<=4 items/ },
  // The schemas the worker turns into a grammar (grammarCost.ts): over a limit, refused before any worker sees them.
  {
    name: 'a response_format pattern whose repetitions nest four levels deep (it held the real worker for minutes)',
    body: { ...base, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^(((a{0,9}){0,9}){0,9}){0,9}$' } } } } } },
    code: 'invalid_value',
    param: 'response_format.json_schema.schema.properties.a.pattern',
    message: /nests repetitions whose bounds multiply to 6561, over the limit of 100/,
  },
  {
    name: 'a response_format schema of 600 optional properties',
    body: { ...base, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: 600 }, (_, i) => [`p${i}`, { type: 'string' }])) } } } },
    code: 'invalid_value',
    param: 'response_format.json_schema.schema',
    message: /more than 1000 values/,
  },
  {
    name: "a tool's parameters with a pattern of 1001 characters",
    body: { ...base, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'a'.repeat(1001) } } } } }] },
    code: 'invalid_value',
    param: 'tools.0.function.parameters.properties.a.pattern',
    message: /a pattern of 1001 characters is over the limit of 1000/,
  },
];

t.test('refused requests: zod issues turned into the contract 400 (validationError)', async (t) => {
  for (const r of refusals) {
    const parsed = chatRequestSchema.safeParse(r.body);
    t.notOk(parsed.success, `${r.name}: refused`);
    if (parsed.success) continue;
    const error = validationError(parsed.error.issues);
    t.equal(error.statusCode, 400, `${r.name}: 400`);
    t.match(error.body(), { error: { type: 'invalid_request_error', code: r.code, param: r.param } }, `${r.name}: code and param`);
    t.match(error.message, r.message, `${r.name}: message`);
  }
});

t.test('refused requests through a real listener (Fastify hands the zod issues over in its own shape)', async (t) => {
  const app = createListenerApp('inference', createLogger({ level: 'silent' }));
  app.post('/v1/chat/completions', { schema: { body: chatRequestSchema } }, async () => ({ ok: true }));
  await app.ready();
  t.teardown(() => app.close());
  for (const r of refusals) {
    const response = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: r.body });
    t.equal(response.statusCode, 400, `${r.name}: 400`);
    const body = response.json<ErrorBody>();
    t.match(body, { error: { type: 'invalid_request_error', code: r.code, param: r.param } }, `${r.name}: code and param`);
    t.match(body.error.message, r.message, `${r.name}: message`);
  }
  const ok = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: base });
  t.equal(ok.statusCode, 200, 'a plain request passes');
  // The conversation LangChain's createAgent sends at its second model call: a name on
  // every tool message, which the strict schema refused with unknown_parameter messages.2.name.
  const agent = await app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    payload: {
      ...base,
      messages: [
        { role: 'system', content: 'Use the tools.', name: 'setup' },
        { role: 'user', content: 'weather?', name: 'alice' },
        { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Ber' } }] },
        { role: 'tool', tool_call_id: 'c1', name: 'weather', content: 'sunny' },
      ],
    },
  });
  t.equal(agent.statusCode, 200, `names on every role and a cut call pass (${agent.body})`);
});

t.test('accepted requests: OpenAI ordinary fields, nulls as not set', async (t) => {
  const accepted: Array<[string, Record<string, unknown>]> = [
    ['n: 1', { n: 1 }],
    ['n: null', { n: null }],
    ['store: false', { store: false }],
    ['user', { user: 'client-42' }],
    ['text parts', { messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] }],
    [
      'an assistant tool call and its result',
      {
        messages: [
          { role: 'developer', content: 'be brief' },
          { role: 'user', content: 'weather?' },
          { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{}' } }] },
          { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
        ],
      },
    ],
    ...(['system', 'developer', 'user', 'assistant'] as const).map((role): [string, Record<string, unknown>] => [`a ${role} message with a name`, { messages: [{ role, content: 'x', name: 'alice' }] }]),
    [
      "LangChain's tool agent: a name on the tool message, as ToolMessage carries it",
      {
        messages: [
          { role: 'user', content: 'weather?', name: 'alice' },
          { role: 'assistant', content: '', name: 'agent', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Berlin"}' } }] },
          { role: 'tool', tool_call_id: 'c1', name: 'weather', content: 'sunny' },
        ],
      },
    ],
    [
      'a call cut by the token limit, sent back whole, and a call with empty arguments',
      {
        messages: [
          { role: 'user', content: 'weather?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{ "city" : "Be' } },
              { id: 'c2', type: 'function', function: { name: 'now', arguments: '' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', content: 'cut' },
          { role: 'tool', tool_call_id: 'c2', content: '12:00' },
        ],
      },
    ],
    ['every nullable field null', { temperature: null, top_p: null, seed: null, stop: null, max_tokens: null, stream: null, stream_options: null, reasoning_effort: null, tools: null }],
    ['ultra', { reasoning_effort: 'ultra' }],
    [
      'schemas within the grammar limits: two nested repetitions of {0,9}, patterns that nest none, a pattern in const data, 25 levels, 450 properties',
      {
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'x',
            schema: {
              type: 'object',
              properties: {
                a: { type: 'string', pattern: '^(a{0,9}){0,9}$' },
                b: { type: 'string', pattern: '^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$' },
                c: { type: 'string', pattern: `^.{0,5000}$` },
                d: { const: { pattern: '(((a{0,9}){0,9}){0,9})' } },
                e: nested(25),
              },
            },
          },
        },
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: Object.fromEntries(Array.from({ length: 450 }, (_, i) => [`p${i}`, { type: 'string' }])) } } }],
      },
    ],
  ];
  for (const [name, over] of accepted) t.ok(chatRequestSchema.safeParse({ ...base, ...over }).success, name);
});

// ---------------------------------------------------------------------------------------------
// The upstream body

t.test('reasoning effort: every allowed value passes unchanged, ultra becomes max, none set means none sent', async (t) => {
  t.same([...REASONING_EFFORTS], ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max']);
  for (const effort of REASONING_EFFORTS) {
    t.equal(upstreamBody(request({ reasoning_effort: effort }), profile()).reasoning_effort, effort, `${effort} passes unchanged`);
    t.equal(effectiveEffort(effort), effort);
  }
  t.equal(upstreamBody(request({ reasoning_effort: 'ultra' }), profile()).reasoning_effort, 'max', 'ultra becomes max');
  t.equal(effectiveEffort('ultra'), 'max');
  t.notOk('reasoning_effort' in upstreamBody(request({ reasoning_effort: null }), profile()), 'null sets none');
  t.notOk('reasoning_effort' in upstreamBody(request(), profile()), 'absent sets none');
  t.equal(effectiveEffort(null), null);
  t.equal(effectiveEffort(undefined), null);
});

t.test('the profile sampling defaults fill only what the request leaves out', async (t) => {
  const p = profile({ temperature: 0.3, top_p: 0.8, top_k: 20, min_p: 0.05, repeat_penalty: 1.1 });
  t.match(upstreamBody(request(), p), { temperature: 0.3, top_p: 0.8, top_k: 20, min_p: 0.05, repeat_penalty: 1.1 }, 'all from the profile');
  const mixed = upstreamBody(request({ temperature: 0.9, top_p: null, top_k: 0, min_p: 0 }), p);
  t.equal(mixed.temperature, 0.9, 'the request wins');
  t.equal(mixed.top_p, 0.8, 'null counts as absent: the profile fills it');
  t.equal(mixed.top_k, 0, 'a zero in the request is a value, not absent');
  t.equal(mixed.min_p, 0);
  t.equal(mixed.repeat_penalty, 1.1);
  t.equal(upstreamBody(request({ temperature: 0 }), p).temperature, 0, 'temperature 0 from the request stays 0');
  const bare = upstreamBody(request(), profile());
  for (const key of ['temperature', 'top_p', 'top_k', 'min_p', 'repeat_penalty', 'max_tokens']) {
    t.notOk(key in bare, `${key}: nothing set anywhere, nothing sent`);
  }
  t.same(upstreamBody(request({ top_k: 5 }), profile({ temperature: 0.5 })), { model: 'chat-profile', messages: base.messages, top_k: 5, temperature: 0.5 });
});

t.test('token limits: max_completion_tokens wins over max_tokens; both become max_tokens; the profile is the fallback', async (t) => {
  const p = profile({ max_tokens: 256 });
  const cases: Array<[string, Record<string, unknown>, number | undefined]> = [
    ['both: max_completion_tokens wins', { max_tokens: 100, max_completion_tokens: 50 }, 50],
    ['max_tokens only', { max_tokens: 100 }, 100],
    ['max_completion_tokens only', { max_completion_tokens: 70 }, 70],
    ['max_completion_tokens null: max_tokens', { max_tokens: 100, max_completion_tokens: null }, 100],
    ['neither: the profile', {}, 256],
    ['both null: the profile', { max_tokens: null, max_completion_tokens: null }, 256],
  ];
  for (const [name, over, expected] of cases) {
    const body = upstreamBody(request(over), p);
    t.equal(body.max_tokens, expected, name);
    t.notOk('max_completion_tokens' in body, `${name}: max_completion_tokens is not sent`);
  }
  t.notOk('max_tokens' in upstreamBody(request(), profile()), 'no limit anywhere: none sent');
  t.equal(upstreamBody(request({ max_tokens: 9 }), profile()).max_tokens, 9);
});

t.test('streaming and the usage chunk', async (t) => {
  const p = profile();
  const cases: Array<[string, Record<string, unknown>, { includeUsage?: boolean }, Record<string, unknown> | undefined, boolean]> = [
    ['stream with include_usage', { stream: true, stream_options: { include_usage: true } }, {}, { include_usage: true }, true],
    ['stream with the includeUsage option', { stream: true }, { includeUsage: true }, { include_usage: true }, true],
    ['stream with include_usage false and the option', { stream: true, stream_options: { include_usage: false } }, { includeUsage: true }, { include_usage: true }, true],
    ['stream without usage', { stream: true }, {}, undefined, true],
    ['stream with include_usage false', { stream: true, stream_options: { include_usage: false, include_obfuscation: true } }, {}, undefined, true],
    ['stream false', { stream: false }, { includeUsage: true }, undefined, false],
  ];
  for (const [name, over, options, streamOptions, stream] of cases) {
    const body = upstreamBody(request(over), p, options);
    t.same(body.stream_options, streamOptions, `${name}: stream_options`);
    t.equal(body.stream, stream ? true : undefined, `${name}: stream`);
  }
  const without = chatRequestSchema.safeParse({ ...base, stream_options: { include_usage: true } });
  t.notOk(without.success, 'stream_options without stream: true is refused, as OpenAI does');
  t.match(without.error?.issues[0], { path: ['stream_options'], message: /only allowed when stream is true/ });
});

t.test('what is passed on: the own fields without nulls, the profile name as model; user, store and n are not', async (t) => {
  const tools = [{ type: 'function', function: { name: 'weather', parameters: { type: 'object' } } }];
  const fields = {
    temperature: 0.5,
    top_p: 0.9,
    top_k: 40,
    min_p: 0.1,
    repeat_penalty: 1.2,
    frequency_penalty: 0.5,
    presence_penalty: -0.5,
    logit_bias: { '42': -100 },
    seed: 7,
    stop: ['\n\n'],
    logprobs: true,
    top_logprobs: 3,
    tools,
    tool_choice: { type: 'function', function: { name: 'weather' } },
    parallel_tool_calls: false,
    response_format: { type: 'json_object' },
  };
  const body = upstreamBody(request({ ...fields, user: 'client-42', store: false, n: 1, model: 'what-the-client-said' }), profile({ temperature: 1.5 }));
  t.same(body, { model: 'chat-profile', messages: base.messages, ...fields }, 'exactly the own fields, the profile name as model');
  t.notOk('user' in body, 'user is not passed on');
  t.notOk('store' in body, 'store is not passed on');
  t.notOk('n' in body, 'n is not passed on');
  t.equal(body.model, 'chat-profile', 'model upstream is the profile name');
  const nulls = upstreamBody(request({ seed: null, stop: null, tools: null, logprobs: null, response_format: null, user: null, store: null }), profile());
  t.same(nulls, { model: 'chat-profile', messages: base.messages }, 'nulls are dropped');
});

t.test("names reach the worker (llama-server gives the template each message's name); a call's arguments reach it as JSON", async (t) => {
  const named = [
    { role: 'user', content: 'weather?', name: 'alice' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Berlin"}' } }] },
    { role: 'tool', tool_call_id: 'c1', name: 'weather', content: 'sunny' },
  ];
  t.same(upstreamBody(request({ messages: named }), profile()).messages, named, 'JSON arguments and names go as they came');

  const sent = (args: string) => {
    const body = upstreamBody(request({ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }] }] }), profile());
    const assistant = (body.messages as Array<{ tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }> }>)[1];
    return assistant?.tool_calls?.[0];
  };
  const cut = sent('{ "city" : "Be');
  t.same(JSON.parse(cut?.function.arguments ?? 'null'), { unparsed_arguments: '{ "city" : "Be' }, 'arguments that are not JSON: an object that holds their text');
  t.match(cut, { id: 'c1', function: { name: 'f' } }, 'the call keeps its id and name');
  t.equal(sent('')?.function.arguments, '{}', 'empty arguments (a call without parameters): an empty object');
  t.equal(sent('  ')?.function.arguments, '{}', 'blank arguments: an empty object');
  t.equal(sent('{"a": [1, 2]}')?.function.arguments, '{"a": [1, 2]}', 'JSON arguments unchanged, spacing included');
  t.equal(sent('"text"')?.function.arguments, '"text"', 'any JSON text is left to the worker');
});
