// The Responses API's memory of recent responses (src/workers/chat/responseMemory.ts): bounded in
// bytes and by a time to live from the last use (on the cache's own clock, here a simulated one),
// reachable only with the token that made a response, emptied when the operator turns the
// Responses API off, and the resolver of previous_response_id and item_reference.
import { randomUUID } from 'node:crypto';
import t from 'tap';
import { EndpointStore } from '../../../src/store/endpoint.js';
import { Extensions } from '../../../src/system/extensions.js';
import { createLogger } from '../../../src/system/observe/log.js';
import { ResponseMemory } from '../../../src/workers/chat/responseMemory.js';
import { responsesRequestSchema, type InputItem } from '../../../src/workers/chat/responses.schema.js';
import { tempDir } from '../../helpers/build.js';

const log = createLogger({ level: 'silent' });
const A = 'sd-token-a-0123456789abcdefghijklmnop';
const B = 'sd-token-b-0123456789abcdefghijklmnop';

/** A finished Response of our own shape: one message (`text`) and, when `call`, one function call. */
function response(text: string, call?: string) {
  const hex = randomUUID().replaceAll('-', '');
  const output: Array<Record<string, unknown>> = [{ type: 'message', id: `msg_${hex}_0`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [], logprobs: [] }] }];
  if (call) output.push({ type: 'function_call', id: `fc_${hex}_1`, call_id: call, name: 'get_weather', arguments: '{"city":"Berlin"}', status: 'completed' });
  return { id: `resp_${hex}`, object: 'response', status: 'completed', output };
}
const question = (text: string): InputItem[] => [{ role: 'user', content: text }];
const request = (body: Record<string, unknown>) => responsesRequestSchema.parse({ model: 'm', ...body });

t.test('bounded in bytes: the least recently used response goes first, and one larger than the whole memory is not kept', async (t) => {
  const kept = Array.from({ length: 4 }, (_, i) => response(`answer ${i} ${'x'.repeat(700)}`));
  // What one such response counts for: its text, its input's, and a little for the entry.
  const probe = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log });
  probe.keep(A, kept[0]!, question('q'), null);
  const each = probe.usage.bytes;
  t.ok(each > JSON.stringify(kept[0]).length && each < 2048, `one response counts its JSON and a little more (${each} bytes)`);
  const maxBytes = Math.floor(4.5 * each);
  const memory = new ResponseMemory({ maxBytes, ttlMs: 60_000, log });
  for (const r of kept) memory.keep(A, r, question('q'), null);
  t.equal(memory.usage.responses, 4, `four fit in ${maxBytes} bytes`);
  t.ok(memory.response(A, kept[0]!.id), 'the first is read: now the most recently used');
  memory.keep(A, response(`answer 4 ${'x'.repeat(700)}`), question('q'), null);
  t.same([memory.usage.responses, memory.usage.bytes <= maxBytes], [4, true], 'a fifth: still four, within the bound');
  t.ok(memory.response(A, kept[0]!.id), 'the one just read stays');
  t.notOk(memory.response(A, kept[1]!.id), 'the least recently used went');
  const huge = response('y'.repeat(maxBytes));
  memory.keep(A, huge, question('q'), null);
  t.notOk(memory.response(A, huge.id), 'a response larger than the memory is not kept');
  t.ok(memory.response(A, kept[0]!.id), 'and it pushed nothing out');

  const none = new ResponseMemory({ maxBytes: 0, ttlMs: 60_000, log });
  none.keep(A, kept[0]!, question('q'), null);
  t.same([none.enabled, none.response(A, kept[0]!.id)], [false, undefined], 'with 0 bytes nothing is kept');
  t.match(none.forgotten('The response x'), /keeps no responses \(its operator set SERVICE_DECK_RESPONSES_MEMORY_MIB to 0\)/);
});

t.test('a time to live from the last use, on the clock the memory reads', async (t) => {
  let now = 1_000_000;
  const memory = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log, now: () => now });
  const first = response('one');
  const second = response('two');
  memory.keep(A, first, question('q'), null);
  memory.keep(A, second, question('q'), null);
  now += 40_000;
  t.ok(memory.response(A, first.id), 'read after 40 s: still kept, and its age starts again');
  now += 40_000;
  t.ok(memory.response(A, first.id), '80 s after it was kept, 40 s after its last use: kept');
  t.notOk(memory.response(A, second.id), 'the other one, unused for 80 s, is gone');
  now += 60_001;
  t.notOk(memory.response(A, first.id), 'unused for longer than the time to live: gone');
  t.equal(memory.usage.responses, 0, 'nothing is left');
});

