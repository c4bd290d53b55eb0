// The clients people build on, in their current majors, through whole conversations:
// LangChain's createAgent with a tool, through its full loop against the stand-in worker (a name
// on every tool message); a tool call that the token limit cut, sent back whole, answered by the
// real llama-server; and the chat routes' key cases (JSON, stream, tools, structured output)
// through both majors of the official client, `openai` 6 and 7, on the real llama-server.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI6 from 'openai';
import type { ChatCompletion, ChatCompletionChunk, ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions';
import OpenAI7 from 'openai7';
import t, { type Test } from 'tap';
import { servedChat, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';

/** The weather table the tool answers from. */
const WEATHER: Record<string, { temperature: number }> = { Berlin: { temperature: 21 }, Paris: { temperature: 24 } };
const PARAMETERS = { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'], additionalProperties: false };

/** The service with the published chat profile `name` on `llamaServer`, a model file from `dir`. */
async function serve(t: Test, llamaServer: string, name: string, model: string): Promise<Built> {
  return servedChat(t, { llamaServer, name, params: { model, context: 4096, slots: 1 } });
}

/** The messages each request brought the stand-in (its `messages` lines). */
async function workerConversations(events: string): Promise<Array<Array<{ role: string; name?: string; tool_call_id?: string; content: unknown }>>> {
  const lines = (await readFile(events, 'utf8')).split('\n').filter((line) => line.startsWith('messages '));
  return lines.map((line) => JSON.parse(line.slice('messages '.length)) as Array<{ role: string; name?: string; tool_call_id?: string; content: unknown }>);
}

const AGENT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/langchain-agent.mjs');

interface AgentMessage {
  type: string;
  content: unknown;
  name: string | null;
  tool_call_id: string | null;
  tool_calls: Array<{ id?: string; name: string; args: Record<string, unknown> }> | null;
}

/** LangChain's createAgent run by test/fixtures/langchain-agent.mjs, with plain Node (see there why). */
function runAgent(b: Built, how: 'buffered' | 'streamed'): Promise<{ messages: AgentMessage[]; asked: string[]; chunks: number }> {
  return new Promise((resolve, reject) => {
    const env = { PATH: process.env.PATH, HOME: process.env.HOME, SD_TOKEN: TOKEN };
    execFile(process.execPath, [AGENT, `${b.apiUrl()}/v1`, 'agent', how], { env, timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`the agent failed: ${stderr.slice(-2000)}`, { cause: error }));
      else resolve(JSON.parse(stdout) as { messages: AgentMessage[]; asked: string[]; chunks: number });
    });
  });
}

t.test("LangChain's createAgent runs its tool loop to the end, buffered and streamed (a name on every tool message)", async (t) => {
  const dir = await tempDir(t);
  const events = path.join(dir, 'events');
  const b = await serve(t, await fakeLlamaServerIn(dir, 'tools', events), 'agent', await tinyModelIn(dir));
  for (const how of ['buffered', 'streamed'] as const) {
    const before = (await workerConversations(events).catch(() => [])).length;
    const { messages, asked, chunks } = await runAgent(b, how);
    if (how === 'streamed') t.ok(chunks > 2, `the model's answers came streamed (${chunks} chunks)`);
    else t.equal(chunks, 0, 'buffered: no chunks');
    const [question, call, result, last] = messages;
    t.same(
      messages.map((m) => m.type),
      ['human', 'ai', 'tool', 'ai'],
      `${how}: question, call, tool result, answer`,
    );
    t.equal(question?.content, 'Weather in Berlin?');
    const id = call?.tool_calls?.[0]?.id;
    t.match(call?.tool_calls, [{ name: 'get_weather', args: { city: 'Berlin' } }], `${how}: the call LangChain parsed`);
    t.same(asked, ['Berlin'], `${how}: the tool ran once`);
    t.match(result, { name: 'get_weather', tool_call_id: id, content: '{"temperature":21}' }, `${how}: LangChain names the tool message`);
    t.equal(last?.content, 'The tool answered: {"temperature":21}', `${how}: the loop ended with the model's text about the tool result`);
    t.same(last?.tool_calls, [], `${how}: no further call`);

    // What the worker got at the agent's second model call: the call, then the tool message with its name.
    const conversations = (await workerConversations(events)).slice(before);
    t.equal(conversations.length, 2, `${how}: two model calls reached the worker`);
    const second = conversations[1] ?? [];
    t.match(second.at(-2), { role: 'assistant', tool_calls: [{ id, function: { name: 'get_weather', arguments: '{"city":"Berlin"}' } }] }, `${how}: the call went back`);
    t.match(second.at(-1), { role: 'tool', name: 'get_weather', tool_call_id: id, content: '{"temperature":21}' }, `${how}: the tool message reached the worker with its name`);
  }
});

/**
 * Both majors through the requests and answers as openai 6 types them. openai 7's types differ
 * only in what a newer API adds (a service tier `fast` in an answer, branded header types), so
 * its client is cast to this; what each answer holds is checked at run time against openapi.json.
 */
interface Client {
  chat: {
    completions: {
      create(body: ChatCompletionCreateParamsNonStreaming): Promise<ChatCompletion>;
      create(body: ChatCompletionCreateParamsStreaming): Promise<AsyncIterable<ChatCompletionChunk>>;
    };
  };
}
const clients = (b: Built): Array<[string, Client]> => [
  ['openai 6', new OpenAI6({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 120_000 })],
  ['openai 7', new OpenAI7({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 120_000 }) as unknown as Client],
];

/** A model that starts a tool call at once whenever it may (the tool-call token's bias), and runs to max_tokens. */
async function callingModel(t: Test) {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir, 'calling.gguf', { toolCallBias: 30 });
  return serve(t, await llamaServerPath(), 'tiny', model);
}

