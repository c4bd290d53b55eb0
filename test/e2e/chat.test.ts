// The official `openai` client against the real service with the real llama-server on a tiny
// generated model: JSON and streamed answers validated against OpenAI's schema, tools and
// structured output, profile swaps, revisions, slots, a killed worker, and the reasoning headers.
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, streamFailure, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';
import { alive, until } from '../helpers/until.js';

interface Status {
  workers: Array<{ kind: string; profile_id: string | null; state: string; pid: number | null; generation?: number }>;
}

async function setUp(t: Test, profiles: Array<{ name: string; slots?: number; context?: number }>) {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const ids: Record<string, string> = {};
  for (const p of profiles) {
    const response = await b.admin('POST', '/api/v1/profiles', { name: p.name, category: 'chat', params: { model, context: p.context ?? 2048, slots: p.slots ?? 1 } });
    t.equal(response.status, 201, `profile ${p.name} created`);
    const id = ((await response.json()) as { id: string }).id;
    ids[p.name] = id;
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  }
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  return { b, client, ids, model, dir };
}

async function chatWorker(b: Built) {
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
  return status.workers.find((w) => w.kind === 'chat');
}

t.test('JSON and streamed answers through the openai client validate against the schema', async (t) => {
  const { b, client } = await setUp(t, [{ name: 'tiny' }]);
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12 });
  matchesSchema(t, 'CreateChatCompletionResponse', answer, 'the JSON answer matches CreateChatCompletionResponse');
  t.equal(answer.model, 'tiny', 'model is the profile name');
  t.equal(answer.usage?.completion_tokens, 12);
  t.equal(answer.choices[0]?.finish_reason, 'length');

  const stream = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 8,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let usage: unknown;
  for await (const chunk of stream) {
    chunks += 1;
    matchesSchema(t, 'CreateChatCompletionStreamResponse', chunk, `chunk ${chunks} matches CreateChatCompletionStreamResponse`);
    text += chunk.choices[0]?.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  t.ok(chunks >= 8, `the stream came in chunks (${chunks})`);
  t.ok(text.length > 0);
  t.match(usage, { completion_tokens: 8 }, 'the final chunk carries usage');
  const worker = await chatWorker(b);
  t.equal(worker?.state, 'loaded', 'the worker stays loaded after the answers');
});

