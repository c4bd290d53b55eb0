// OpenAI's Responses API (`POST /v1/responses`) against the real service with the real
// llama-server on a tiny generated model, driven by the clients that speak it by default: the
// official `openai` client (`responses.create`, `output_text`, the `responses.stream()` helper, a
// function-tool round trip, a kept response continued and retrieved) and the AI SDK's default
// OpenAI provider (`generateText`, `streamText`, a second turn by item_reference). Every JSON answer is validated against OpenAI's `Response` and every stream event
// against `ResponseStreamEvent`, with the sequence numbers and indexes checked in order.
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, jsonSchema, streamText, tool, type JSONSchema7 } from 'ai';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';

async function setUp(t: Test): Promise<{ b: Built; client: OpenAI }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'tiny', category: 'chat', params: { model, context: 4096, slots: 1 } });
  t.equal(created.status, 201, 'profile created');
  const { id } = (await created.json()) as { id: string };
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, 'profile published');
  // An extension beyond the specification, off by default (CONTRACT section 9; test/routes/extensions.test.ts).
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'the Responses API turned on');
  return { b, client: new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 }) };
}

type StreamEvent = OpenAI.Responses.ResponseStreamEvent;

/**
 * Checks a whole stream's events: each against ResponseStreamEvent, the sequence numbers 0, 1, 2…,
 * `response.created` first and one ending event last, and each delta on an item that was added
 * (at its output index, with its id) and not yet done.
 */
function checkEvents(t: Test, events: StreamEvent[], what: string): void {
  events.forEach((event, i) => matchesSchema(t, 'ResponseStreamEvent', event, `${what}: event ${i} (${event.type}) matches ResponseStreamEvent`));
  t.same(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
    `${what}: sequence numbers 0 to ${events.length - 1}`,
  );
  t.equal(events[0]?.type, 'response.created', `${what}: response.created first`);
  t.equal(events[1]?.type, 'response.in_progress', `${what}: response.in_progress second`);
  const ends = events.filter((e) => ['response.completed', 'response.incomplete', 'response.failed'].includes(e.type));
  t.same([ends.length, ends[0]], [1, events.at(-1)], `${what}: one ending event, the last`);
  const items = new Map<number, { id: string; done: boolean }>();
  const wrong: string[] = [];
  for (const event of events) {
    if (event.type === 'response.output_item.added') {
      if (event.output_index !== items.size) wrong.push(`item ${event.item.id} added at ${event.output_index}, not ${items.size}`);
      items.set(event.output_index, { id: event.item.id ?? '', done: false });
    } else if ('item_id' in event && 'output_index' in event) {
      const item = items.get(event.output_index);
      if (item?.id !== event.item_id || item.done) wrong.push(`${event.type} for ${event.item_id} at ${event.output_index}`);
    }
    if (event.type === 'response.output_item.done') {
      const item = items.get(event.output_index);
      if (!item || item.done) wrong.push(`done twice or never added: ${event.output_index}`);
      else item.done = true;
    }
  }
  t.same(wrong, [], `${what}: every event is on an item that was added and not yet done`);
}

