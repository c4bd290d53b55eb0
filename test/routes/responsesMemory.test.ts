// The Responses API's memory of recent responses through the listener (src/routes/inference/responses.ts,
// src/workers/chat/responseMemory.ts), on the stand-in llama-server's `agent` mode, which answers
// with the conversation it got: a kept response answers GET /v1/responses/{id}, continues with
// previous_response_id and gives its items to item_reference; one that is not kept is a 400 that
// names it (a 404 for GET); `store: false` keeps nothing; another token reaches nothing; turning the
// Responses API off forgets everything; and no prompt or answer reaches the log or the disk.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { servedChat, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';

type ErrorBody = { error: { message: string; type: string; code: string; param: string | null } };
interface Item {
  type: string;
  id: string;
  call_id?: string;
  content?: Array<{ text: string }>;
}
interface ResponseBody {
  id: string;
  status: string;
  store: boolean;
  previous_response_id: string | null;
  output: Item[];
}

/** The service on the stand-in's `agent` mode, with a published chat profile `agent` and the Responses API on. */
async function setUp(t: Test): Promise<Built> {
  const dir = await tempDir(t);
  const params = { model: await tinyModelIn(dir), slots: 1 };
  return servedChat(t, { llamaServer: await fakeLlamaServerIn(dir, 'agent'), name: 'agent', params, env: { SERVICE_DECK_RESPONSES_TTL_S: '600' }, responses: true });
}

const textOf = (response: ResponseBody) => response.output.find((item) => item.type === 'message')?.content?.[0]?.text ?? '';
const as = (token: string) => ({ authorization: `Bearer ${token}` });

async function create(t: Test, b: Built, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<ResponseBody> {
  const answer = await b.api('POST', '/v1/responses', { model: 'agent', max_output_tokens: 16, ...body }, headers);
  const json = (await answer.json()) as ResponseBody;
  t.equal(answer.status, 200, `answered (${JSON.stringify(json).slice(0, 300)})`);
  return json;
}

async function refused(t: Test, answer: Response, status: number, what: string): Promise<ErrorBody['error']> {
  const body = (await answer.json()) as ErrorBody;
  t.equal(answer.status, status, `${what}: ${status}`);
  matchesSchema(t, 'ErrorResponse', body, `${what}: the OpenAI error body`);
  return body.error;
}

/** Every file's text under `dir`. */
async function filesUnder(dir: string): Promise<string[]> {
  const texts: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) texts.push(await readFile(path.join(entry.parentPath, entry.name), 'latin1'));
  }
  return texts;
}

