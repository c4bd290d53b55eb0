// CONTRACT section 9: what goes beyond the specification is off on a default install. The
// Responses API answers `POST /v1/responses` like an unknown route until an operator turns it on
// (`POST /api/v1/endpoint/extensions`), and off again, while the listener runs; the switch is kept
// in endpoint.json across a restart; with it off nothing of the Responses door runs (no body
// parse, no profile look-up, no worker), and the admin chat test refuses that door.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';

type ErrorBody = { error: { message: string; type: string; code: string; param: string | null } };
type Status = { status: string; extensions: { responses: boolean }; workers: unknown[] };

/** The service on the instant stand-in llama-server with a published chat profile `fake`; each chat request the worker gets is noted in `events`. */
async function setUp(t: Test, stateDir?: string): Promise<Built & { events: string; dir: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const events = path.join(dir, 'events');
  const wrapper = await fakeLlamaServerIn(dir, 'instant', events);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' }, ...(stateDir ? { stateDir } : {}) });
  if (!stateDir) {
    await b.startEndpoint();
    const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model, slots: 1 } });
    const { id } = (await created.json()) as { id: string };
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, 'profile published');
  }
  return Object.assign(b, { events, dir });
}

const status = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
const turn = (b: Built, responses: boolean) => b.admin('POST', '/api/v1/endpoint/extensions', { responses });
const ask = (b: Built) => b.api('POST', '/v1/responses', { model: 'fake', input: 'Hello', max_output_tokens: 4 });
/** The chat requests the stand-in worker has seen. */
const workerRequests = async (events: string) => (await readFile(events, 'utf8').catch(() => '')).split('\n').filter((line) => line === 'open').length;

/** Checks a 404 that must read like an unknown route's, with the words that say how to turn the API on. */
async function expectOff(t: Test, response: Response, what: string): Promise<void> {
  const body = (await response.json()) as ErrorBody;
  t.equal(response.status, 404, `${what}: 404`);
  matchesSchema(t, 'ErrorResponse', body, `${what}: the OpenAI error body`);
  t.match(body.error, { type: 'invalid_request_error', code: 'unknown_route', param: null }, `${what}: like an unknown route`);
  t.match(body.error.message, /^Unknown route: POST \/v1\/responses\. .*an operator can turn it on .*service-deck extensions enable responses/, `${what}: the message says an operator can turn it on`);
}

t.test('a default install: extensions off, /v1/responses a 404 like any unknown route, and nothing of the door runs', async (t) => {
  const b = await setUp(t);
  t.same((await status(b)).extensions, { responses: false }, 'the status shows every extension off');
  const onDisk = JSON.parse(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8')) as { extensions?: unknown };
  t.same(onDisk.extensions, { responses: false }, 'endpoint.json holds the switch, off');

  // The control: an unknown route's answer, which the switched-off door must read like.
  const unknown = (await (await b.api('POST', '/v1/assistants', { model: 'fake' })).json()) as ErrorBody;
  const off = await ask(b);
  const offBody = (await off.clone().json()) as ErrorBody;
  await expectOff(t, off, 'a valid request for a published profile');
  t.same(Object.keys(offBody.error).sort(), Object.keys(unknown.error).sort(), 'the same fields as an unknown route');
  t.same([offBody.error.type, offBody.error.code], [unknown.error.type, unknown.error.code], 'the same type and code as an unknown route');

  // No body parse: a body that the door would refuse with 400 still gets the 404.
  const broken = await b.api('POST', '/v1/responses', undefined, { 'content-type': 'application/json' });
  await expectOff(t, broken, 'an empty JSON body');
  const raw = await fetch(`${b.apiUrl()}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{"model": ' });
  await expectOff(t, raw, 'a malformed JSON body');
  await expectOff(t, await b.api('POST', '/v1/responses', { model: 'fake', input: 'x', temperature: 'hot', store: true }), 'a body with invalid fields');
  // No profile look-up: an unknown model is not a model_not_found.
  await expectOff(t, await b.api('POST', '/v1/responses', { model: 'no-such-profile', input: 'x' }), 'an unknown model');
  // The token is checked first, as on an unknown route.
  const anonymous = await fetch(`${b.apiUrl()}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  t.equal(anonymous.status, 401, 'no token: 401 before the 404, as on any route');
  await anonymous.body?.cancel();

  t.equal(await workerRequests(b.events), 0, 'the worker got no request');
  t.same((await status(b)).workers, [], 'no worker was started');
  // Chat completions are the specification's door and do not depend on the switch.
  t.equal((await b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 })).status, 200, 'chat completions answer');
});