t.test('responses.create and responses.stream() through the openai client', async (t) => {
  const { b, client } = await setUp(t);
  const answer = await client.responses.create({ model: 'tiny', input: 'Hello', instructions: 'Be brief.', max_output_tokens: 12 });
  matchesSchema(t, 'Response', answer, 'the JSON answer matches Response');
  t.match(answer, { object: 'response', model: 'tiny', status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, instructions: 'Be brief.', max_output_tokens: 12, error: null, store: true });
  t.match(answer.id, /^resp_[0-9a-f]{32}$/);
  t.equal(answer.usage?.output_tokens, 12, 'the usage counts the 12 tokens');
  t.ok((answer.usage?.input_tokens ?? 0) > 0, 'and the input');
  t.equal(answer.output.length, 1, 'one message');
  t.ok(answer.output_text.length > 0, `output_text is the message's text (${JSON.stringify(answer.output_text)})`);

  // Message items with text parts, roles, and an earlier answer as an assistant message.
  const items = await client.responses.create({
    model: 'tiny',
    max_output_tokens: 4,
    input: [
      { role: 'developer', content: 'Answer in one word.' },
      { role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
      { type: 'message', role: 'assistant', id: answer.output[0]?.id ?? 'msg_x', status: 'completed', content: [{ type: 'output_text', text: answer.output_text, annotations: [] }] },
      { role: 'user', content: 'Again' },
    ],
  });
  matchesSchema(t, 'Response', items, 'an answer to message items matches Response');
  t.equal(items.usage?.output_tokens, 4);
  t.ok((items.usage?.input_tokens ?? 0) > (answer.usage?.input_tokens ?? 0), 'the conversation reached the worker: more input tokens than the first request');

  // Structured output: the grammar ends the answer, so it is complete.
  const schema = { type: 'object', properties: { pick: { type: 'string', enum: ['yes', 'no'] } }, required: ['pick'], additionalProperties: false };
  const structured = await client.responses.create({ model: 'tiny', input: 'yes or no?', max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'pick', schema, strict: true } } });
  matchesSchema(t, 'Response', structured, 'a structured answer matches Response');
  t.equal(structured.status, 'completed', 'the JSON schema ends the answer: completed');
  t.ok(['yes', 'no'].includes((JSON.parse(structured.output_text) as { pick: string }).pick), `the text follows the schema (${structured.output_text})`);
  t.type(structured.completed_at, 'number');

  // The stream helper: every event valid and in order, the final response whole.
  const helper = client.responses.stream({ model: 'tiny', input: 'yes or no?', max_output_tokens: 200, text: { format: { type: 'json_schema', name: 'pick', schema, strict: true } } });
  const events: StreamEvent[] = [];
  let deltas = '';
  helper.on('response.output_text.delta', (event) => (deltas += event.delta));
  for await (const event of helper) events.push(event);
  const final = await helper.finalResponse();
  checkEvents(t, events, 'the helper stream');
  matchesSchema(t, 'Response', final, 'the final response matches Response');
  t.equal(final.status, 'completed');
  t.equal(events.at(-1)?.type, 'response.completed', 'the stream ends with response.completed');
  t.equal(final.output_text, deltas, 'the final text is the deltas in order');
  t.ok(['yes', 'no'].includes((JSON.parse(final.output_text) as { pick: string }).pick));
  t.ok(events.filter((e) => e.type === 'response.output_text.delta').length > 3, 'the text came in many deltas');

  // A plain stream with the token limit: response.incomplete with the usage, and the headers.
  const raw = await b.api('POST', '/v1/responses', { model: 'tiny', input: 'Hello', max_output_tokens: 8, stream: true, reasoning: { effort: 'ultra' } });
  t.equal(raw.status, 200);
  t.equal(raw.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.equal(raw.headers.get('x-accel-buffering'), 'no');
  t.same(
    ['requested', 'effective', 'semantics'].map((h) => raw.headers.get(`x-service-reasoning-${h}`)),
    ['ultra', 'max', 'model-template-hint'],
    "reasoning.effort has the chat route's headers",
  );
  const text = await raw.text();
  t.notMatch(text, /\[DONE\]/, 'no [DONE]: the Responses stream ends with its last event');
  const sse = text.trim().split('\n\n');
  t.ok(sse.every((e) => /^event: [\w.]+\ndata: \{/.test(e)), 'every event has its event: line and its data');
  const plain = sse.map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)) as StreamEvent);
  checkEvents(t, plain, 'a plain stream');
  const last = plain.at(-1);
  t.match(last, { type: 'response.incomplete', response: { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 8 }, reasoning: { effort: 'max' } } });
  t.equal(plain.filter((e) => e.type === 'response.output_text.delta').length, 8, 'one delta per token');

  // Log probabilities on request.
  const logprobs = await client.responses.create({ model: 'tiny', input: 'Hello', max_output_tokens: 3, include: ['message.output_text.logprobs'], top_logprobs: 2 });
  matchesSchema(t, 'Response', logprobs, 'an answer with logprobs matches Response');
  const part = logprobs.output[0]?.type === 'message' ? logprobs.output[0].content[0] : undefined;
  t.equal(part?.type === 'output_text' ? part.logprobs?.length : undefined, 3, 'one logprob per token');
  t.equal(part?.type === 'output_text' ? part.logprobs?.[0]?.top_logprobs.length : undefined, 2, 'with the top 2');

  const missing = await client.responses.create({ model: 'nope', input: 'x' }).catch((e: unknown) => e);
  t.ok(missing instanceof OpenAI.NotFoundError, 'an unknown model is the same 404 as for chat completions');
  t.match((missing as InstanceType<typeof OpenAI.NotFoundError>).error, { code: 'model_not_found', param: 'model' });

  // Kept for a while (responseMemory.ts): retrieved, and continued by previous_response_id.
  const retrieved = await client.responses.retrieve(answer.id);
  matchesSchema(t, 'Response', retrieved, 'a retrieved Response matches Response');
  t.same(retrieved, answer, 'responses.retrieve gives the kept Response');
  const continued = await client.responses.create({ model: 'tiny', input: 'Again', previous_response_id: answer.id, max_output_tokens: 4 });
  t.equal(continued.previous_response_id, answer.id);
  t.ok((continued.usage?.input_tokens ?? 0) > (answer.usage?.input_tokens ?? 0), 'the kept conversation reached the worker: more input tokens than the first request');
  const unkept = await client.responses.create({ model: 'tiny', input: 'x', previous_response_id: 'resp_00000000000000000000000000000000' }).catch((e: unknown) => e);
  t.ok(unkept instanceof OpenAI.BadRequestError, 'a previous_response_id that is not kept is a 400');
  t.match((unkept as InstanceType<typeof OpenAI.BadRequestError>).error, { code: 'invalid_value', param: 'previous_response_id', message: /is not kept here: this service keeps responses only for a while/ });
});