t.test('kept: GET answers it, previous_response_id and item_reference continue it, a stream is kept too; no prompt or answer in the log or on disk', async (t) => {
  const b = await setUp(t);
  const first = await create(t, b, { input: 'Hello quokka' });
  matchesSchema(t, 'Response', first, 'a Response');
  t.match(first, { store: true, previous_response_id: null }, 'kept by default, as OpenAI does');
  t.equal(textOf(first), 'user: Hello quokka', "the worker's answer (the conversation it got)");

  const got = await b.api('GET', `/v1/responses/${first.id}`);
  t.equal(got.status, 200, 'GET /v1/responses/{id}: 200');
  t.same(await got.json(), first, 'the same Response');

  const second = await create(t, b, { input: 'And wombat?', previous_response_id: first.id, instructions: 'Be brief.' });
  t.equal(second.previous_response_id, first.id, 'the Response names its previous one');
  t.equal(textOf(second), 'system: Be brief. | user: Hello quokka | assistant: user: Hello quokka | user: And wombat?', 'the worker got the first turn, its answer, then the new question');
  const third = await create(t, b, { input: 'And numbat?', previous_response_id: second.id });
  t.equal(textOf(third), `user: Hello quokka | assistant: user: Hello quokka | user: And wombat? | assistant: ${textOf(second)} | user: And numbat?`, 'a chain of three: each turn once, the instructions not carried on');

  // A tool loop as the AI SDK sends it: the earlier items by reference, the tool's output whole.
  const tools = [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'] } }];
  const calling = await create(t, b, { input: [{ role: 'user', content: 'Weather in Berlin?' }], tools });
  t.same(
    calling.output.map((item) => item.type),
    ['reasoning', 'message', 'function_call'],
    'reasoning, text and a call',
  );
  const call = calling.output[2]!;
  const loop = await create(t, b, {
    input: [{ role: 'user', content: 'Weather in Berlin?' }, ...calling.output.map((item) => ({ type: 'item_reference', id: item.id })), { type: 'function_call_output', call_id: call.call_id, output: '{"temperature":21}' }],
    tools,
  });
  t.equal(
    textOf(loop),
    `user: Weather in Berlin? | assistant[${call.call_id} get_weather{"city":"Berlin"}]: Let me look that up. | tool(${call.call_id}): {"temperature":21}`,
    'the worker got the call with its text, then its output: the loop ends with an answer',
  );

  // A stream is kept once it ends.
  const streamed = await b.api('POST', '/v1/responses', { model: 'agent', input: 'Streamed echidna', stream: true });
  const events = await streamed.text();
  const id = /"id":"(resp_[0-9a-f]{32})"/.exec(events)?.[1] ?? '';
  t.match(events, /event: response\.completed/, 'the stream completed');
  const kept = (await (await b.api('GET', `/v1/responses/${id}`)).json()) as ResponseBody;
  t.match(kept, { id, status: 'completed', store: true }, 'and is kept');
  t.equal(textOf(kept), 'user: Streamed echidna');

  // Spec 5.4, CONTRACT 9: nothing of a prompt or an answer reaches the log or the disk.
  const log = b.logLines.join('');
  for (const word of ['quokka', 'wombat', 'numbat', 'echidna', 'Berlin', 'temperature']) {
    t.notOk(log.includes(word), `the log holds no "${word}"`);
    t.notOk((await filesUnder(b.stateDir)).some((text) => text.includes(word)), `no file in the state directory holds "${word}"`);
  }
  t.ok(b.logLines.length > 10, `the log was written (${b.logLines.length} lines)`);
});

t.test('not kept: a 400 naming the id, a 404 for GET; store: false keeps nothing', async (t) => {
  const b = await setUp(t);
  const missing = await refused(t, await b.api('POST', '/v1/responses', { model: 'agent', input: 'x', previous_response_id: 'resp_0123456789abcdef0123456789abcdef' }), 400, 'an unknown previous_response_id');
  t.match(missing, { type: 'invalid_request_error', code: 'invalid_value', param: 'previous_response_id' });
  t.match(missing.message, /^The previous response resp_0123456789abcdef0123456789abcdef is not kept here: this service keeps responses only for a while: in memory, 10 min after their last use, at most 64 MiB of them.*store: false/);
  const reference = await refused(t, await b.api('POST', '/v1/responses', { model: 'agent', input: [{ role: 'user', content: 'x' }, { type: 'item_reference', id: 'msg_0123456789abcdef0123456789abcdef_0' }] }), 400, 'an unknown item_reference');
  t.match(reference, { code: 'invalid_value', param: 'input.1.id', message: /^The item msg_0123456789abcdef0123456789abcdef_0 that item_reference names is not kept here: this service keeps responses only for a while.*providerOptions: \{ openai: \{ store: false \} \}/ });
  const get = await refused(t, await b.api('GET', '/v1/responses/resp_0123456789abcdef0123456789abcdef'), 404, 'GET of an unknown id');
  t.match(get, { type: 'invalid_request_error', code: 'response_not_found', message: /^The response resp_0123456789abcdef0123456789abcdef is not kept here/ });

  const unkept = await create(t, b, { input: 'Hello', store: false });
  t.equal(unkept.store, false, 'store: false says so');
  await refused(t, await b.api('GET', `/v1/responses/${unkept.id}`), 404, 'a store: false response');
  await refused(t, await b.api('POST', '/v1/responses', { model: 'agent', input: 'x', previous_response_id: unkept.id }), 400, 'continuing a store: false response');
});

t.test('another token reaches nothing: after rotate-token the old responses are unreachable', async (t) => {
  const b = await setUp(t);
  const first = await create(t, b, { input: 'Hello' });
  const token = await b.service.secrets.rotateToken();
  t.not(token, TOKEN);
  t.equal((await b.api('GET', `/v1/responses/${first.id}`)).status, 401, 'the old token is refused');
  await refused(t, await b.api('GET', `/v1/responses/${first.id}`, undefined, as(token)), 404, 'the new token: GET');
  await refused(t, await b.api('POST', '/v1/responses', { model: 'agent', input: 'x', previous_response_id: first.id }, as(token)), 400, 'the new token: previous_response_id');
  await refused(t, await b.api('POST', '/v1/responses', { model: 'agent', input: [{ type: 'item_reference', id: first.output[0]!.id }] }, as(token)), 400, 'the new token: item_reference');
  const own = await create(t, b, { input: 'Mine' }, as(token));
  t.equal((await b.api('GET', `/v1/responses/${own.id}`, undefined, as(token))).status, 200, "the new token's own response is kept");
});

t.test('turned off, the memory is forgotten and GET answers like an unknown route', async (t) => {
  const b = await setUp(t);
  const first = await create(t, b, { input: 'Hello' });
  t.equal(b.service.responseMemory.usage.responses, 1, 'one response kept');
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: false })).status, 200, 'turned off');
  t.same(b.service.responseMemory.usage, { responses: 0, bytes: 0 }, 'the memory is empty');
  const off = await refused(t, await b.api('GET', `/v1/responses/${first.id}`), 404, 'GET while off');
  t.match(off, { code: 'unknown_route', message: /^Unknown route: GET \/v1\/responses\/\{id\}\. .*an operator can turn it on/ });
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'on again');
  await refused(t, await b.api('GET', `/v1/responses/${first.id}`), 404, 'the earlier response');
});