const isJson = (text: string) => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

t.test('a tool call cut by the token limit, sent back whole, is answered by the real llama-server (openai 6 and 7)', async (t) => {
  const b = await callingModel(t);
  const tools = [{ type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city', parameters: PARAMETERS } }];
  const question = { role: 'user' as const, content: 'Weather in Berlin?' };
  for (const [name, client] of clients(b)) {
    // 50 tokens end the call inside its arguments (`{ "city" : ` and so on): the model starts the call at once.
    const cut = await client.chat.completions.create({ model: 'tiny', messages: [question], tools, max_tokens: 50, seed: 7 });
    const message = cut.choices[0]?.message;
    const call = message?.tool_calls?.[0];
    t.equal(cut.choices[0]?.finish_reason, 'length', `${name}: the token limit ended the answer`);
    t.equal(call?.type === 'function' ? call.function.name : undefined, 'get_weather', `${name}: inside a call`);
    const args = call?.type === 'function' ? call.function.arguments : '';
    t.notOk(isJson(args), `${name}: whose arguments are cut (${JSON.stringify(args)})`);

    // As OpenAI's guide does: the whole assistant message back, then the tool's result.
    const answered = await client.chat.completions.create({
      model: 'tiny',
      max_tokens: 4,
      tools,
      messages: [question, message!, { role: 'tool', tool_call_id: call?.id ?? '', content: 'The call was cut off; ask again.' }],
    });
    matchesSchema(t, 'CreateChatCompletionResponse', answered, `${name}: the answer matches CreateChatCompletionResponse`);
    t.equal(answered.choices[0]?.message.role, 'assistant', `${name}: the worker answered`);
    t.ok((answered.usage?.prompt_tokens ?? 0) > (cut.usage?.prompt_tokens ?? 0) + 20, `${name}: the cut call and the result reached the worker's prompt (${answered.usage?.prompt_tokens} > ${cut.usage?.prompt_tokens} tokens)`);
  }
});

t.test("the chat routes' key cases through openai 6 and openai 7: JSON, stream, tools, structured output", async (t) => {
  const b = await callingModel(t);
  const tools = [{ type: 'function' as const, function: { name: 'get_weather', description: 'The weather in a city', parameters: PARAMETERS } }];
  for (const [name, client] of clients(b)) {
    const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hello', name: 'alice' }], max_tokens: 6 });
    matchesSchema(t, 'CreateChatCompletionResponse', answer, `${name}: the JSON answer matches CreateChatCompletionResponse`);
    t.equal(answer.model, 'tiny');
    t.equal(answer.usage?.completion_tokens, 6, `${name}: to the token limit`);

    const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    let chunks = 0;
    let usage: { completion_tokens: number } | undefined;
    for await (const chunk of stream) {
      chunks += 1;
      matchesSchema(t, 'CreateChatCompletionStreamResponse', chunk, `${name}: chunk ${chunks} matches CreateChatCompletionStreamResponse`);
      if (chunk.usage) usage = chunk.usage;
    }
    t.ok(chunks > 2, `${name}: the stream came in chunks (${chunks})`);
    t.equal(usage?.completion_tokens, 6, `${name}: the last chunk carries the usage`);

    // The model calls again and again until max_tokens: the first calls are whole.
    const called = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Weather in Berlin?' }], tools, max_tokens: 200, seed: 7 });
    matchesSchema(t, 'CreateChatCompletionResponse', called, `${name}: a tool call answer matches the schema`);
    const call = called.choices[0]?.message.tool_calls?.[0];
    const args = call?.type === 'function' ? call.function.arguments : '';
    t.ok(isJson(args) && ['Berlin', 'Paris'].includes((JSON.parse(args) as { city?: string }).city ?? ''), `${name}: the first call's arguments follow the tool schema (${args})`);
    const followUp = await client.chat.completions.create({
      model: 'tiny',
      max_tokens: 3,
      messages: [
        { role: 'user', content: 'Weather in Berlin?' },
        { role: 'assistant', content: null, tool_calls: call ? [call] : [] },
        // `name` on a tool message: not in OpenAI's types, sent by LangChain, taken by OpenAI.
        { role: 'tool', tool_call_id: call?.id ?? 'x', content: JSON.stringify(WEATHER.Berlin), name: 'get_weather' } as { role: 'tool'; tool_call_id: string; content: string },
      ],
    });
    t.equal(followUp.choices[0]?.message.role, 'assistant', `${name}: the tool result answered`);

    const structured = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'yes or no?' }],
      max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'pick', schema: { type: 'object', properties: { pick: { type: 'string', enum: ['yes', 'no'] } }, required: ['pick'] } } },
    });
    const picked = JSON.parse(structured.choices[0]?.message.content ?? '') as { pick: string };
    t.ok(['yes', 'no'].includes(picked.pick), `${name}: structured output follows the json_schema`);
  }
});