/** The weather table the function tool answers from. */
const WEATHER: Record<string, { temperature: number }> = { Berlin: { temperature: 21 }, Paris: { temperature: 24 } };
const PARAMETERS: JSONSchema7 = { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'], additionalProperties: false };

const wholeJson = (text: string) => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

t.test('a function-tool round trip through the openai client: function_call out, function_call_output in', async (t) => {
  const { client } = await setUp(t);
  const tools: OpenAI.Responses.FunctionTool[] = [{ type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: { ...PARAMETERS }, strict: true }];
  const question: OpenAI.Responses.EasyInputMessage = { role: 'user', content: 'Weather in Berlin?' };
  const ask: OpenAI.Responses.ResponseCreateParamsNonStreaming = { model: 'tiny', input: [question], tools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 300 };
  const calls = (response: OpenAI.Responses.Response) => response.output.filter((item): item is OpenAI.Responses.ResponseFunctionToolCall => item.type === 'function_call');
  // The tiny model (random weights) calls again and again until max_output_tokens: the first calls
  // are complete. Now and then it spends the tokens on text before its first call is whole (about
  // one answer in fifty), so it is asked up to three times, as examples/tools.mjs does.
  let called = await client.responses.create(ask);
  for (let again = 0; again < 2 && !calls(called).some((call) => wholeJson(call.arguments)); again++) called = await client.responses.create(ask);
  matchesSchema(t, 'Response', called, 'the answer with function calls matches Response');
  t.same(called.tools, tools, 'the tools are echoed');
  const whole = calls(called).filter((call) => wholeJson(call.arguments));
  t.ok(whole.length > 0, `complete function calls came back (${calls(called).length} calls, ${whole.length} complete)`);
  for (const call of whole) {
    t.equal(call.name, 'get_weather');
    t.match(call.id, /^fc_/);
    t.ok(call.call_id.length > 0, 'a call_id');
    t.ok(['Berlin', 'Paris'].includes((JSON.parse(call.arguments) as { city: string }).city), `the arguments follow the schema (${call.arguments})`);
  }

  // The calls go back with their outputs; the worker answers again.
  const outputs = whole.map((call) => ({ type: 'function_call_output' as const, call_id: call.call_id, output: JSON.stringify(WEATHER[(JSON.parse(call.arguments) as { city: string }).city]) }));
  const answered = await client.responses.create({ model: 'tiny', input: [question, ...whole, ...outputs], tools, max_output_tokens: 6 });
  matchesSchema(t, 'Response', answered, 'the answer to the function outputs matches Response');
  t.ok((answered.usage?.input_tokens ?? 0) > (called.usage?.input_tokens ?? 0), 'the calls and their outputs reached the worker');

  // The same call streamed: the arguments as deltas, then done with the whole arguments.
  const streamed = async () => {
    const events: StreamEvent[] = [];
    for await (const event of await client.responses.create({ ...ask, stream: true })) events.push(event);
    return events;
  };
  const hasWholeCall = (events: StreamEvent[]) => events.some((e) => e.type === 'response.function_call_arguments.done' && wholeJson(e.arguments));
  let events = await streamed();
  for (let again = 0; again < 2 && !hasWholeCall(events); again++) events = await streamed();
  checkEvents(t, events, 'a stream with function calls');
  const added = events.find((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
  t.ok(added, 'a function_call item was added');
  const itemId = added?.type === 'response.output_item.added' ? added.item.id : undefined;
  const argDeltas = events.filter((e) => e.type === 'response.function_call_arguments.delta' && e.item_id === itemId).map((e) => (e.type === 'response.function_call_arguments.delta' ? e.delta : ''));
  const argsDone = events.find((e) => e.type === 'response.function_call_arguments.done' && e.item_id === itemId);
  const endEvent = events.at(-1);
  const lastCall = endEvent && 'response' in endEvent ? endEvent.response.output.find((item) => item.id === itemId) : undefined;
  t.ok(argDeltas.length > 1, `the arguments came in deltas (${argDeltas.length})`);
  t.equal(lastCall?.type === 'function_call' ? lastCall.arguments : undefined, argDeltas.join(''), 'the final item holds the deltas in order');
  if (argsDone?.type === 'response.function_call_arguments.done') t.equal(argsDone.arguments, argDeltas.join(''), 'arguments.done holds them whole');
});

t.test("the AI SDK's default OpenAI provider: generateText, streamText and a tool", async (t) => {
  const { b } = await setUp(t);
  const openai = createOpenAI({ baseURL: `${b.apiUrl()}/v1`, apiKey: TOKEN });
  const model = openai('tiny');
  t.equal(model.provider, 'openai.responses', 'the default provider speaks the Responses API');

  const generated = await generateText({ model, prompt: 'Hello', maxOutputTokens: 16, maxRetries: 0 });
  t.ok(generated.text.length > 0, `generateText gives the text (${JSON.stringify(generated.text)})`);
  t.equal(generated.finishReason, 'length');
  t.equal(generated.usage.outputTokens, 16);
  t.ok((generated.usage.inputTokens ?? 0) > 0);
  t.match(generated.response.id, /^resp_/);
  t.equal(generated.response.modelId, 'tiny');

  const streamed = streamText({ model, system: 'Be brief.', prompt: 'Hello', maxOutputTokens: 16, maxRetries: 0 });
  let text = '';
  let parts = 0;
  for await (const part of streamed.textStream) {
    text += part;
    parts += 1;
  }
  t.ok(parts > 3, `streamText streams the text (${parts} parts)`);
  t.equal(text, await streamed.text);
  t.equal(await streamed.finishReason, 'length');
  t.equal((await streamed.usage).outputTokens, 16);

  // A tool call: the SDK parses the function_call item and its arguments.
  const tools = { get_weather: tool({ description: 'The weather in a city', inputSchema: jsonSchema<{ city: 'Berlin' | 'Paris' }>(PARAMETERS) }) };
  // Asked up to three times, as above: the tiny model now and then spends its tokens on text.
  const calling = async () => generateText({ model, prompt: 'Weather in Berlin?', tools, toolChoice: { type: 'tool', toolName: 'get_weather' }, maxOutputTokens: 300, maxRetries: 0 });
  const call = (await calling().catch(calling).catch(calling)).toolCalls[0];
  t.equal(call?.toolName, 'get_weather', 'generateText sees the function call');
  t.ok(call && ['Berlin', 'Paris'].includes((call.input as { city: string }).city), `with its input (${JSON.stringify(call?.input)})`);

  // A second turn: the SDK sends the earlier answer back. By default (its `store` is true) it names
  // that answer by an item_reference, which the service finds in its memory of recent responses;
  // with `store: false` it sends the answer itself. (test/e2e/aiSdkConversation.test.ts runs whole
  // conversations and tool loops on the stand-in worker.)
  const first = await generateText({ model, prompt: 'Hello', maxOutputTokens: 4, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'Hello' }, ...first.response.messages, { role: 'user' as const, content: 'Again' }];
  const referenced = await generateText({ model, messages, maxOutputTokens: 4, maxRetries: 0 });
  t.equal(referenced.usage.outputTokens, 4, 'by default (item_reference) the second turn is answered');
  t.ok((referenced.usage.inputTokens ?? 0) > (first.usage.inputTokens ?? 0), 'with the first answer in its input');
  const second = await generateText({ model, messages, maxOutputTokens: 4, maxRetries: 0, providerOptions: { openai: { store: false } } });
  t.equal(second.usage.outputTokens, 4, 'with store: false the second turn is answered');
  t.equal(second.usage.inputTokens, referenced.usage.inputTokens, 'with the same input: the referenced answer is the one sent whole');
});