t.test('on, answered, off, 404 again: all while the listener runs; the switch survives a restart', async (t) => {
  const b = await setUp(t);
  const on = await turn(b, true);
  t.equal(on.status, 200, 'turned on');
  t.same(await on.json(), { extensions: { responses: true } }, 'the answer holds the new extensions');
  t.equal((await status(b)).status, 'running', 'the listener kept running');
  t.same((await status(b)).extensions, { responses: true }, 'the status shows it on');
  const answered = await ask(b);
  t.equal(answered.status, 200, 'the next request is answered');
  const response = (await answered.json()) as { object: string; model: string };
  matchesSchema(t, 'Response', response, 'a Response');
  t.match(response, { object: 'response', model: 'fake' });
  t.equal(await workerRequests(b.events), 1, 'through the chat worker');
  t.ok(b.logLines.some((line) => line.includes('extension responses turned on')), 'the change is logged');

  const off = await turn(b, false);
  t.same([off.status, await off.json()], [200, { extensions: { responses: false } }], 'turned off');
  await expectOff(t, await ask(b), 'after turning it off');
  t.equal(await workerRequests(b.events), 1, 'the worker got nothing more');
  t.equal((await status(b)).status, 'running', 'the listener still runs');

  // Kept across a restart, both ways.
  t.equal((await turn(b, true)).status, 200, 'on again');
  const onDisk = JSON.parse(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8')) as { extensions: unknown; published: unknown[] };
  t.same(onDisk.extensions, { responses: true }, 'endpoint.json holds the switch');
  t.equal(onDisk.published.length, 1, 'and the rest of the record');
  await b.service.shutdown();
  const second = await setUp(t, b.stateDir);
  t.same((await status(second)).extensions, { responses: true }, 'on after the restart');
  t.equal((await ask(second)).status, 200, 'and served');
  t.equal((await turn(second, false)).status, 200, 'off');
  await second.service.shutdown();
  const third = await setUp(t, b.stateDir);
  t.same((await status(third)).extensions, { responses: false }, 'off after the next restart');
  await expectOff(t, await ask(third), 'after the second restart');
});

t.test('the switch: its body is checked, and the admin chat test refuses the Responses door while it is off', async (t) => {
  const b = await setUp(t);
  for (const [body, what, code] of [
    [{}, 'no switch', 'invalid_value'],
    [{ responses: 'yes' }, 'not a boolean', 'invalid_value'],
    [{ responses: true, assistants: true }, 'an unknown extension', 'unknown_parameter'],
    [null, 'no body', 'invalid_value'],
  ] as const) {
    const refused = await b.admin('POST', '/api/v1/endpoint/extensions', body);
    t.equal(refused.status, 400, `${what}: 400`);
    t.match(((await refused.json()) as ErrorBody).error, { type: 'invalid_request_error', code }, `${what}: the contract's error body, ${code}`);
  }
  t.same((await status(b)).extensions, { responses: false }, 'nothing changed');

  const profile = ((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: Array<{ id: string }> }).profiles[0]!.id;
  const start = (api: string) => b.admin('POST', '/api/v1/chat-tests/start', { profile_id: profile, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, api });
  const refused = await start('responses');
  t.equal(refused.status, 409, 'a chat test through the Responses API while it is off: 409');
  t.match(((await refused.json()) as ErrorBody).error, { type: 'conflict', code: 'extension_off', message: /The Responses API is off/ });
  t.equal(await workerRequests(b.events), 0, 'no worker request');

  t.equal((await turn(b, true)).status, 200);
  t.equal((await start('responses')).status, 202, 'with it on, the test starts');
});
