// A prompt that cannot fit the profile's context is refused at once: no token stands for
// more bytes than the vocabulary's longest one, so more bytes of text than the context's tokens of
// that length never fit, and the worker would only say so after tokenizing it with the request
// holding a slot (a 1 MB prompt took 48 to 84 s). Against the stand-in llama-server (mode instant,
// on the real tiny GGUF, whose longest token is 12 bytes): the refusal comes before any worker
// starts, names the field and the profile's params.context; a prompt at the bound goes on.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { longestTokenOf } from '../../src/adapters/gguf.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, tinyModelIn } from '../helpers/llama.js';

const CONTEXT = 4096;

async function setUp(t: Test): Promise<Built & { events: string; longest: number }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const events = path.join(dir, 'events');
  const wrapper = await fakeLlamaServerIn(dir, 'instant', events);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'fake', category: 'chat', params: { model, context: CONTEXT } });
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true });
  return Object.assign(b, { events, longest: (await longestTokenOf(model)) ?? 0 });
}

const workers = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: unknown[] }).workers;
const asked = async (b: Built & { events: string }) => (await readFile(b.events, 'utf8').catch(() => '')).split('\n').filter((line) => line === 'open').length;

t.test('more bytes than the context can hold at the longest token: 400 at once, before any worker; at the bound the request goes on', async (t) => {
  const b = await setUp(t);
  t.equal(b.longest, 12, "the tiny model's longest tokens are <|im_start|> and <tool_call> with its newline");
  const bound = CONTEXT * b.longest;

  const over = await b.api('POST', '/v1/chat/completions', { model: 'fake', messages: [{ role: 'system', content: 's'.repeat(1000) }, { role: 'user', content: [{ type: 'text', text: 'u'.repeat(bound - 1000 + 1) }] }] });
  t.equal(over.status, 400);
  const body = (await over.json()) as { error: { type: string; code: string; param: string; message: string } };
  t.match(body.error, {
    type: 'invalid_request_error',
    code: 'context_length_exceeded',
    param: 'messages',
    message: new RegExp(`^The request's text is ${bound + 1} bytes: more than ${CONTEXT} tokens can hold, since no token of this model stands for more than 12 bytes \\(at most ${bound} bytes\\)\\. \\(The context is the chat profile fake's params\\.context, ${CONTEXT} tokens shared by its 1 slot\\(s\\)`),
  });
  const responses = await b.api('POST', '/v1/responses', { model: 'fake', input: 'i'.repeat(bound + 1) });
  t.equal(responses.status, 400);
  t.match(await responses.json(), { error: { code: 'context_length_exceeded', param: 'input' } }, 'the Responses door names its own field');
  t.same(await workers(b), [], 'no worker was started for them');
  t.equal(await asked(b), 0, 'and no worker was asked');

  // At the bound, with an assistant message beside it (a template may leave its reasoning out, so it does not count).
  const at = await b.api('POST', '/v1/chat/completions', {
    model: 'fake',
    messages: [
      { role: 'user', content: 'u'.repeat(bound - 10) },
      { role: 'assistant', content: 'a'.repeat(100_000) },
      { role: 'user', content: 'u'.repeat(10) },
    ],
  });
  t.equal(at.status, 200, 'a prompt at the bound goes to the worker');
  await at.text();
  t.equal(await asked(b), 1);
});