t.test('tools, structured output, reasoning headers and request errors', async (t) => {
  const { b, client } = await setUp(t, [{ name: 'tiny', context: 4096 }]);
  const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'] },
      },
    },
  ];
  // The tiny model never ends a turn on its own, so it calls again and again until max_tokens: the
  // first call is complete long before that.
  const called = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Weather in Berlin?' }], tools, max_tokens: 300, seed: 7 });
  matchesSchema(t, 'CreateChatCompletionResponse', called, 'a tool call answer matches the schema');
  const call = called.choices[0]?.message.tool_calls?.[0];
  t.ok(['tool_calls', 'length'].includes(called.choices[0]?.finish_reason ?? ''), 'the worker answered with tool calls');
  t.equal(call?.type === 'function' ? call.function.name : undefined, 'get_weather');
  const args = JSON.parse(call?.type === 'function' ? call.function.arguments : '{}') as { city?: string };
  t.ok(args.city === 'Berlin' || args.city === 'Paris', 'the arguments follow the tool schema');

  // The tool result goes back as a tool message; the worker answers again.
  const followUp = await client.chat.completions.create({
    model: 'tiny',
    max_tokens: 5,
    messages: [
      { role: 'user', content: 'Weather in Berlin?' },
      { role: 'assistant', content: null, tool_calls: call ? [call] : [] },
      { role: 'tool', tool_call_id: call?.id ?? 'x', content: '{"temperature": 21}' },
    ],
  });
  t.equal(followUp.choices[0]?.message.role, 'assistant');

  const structured = await client.chat.completions.create({
    model: 'tiny',
    messages: [{ role: 'user', content: 'a number' }],
    max_tokens: 200,
    response_format: {
      type: 'json_schema',
      json_schema: { name: 'pick', schema: { type: 'object', properties: { pick: { type: 'string', enum: ['yes', 'no'] } }, required: ['pick'] } },
    },
  });
  const parsed = JSON.parse(structured.choices[0]?.message.content ?? '') as { pick: string };
  t.ok(['yes', 'no'].includes(parsed.pick), 'structured output follows the json_schema');

  // reasoning_effort: passed on, ultra mapped to max, headers on JSON and SSE answers.
  const raw = await client.chat.completions
    .create({ model: 'tiny', messages: [{ role: 'user', content: 'think' }], max_tokens: 2, reasoning_effort: 'ultra' as 'high' })
    .withResponse();
  t.equal(raw.response.headers.get('x-service-reasoning-requested'), 'ultra');
  t.equal(raw.response.headers.get('x-service-reasoning-effective'), 'max');
  t.equal(raw.response.headers.get('x-service-reasoning-semantics'), 'model-template-hint');
  const streamed = await b.api('POST', '/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 2, stream: true, reasoning_effort: 'low' });
  t.equal(streamed.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.equal(streamed.headers.get('x-accel-buffering'), 'no');
  t.equal(streamed.headers.get('x-service-reasoning-effective'), 'low');
  t.match(await streamed.text(), /data: \[DONE\]/);
  const unset = await b.api('POST', '/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 1, reasoning_effort: null });
  t.equal(unset.status, 200);
  t.equal(unset.headers.get('x-service-reasoning-requested'), null, 'null means not set: no headers');

  // Errors, in the OpenAI body.
  const errorOf = async (body: unknown) => {
    const response = await b.api('POST', '/v1/chat/completions', body);
    return { status: response.status, body: (await response.json()) as { error: { code: string; param: string | null; message: string } } };
  };
  const unknown = await errorOf({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], cache_prompt: true });
  t.same([unknown.status, unknown.body.error.code, unknown.body.error.param], [400, 'unknown_parameter', 'cache_prompt'], 'an extension field is rejected');
  const missing = await errorOf({ model: 'nope', messages: [{ role: 'user', content: 'x' }] });
  t.same([missing.status, missing.body.error.code], [404, 'model_not_found']);
  const vision = await errorOf({ model: 'tiny', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] });
  t.same([vision.status, vision.body.error.code], [400, 'invalid_value']);
  t.match(vision.body.error.message, /only text content/);
  const sdkError = await client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
  t.ok(sdkError instanceof OpenAI.NotFoundError, 'the openai client sees a NotFoundError');

  // Requests llama-server's JSON parser would refuse with its C++ exception text: a lone surrogate
  // in a message (the service refuses it itself before any worker), a number out of range in tool
  // call arguments (the worker's refusal). The client gets the class and a summary; the log gets
  // the worker's exception without the request's text.
  const surrogate = await errorOf({ model: 'tiny', messages: [{ role: 'user', content: 'PROMPT-4242 \ud800' }], max_tokens: 2 });
  const overflow = await errorOf({
    model: 'tiny',
    max_tokens: 2,
    messages: [
      { role: 'user', content: 'x' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{"a":1e999}' } }] },
      { role: 'tool', tool_call_id: 'a', content: 'y' },
    ],
  });
  for (const [what, answer] of [['a lone surrogate', surrogate], ['1e999 in tool call arguments', overflow]] as const) {
    t.same([answer.status, answer.body.error.code], [400, 'invalid_value'], `${what}: the client's 400`);
    t.notMatch(answer.body.error.message, /json\.exception|last read|PROMPT-4242|1e999/, `${what}: no parser text and no request text in "${answer.body.error.message}"`);
  }
  t.match(overflow.body.error.message, /Failed to parse tool call arguments as JSON/, "llama-server's own words stay");
  const log = b.logLines.join('');
  t.match(log, /\[json\.exception\.out_of_range\.406\] number overflow/, "the log has the worker's parser exception");
  t.notMatch(log, /PROMPT-4242|1e999/, "but not the request's text");
  t.equal((await errorOf({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 })).status, 200, 'the worker answers the next request');
});

interface EndpointStatus {
  workers: Array<{ kind: string; profile_id: string | null; revision: number | null; state: string; pid: number | null; last: string | null; since: string | null }>;
  queue: { waiting: Array<{ profile_id: string }>; running: Array<{ profile_id: string }> };
}
const endpointStatus = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;

