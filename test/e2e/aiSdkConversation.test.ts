// The AI SDK's default OpenAI provider (`createOpenAI(…)(model)`, which
// speaks the Responses API with `store: true`) runs a conversation of two turns, as its docs show
// (`messages.push(...result.response.messages)`), and a tool loop to its end, without special
// options, against the service on the stand-in llama-server's `agent` mode (a call of the first
// tool, then, once the tool's result came, the conversation it got as its answer). It names the
// earlier answers' items by item_reference, which the service's memory of recent responses
// resolves (src/workers/chat/responseMemory.ts). Run with the pinned majors (ai 6 with
// @ai-sdk/openai 3) and the current ones (ai 7 with @ai-sdk/openai 4, as the npm aliases `ai7` and
// `ai-sdk-openai4`).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import * as openai3 from '@ai-sdk/openai';
import * as ai6 from 'ai';
import * as openai4 from 'ai-sdk-openai4';
import * as ai7 from 'ai7';
import t, { type Test } from 'tap';
import { servedChat, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';

/** What these tests use of one major of the AI SDK and its OpenAI provider (both majors have it in this shape). */
interface Sdk {
  name: string;
  createOpenAI: typeof openai3.createOpenAI;
  generateText: typeof ai6.generateText;
  streamText: typeof ai6.streamText;
  tool: typeof ai6.tool;
  jsonSchema: typeof ai6.jsonSchema;
  stepCountIs: typeof ai6.stepCountIs;
  /** Every message a generateText result adds to the conversation: ai 6's docs push `result.response.messages`; in ai 7 that is the last step's, and `result.responseMessages` holds every step's. */
  messagesOf: (result: { response: { messages: ai6.ModelMessage[] } }) => ai6.ModelMessage[];
}

const SDKS: Sdk[] = [
  { name: 'ai 6 with @ai-sdk/openai 3', ...openai3, ...ai6, messagesOf: (result) => result.response.messages },
  // The types of the next majors differ in details these tests do not use; the calls are the same.
  { name: 'ai 7 with @ai-sdk/openai 4', ...(openai4 as unknown as Pick<Sdk, 'createOpenAI'>), ...(ai7 as unknown as Omit<Sdk, 'name' | 'createOpenAI' | 'messagesOf'>),
    messagesOf: (result) => (result as unknown as { responseMessages: ai6.ModelMessage[] }).responseMessages,
  },
];

async function setUp(t: Test): Promise<Built> {
  const dir = await tempDir(t);
  const params = { model: await tinyModelIn(dir), slots: 1 };
  return servedChat(t, { llamaServer: await fakeLlamaServerIn(dir, 'agent'), name: 'agent', params, responses: true });
}

t.test("the aliases resolve each major's own @ai-sdk/provider-utils, and the providers speak their own specification", async (t) => {
  const require = createRequire(import.meta.url);
  /** The version of `dependency` as `from` resolves it. */
  const versionFrom = (from: string, dependency: string) => {
    const entry = createRequire(require.resolve(from)).resolve(dependency);
    const root = entry.slice(0, entry.lastIndexOf(`${path.sep}dist${path.sep}`));
    return (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }).version;
  };
  t.match(versionFrom('@ai-sdk/openai', '@ai-sdk/provider-utils'), /^4\./, '@ai-sdk/openai 3 gets provider-utils 4');
  t.match(versionFrom('ai-sdk-openai4', '@ai-sdk/provider-utils'), /^5\./, '@ai-sdk/openai 4 (as ai-sdk-openai4) gets provider-utils 5');
  t.match(versionFrom('ai7', '@ai-sdk/provider-utils'), /^5\./, 'ai 7 (as ai7) gets provider-utils 5');
  t.same(
    SDKS.map((sdk) => sdk.createOpenAI({ apiKey: 'x' })('m').specificationVersion),
    ['v3', 'v4'],
    'the language model specifications of ai 6 and ai 7',
  );
});

const WEATHER: Record<string, { temperature: number }> = { Berlin: { temperature: 21 }, Paris: { temperature: 24 } };

for (const sdk of SDKS) {
  t.test(`${sdk.name}: two turns with the default provider, as its docs show them, no special options`, async (t) => {
    const b = await setUp(t);
    const openai = sdk.createOpenAI({ baseURL: `${b.apiUrl()}/v1`, apiKey: TOKEN });
    const model = openai('agent');
    t.equal(model.provider, 'openai.responses', 'the default provider speaks the Responses API');

    // Two turns, as the AI SDK's docs show them.
    const messages: Parameters<typeof sdk.generateText>[0]['messages'] & object = [{ role: 'user', content: 'Hello' }];
    const first = await sdk.generateText({ model, messages, maxRetries: 0 });
    t.equal(first.text, 'user: Hello', 'the first turn');
    messages.push(...sdk.messagesOf(first));
    messages.push({ role: 'user', content: 'Again' });
    const second = await sdk.generateText({ model, messages, maxRetries: 0 });
    t.equal(second.text, 'user: Hello | assistant: user: Hello | user: Again', 'the second turn: the worker got the first answer back');
  });

  t.test(`${sdk.name}: a tool loop to its end with the default provider, no special options`, async (t) => {
    const b = await setUp(t);
    const model = sdk.createOpenAI({ baseURL: `${b.apiUrl()}/v1`, apiKey: TOKEN })('agent');

    // A tool loop: the model calls, the SDK runs the tool and sends its result, the model answers.
    const tools = {
      get_weather: sdk.tool({
        description: 'The weather in a city',
        inputSchema: sdk.jsonSchema<{ city: 'Berlin' | 'Paris' }>({ type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'], additionalProperties: false }),
        execute: async ({ city }) => WEATHER[city],
      }),
    };
    const loop = await sdk.generateText({ model, prompt: 'Weather in Berlin?', tools, stopWhen: sdk.stepCountIs(5), maxRetries: 0 });
    t.equal(loop.steps.length, 2, 'two steps: the call, then the answer');
    t.equal(loop.finishReason, 'stop', 'the loop ran to its end');
    const call = loop.steps[0]?.toolCalls[0];
    t.match(call, { toolName: 'get_weather', input: { city: 'Berlin' } }, 'the model called the tool');
    t.match(loop.steps[0]?.toolResults[0], { output: { temperature: 21 } }, 'the SDK ran it');
    t.equal(
      loop.text,
      `user: Weather in Berlin? | assistant[${call?.toolCallId} get_weather{"city":"Berlin"}]: Let me look that up. | tool(${call?.toolCallId}): {"temperature":21}`,
      'the worker got the call with its text, then its result',
    );

    // The same loop streamed, then one more turn after it.
    const streamed = sdk.streamText({ model, prompt: 'Weather in Berlin?', tools, stopWhen: sdk.stepCountIs(5), maxRetries: 0 });
    t.match(await streamed.text, /^user: Weather in Berlin\? \| assistant\[call_\d+ get_weather\{"city":"Berlin"\}\]: Let me look that up\. \| tool\(call_\d+\): \{"temperature":21\}$/, 'streamText runs the loop to its end');
    t.equal((await streamed.steps).length, 2);
    const after = [{ role: 'user' as const, content: 'Weather in Berlin?' }, ...sdk.messagesOf(loop), { role: 'user' as const, content: 'Thanks' }];
    const thanks = await sdk.generateText({ model, messages: after, maxRetries: 0 });
    t.match(thanks.text, /\| tool\(call_\d+\): \{"temperature":21\} \| assistant: user: Weather in Berlin\?.* \| user: Thanks$/, 'a turn after the loop carries all of it');
  });
}