t.test("only the token that kept a response reaches it; another token's look-up does not refresh it", async (t) => {
  let now = 1_000_000;
  const memory = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log, now: () => now });
  const r = response('secret answer', 'call_1');
  memory.keep(A, r, question('secret question'), null);
  t.ok(memory.response(A, r.id), 'the token that made it reads it');
  t.notOk(memory.response(B, r.id), 'another token does not');
  t.throws(() => memory.recall(B, request({ input: 'next', previous_response_id: r.id })), { statusCode: 400, param: 'previous_response_id', message: new RegExp(`The previous response ${r.id} is not kept here`) }, 'nor continues it');
  t.throws(() => memory.recall(B, request({ input: [{ type: 'item_reference', id: r.output[0]!.id }] })), { statusCode: 400, param: 'input.0.id', message: /is not kept here/ }, 'nor names its items');
  now += 50_000;
  memory.response(B, r.id);
  now += 20_000;
  t.notOk(memory.response(A, r.id), "the other token's look-up did not keep it alive");
});

t.test('recall: previous_response_id brings the conversation back, item_reference the item, both through the input schema', async (t) => {
  const memory = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log });
  const first = response('Let me look.', 'call_7');
  memory.keep(A, first, question('Weather in Berlin?'), null);
  const second = response('It is 21 degrees.');
  const output = { type: 'function_call_output' as const, call_id: 'call_7', output: '{"temperature":21}' };
  memory.keep(A, second, [output], first.id);

  // A chain of two: each response's input, then its output, oldest first.
  const chained = memory.recall(A, request({ input: 'And Paris?', previous_response_id: second.id }));
  t.same(
    (chained.request.input as InputItem[]).map((item) => item.type ?? item.role),
    ['user', 'message', 'function_call', 'function_call_output', 'message', 'user'],
    'the conversation of both responses, then the new question',
  );
  t.same(chained.own, question('And Paris?'), 'its own input is kept as a message');

  // The AI SDK's tool loop: the call by reference, its output whole.
  const referenced = memory.recall(A, request({ input: [{ role: 'user', content: 'Weather in Berlin?' }, { type: 'item_reference', id: first.output[0]!.id }, { type: 'item_reference', id: first.output[1]!.id }, output] }));
  t.same(referenced.request.input, [{ role: 'user', content: 'Weather in Berlin?' }, first.output[0], first.output[1], output], 'each reference is the item it names');
  t.same(referenced.own, referenced.request.input, 'and is kept resolved');
  const plain = request({ input: [{ role: 'user', content: 'x' }] });
  t.equal(memory.recall(A, plain).request, plain, 'a request that names nothing is left as it is');

  t.throws(() => memory.recall(A, request({ input: [{ type: 'item_reference', id: 'msg_unknown' }] })), {
    statusCode: 400,
    code: 'invalid_value',
    param: 'input.0.id',
    message: /^The item msg_unknown that item_reference names is not kept here: this service keeps responses only for a while: in memory, 1 min after their last use, at most 1 MiB of them, .*store: false/,
  });
  // A link of the chain that is gone: named.
  const lost = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log });
  lost.keep(A, second, [output], first.id);
  t.throws(() => lost.recall(A, request({ input: 'x', previous_response_id: second.id })), { param: 'previous_response_id', message: new RegExp(`The response ${first.id}, which the previous response ${second.id} continues, is not kept here`) });
});

t.test('emptied when the operator turns the Responses API off, not when it is turned on', async (t) => {
  const endpoint = await EndpointStore.open(await tempDir(t));
  const lines: string[] = [];
  const extensions = new Extensions(endpoint, log);
  const memory = new ResponseMemory({ maxBytes: 1 << 20, ttlMs: 60_000, log: createLogger({ level: 'info', destination: { write: (line: string) => void lines.push(line) } }) });
  memory.forgetWhenOff(extensions);
  await extensions.set({ responses: true });
  const r = response('kept answer');
  memory.keep(A, r, question('kept question'), null);
  await extensions.set({ responses: true });
  t.ok(memory.response(A, r.id), 'turned on again: kept');
  await extensions.set({ responses: false });
  t.same(memory.usage, { responses: 0, bytes: 0 }, 'turned off: empty');
  t.notOk(memory.response(A, r.id));
  t.match(lines.join(''), /responses kept in memory are forgotten/, 'the log says so');
  t.notMatch(lines.join(''), /kept (answer|question)/, 'without any of their content');
});