t.test('two profiles swap, a new revision restarts the worker with the stored parameters', async (t) => {
  const { b, client, ids } = await setUp(t, [{ name: 'alpha' }, { name: 'beta' }]);
  const ask = (model: string) => client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });

  const asked = Date.now();
  t.equal((await ask('alpha')).model, 'alpha');
  const first = (await endpointStatus(b)).workers.find((w) => w.kind === 'chat');
  t.equal(first?.profile_id, ids.alpha, 'alpha is loaded');
  t.ok(first?.pid && alive(first.pid), 'its llama-server runs');
  const firstSince = Date.parse(first?.since ?? '');
  t.ok(firstSince >= asked && firstSince <= Date.now(), `since (${first?.since}) is when the request started the worker`);
  await ask('alpha');
  t.equal((await endpointStatus(b)).workers.find((w) => w.kind === 'chat')?.since, first?.since, 'a request on the loaded worker does not move since');

  t.equal((await ask('beta')).model, 'beta', 'beta answers after the swap');
  const second = (await endpointStatus(b)).workers.find((w) => w.kind === 'chat');
  t.equal(second?.profile_id, ids.beta, 'beta is loaded');
  t.not(second?.pid, first?.pid, 'beta runs in a new process');
  t.ok(Date.parse(second?.since ?? '') > firstSince, 'since is the start of the new process');
  t.notOk(alive(first!.pid!), "alpha's process was ended before beta started");

  // A new revision of beta: the worker is unloaded, then loaded with the new revision at once,
  // without waiting for a request (spec 3.2), with the stored parameters.
  const profile = (await (await b.admin('GET', `/api/v1/profiles/${ids.beta}`)).json()) as { revision: number; params: Record<string, unknown> };
  const savedAt = Date.now();
  const saved = await b.admin('PUT', `/api/v1/profiles/${ids.beta}`, { ...profile, params: { ...profile.params, context: 1024 } });
  t.equal(saved.status, 200);
  const third = await until('the new revision loaded without a request', async () => {
    const chat = (await endpointStatus(b)).workers.find((w) => w.kind === 'chat');
    return chat?.revision === profile.revision + 1 && chat.state === 'loaded' ? chat : undefined;
  });
  t.comment(`from the save to the new revision loaded: ${Date.now() - savedAt} ms`);
  t.not(third.pid, second?.pid, 'in a new process');
  t.notOk(alive(second!.pid!), 'the old revision\'s process was ended');
  t.equal((await ask('beta')).model, 'beta');
  t.equal((await endpointStatus(b)).workers.find((w) => w.kind === 'chat')?.pid, third.pid, 'the next request is answered by the restarted worker, not another start');
  const cmdline = await import('node:fs/promises').then((fs) => fs.readFile(`/proc/${third.pid}/cmdline`, 'utf8'));
  const args = cmdline.split('\0');
  t.equal(args[args.indexOf('-c') + 1], '1024', 'the stored context is the -c of the new start');
  t.ok(args.includes('--kv-unified') && args.includes('q4_0') && args.includes('--no-webui'), 'the fixed backend defaults');
  const keyFile = args[args.indexOf('--api-key-file') + 1] ?? '';
  const stat = await import('node:fs/promises').then((fs) => fs.stat(keyFile));
  t.equal(stat.mode & 0o777, 0o600, 'the internal key file has mode 0600');

  // Unpublish everything and stop: the worker ends and its key file goes with it.
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  await until('the worker to be unloaded', async () => ((await endpointStatus(b)).workers.some((w) => w.kind === 'chat') ? undefined : true));
  t.notOk(alive(third.pid!), 'the endpoint stop ended the worker');
  const gone = await import('node:fs/promises').then((fs) => fs.stat(keyFile).then(() => false, () => true));
  t.ok(gone, 'the key file was removed');
});

t.test('parallel requests up to the slot count run together, the next waits; kill -9 mid-stream', async (t) => {
  const dir = await tempDir(t);
  // A bigger model so that answers take long enough to watch.
  const model = await tinyModelIn(dir, 'slow.gguf', { embedding: 128, heads: 4, layers: 6 });
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'slow', category: 'chat', params: { model, context: 8192, slots: 2 } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 120_000 });
  await client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'warm up' }], max_tokens: 1 });

  const long = () => client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'go' }], max_tokens: 400 });
  const began = Date.now();
  const answers = [long(), long(), long()];
  const seen = await until('two running and one waiting', async () => {
    const status = await endpointStatus(b);
    return status.queue.running.length === 2 && status.queue.waiting.length === 1 ? status : undefined;
  });
  t.equal(seen.queue.running.length, 2, 'two answers run together on two slots');
  t.equal(seen.queue.waiting.length, 1, 'the third waits in the queue');
  const done = await Promise.all(answers);
  // 1200 tokens on two slots: the abandoned 4000-token stream below would need longer than this on
  // its own slot, so a slot freed within this time was freed by the client's leaving, however loaded the machine.
  const threeAnswersMs = Date.now() - began;
  t.same(done.map((a) => a.usage?.completion_tokens), [400, 400, 400], 'all three answered in full');

  // kill -9 of the worker mid-stream: the client gets an error event, the next request reloads.
  const before = (await endpointStatus(b)).workers.find((w) => w.kind === 'chat');
  const stream = await client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'go' }], max_tokens: 4000, stream: true });
  const failure = await streamFailure(stream, (chunks) => {
    if (chunks === 5) process.kill(before!.pid!, 'SIGKILL');
  });
  t.ok(failure instanceof OpenAI.APIError, 'the stream ended with an error event');
  t.match((failure as InstanceType<typeof OpenAI.APIError>).error, { code: 'worker_failed', type: 'server_error' });
  t.match((failure as Error).message, /SIGKILL/, 'the message names how the worker ended and the likely causes');
  const after = await client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'again' }], max_tokens: 2 });
  t.equal(after.choices[0]?.finish_reason, 'length', 'the next request reloads the worker and answers');
  const reloaded = (await endpointStatus(b)).workers.find((w) => w.kind === 'chat');
  t.not(reloaded?.pid, before?.pid, 'in a new process');

  // A client that goes away frees its slot at once.
  const controller = new AbortController();
  const abandoned = await client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'go' }], max_tokens: 4000, stream: true }, { signal: controller.signal });
  for await (const chunk of abandoned) {
    if (chunk.choices.length > 0) break;
  }
  controller.abort();
  const freed = await until('the slot to be freed', async () => {
    const status = await endpointStatus(b);
    return status.queue.running.length === 0 ? status : undefined;
  }, threeAnswersMs);
  t.same(freed.queue.running, [], `the abandoned stream released its reservation within ${threeAnswersMs} ms, the time of three 400-token answers`);
});
