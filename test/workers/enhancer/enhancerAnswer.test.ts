// The prompt enhancer's question and the reading of its answer (spec 4.7), without a process: the
// request carries the task's instructions, the images as data URLs (i2i only) and the JSON schema
// that bounds the rewrite; an answer is used only when it is a finished JSON object of that shape
// (a cut answer, text that is not JSON, a missing prompt all fail: the job then ends with 502
// enhancer_failed, never the original prompt); a ratio outside any sensible shape is dropped.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { ENHANCED_PROMPT_MAX, ENHANCER_MAX_TOKENS, ENHANCER_SCHEMA, EnhancerFailure, enhancerRequest, readEnhancerAnswer } from '../../../src/workers/enhancer/enhancer.js';
import { tempDir } from '../../helpers/build.js';

const answer = (content: unknown, finish = 'stop') => ({ choices: [{ finish_reason: finish, message: { role: 'assistant', content } }] });

t.test('a finished JSON answer of the schema gives the rewrite and its ratio', async (t) => {
  t.same(readEnhancerAnswer(answer('{"prompt": "  a red fox in snow  ", "wh_ratio": 1.5}')), { prompt: 'a red fox in snow', whRatio: 1.5 });
  t.same(readEnhancerAnswer(answer('{"prompt":"x","wh_ratio":0.66666666}')), { prompt: 'x', whRatio: 0.667 }, 'rounded to three places');
  for (const ratio of [0, -1, 0.05, 11, 1e300]) {
    t.equal(readEnhancerAnswer(answer(JSON.stringify({ prompt: 'x', wh_ratio: ratio }))).whRatio, null, `${ratio}: no sensible shape, dropped (only a suggestion anyway)`);
  }
});

t.test('every other answer is an EnhancerFailure naming what was wrong, never the prompt', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['cut at max_tokens', answer('{"prompt": "a red fo', 'length'), new RegExp(`cut at ${ENHANCER_MAX_TOKENS} tokens`)],
    ['plain text', answer('Sure! Here is a better prompt: a red fox'), /did not answer with JSON/],
    ['JSON without prompt', answer('{"wh_ratio": 1}'), /without a non-empty "prompt"/],
    ['an empty prompt', answer('{"prompt": "   ", "wh_ratio": 1}'), /without a non-empty "prompt"/],
    ['a ratio that is text', answer('{"prompt": "x", "wh_ratio": "wide"}'), /numeric "wh_ratio"/],
    ['no choices', { error: { message: 'boom' } }, /without a message/],
    ['content parts instead of text', answer([{ type: 'text', text: '{}' }]), /without a message/],
    ['nothing', null, /without a message/],
  ];
  for (const [what, body, message] of cases) {
    let thrown: unknown;
    try {
      readEnhancerAnswer(body);
    } catch (error) {
      thrown = error;
    }
    t.ok(thrown instanceof EnhancerFailure, `${what}: an EnhancerFailure`);
    t.match((thrown as Error | undefined)?.message, message, what);
  }
});

t.test('the request: instructions per task, the schema bounding the rewrite, images as data URLs for i2i', async (t) => {
  const dir = await tempDir(t);
  const png = path.join(dir, 'reference-1.png');
  await writeFile(png, Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0]));
  const t2i = (await enhancerRequest('t2i', 'a fox', [])) as { messages: Array<{ role: string; content: unknown }>; max_tokens: number; response_format: { type: string; json_schema: { schema: unknown } } };
  t.equal(t2i.messages[0]?.role, 'system');
  t.match(t2i.messages[0]?.content, /text-to-image/);
  t.same(t2i.messages[1], { role: 'user', content: 'a fox' });
  t.equal(t2i.response_format.type, 'json_schema');
  t.same(t2i.response_format.json_schema.schema, ENHANCER_SCHEMA);
  t.equal(ENHANCER_SCHEMA.properties.prompt.maxLength, ENHANCED_PROMPT_MAX);
  t.ok(t2i.max_tokens >= ENHANCED_PROMPT_MAX * 6, 'room for the longest string even if every character were an escape');

  const i2i = (await enhancerRequest('i2i', 'make it green', [png])) as { messages: Array<{ content: Array<{ type: string; image_url?: { url: string }; text?: string }> | string }> };
  t.match(i2i.messages[0]?.content, /image-editing/);
  const parts = i2i.messages[1]?.content as Array<{ type: string; image_url?: { url: string }; text?: string }>;
  t.same(parts.map((p) => p.type), ['image_url', 'text']);
  t.match(parts[0]?.image_url?.url, /^data:image\/png;base64,iVBORw0KGgo/);
  t.equal(parts[1]?.text, 'make it green');

  const bad = path.join(dir, 'reference-2.png');
  await writeFile(bad, 'not an image');
  await t.rejects(enhancerRequest('i2i', 'x', [bad]), /reference image reference-2.png is not PNG, JPEG or WebP/);
});
