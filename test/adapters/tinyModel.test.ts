// The tiny GGUF chat model the project generates for tests, benchmarks and the demo: it reads back
// with the project's own GGUF reader as a llama-architecture model whose head size suits the q4_0
// KV cache, with a ChatML template and a byte-level vocabulary; the same seed gives the same
// bytes; and it is written atomically (a half-written file never has the final name).
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { encodeGguf, modelFacts, readGgufInfo, type GgufInfo } from '../../src/adapters/gguf.js';
import { TINY_CHAT_TEMPLATE, tinyModel, writeTinyModel, type TinyModelOptions } from '../../src/adapters/tinyModel.js';

const F32 = 0;
const TOKEN_BYTE = 6;
const TOKEN_CONTROL = 3;

/** Writes the model into a fresh test directory and reads its header back. */
async function written(t: Test, options: TinyModelOptions = {}): Promise<{ file: string; info: GgufInfo }> {
  const dir = t.testdir();
  const file = await writeTinyModel(path.join(dir, 'tiny.gguf'), options);
  return { file, info: await readGgufInfo(file) };
}

/** The f32 value of `tensor` at flat index `index`, read from the file's data section. */
async function f32At(file: string, info: GgufInfo, tensor: string, index: number): Promise<number> {
  const entry = info.tensors.find((x) => x.name === tensor);
  if (!entry) throw new Error(`no tensor ${tensor}`);
  const bytes = await readFile(file);
  return bytes.readFloatLE(info.dataOffset + entry.offset + index * 4);
}

t.test('the generated model reads back as a llama model with a q4_0-friendly head size', async (t) => {
  const { info } = await written(t);
  t.equal(info.metadata['general.architecture'], 'llama');
  const facts = modelFacts(info);
  t.equal(facts.architecture, 'llama');
  t.equal(facts.layerCount, 2, 'two blocks by default');
  t.equal(facts.embeddingLength, 64);
  t.equal(facts.headCount, 2);
  t.equal(facts.headCountKv, 2);
  t.equal(facts.contextLength, 32768);
  t.equal(facts.keyLength, 32, 'head size 64/2');
  t.equal(facts.keyLength % 32, 0, 'the head size is a multiple of 32 (q4_0 KV cache)');
  t.equal(facts.valueLength % 32, 0);
  t.equal(info.metadata['llama.rope.dimension_count'], facts.keyLength);
  t.equal(facts.layerBytes.length, 2);
  t.ok(facts.layerBytes.every((b) => b > 0), 'every block has weights');
  t.ok(info.tensors.every((x) => x.type === F32), 'all tensors are f32');
  t.equal(info.tensors.length, 3 + 9 * 2, 'embedding, output norm, output and nine tensors per block');
  t.equal(facts.totalBytes, info.tensors.reduce((sum, x) => sum + x.bytes, 0));
  t.ok(facts.inputBytes > 0 && facts.outputBytes > 0);
});

t.test('the ChatML chat template and the byte-level vocabulary are there', async (t) => {
  const { info } = await written(t);
  const template = info.metadata['tokenizer.chat_template'];
  t.equal(template, TINY_CHAT_TEMPLATE, 'the template is stored as it is');
  t.match(template, /<\|im_start\|>/);
  t.match(template, /<\|im_end\|>/);
  t.match(template, /add_generation_prompt/);
  t.equal(info.metadata['tokenizer.ggml.model'], 'llama');
  const tokens = info.metadata['tokenizer.ggml.tokens'];
  const types = info.metadata['tokenizer.ggml.token_type'];
  if (!Array.isArray(tokens) || !Array.isArray(types)) throw new Error('the vocabulary was not read as arrays');
  t.equal(modelFacts(info).vocabSize, tokens.length, 'vocab_size matches the token list');
  t.equal(types.length, tokens.length);
  for (const control of ['<s>', '</s>', '<|im_start|>', '<|im_end|>']) {
    const i = tokens.indexOf(control);
    t.ok(i >= 0, `${control} is in the vocabulary`);
    t.equal(types[i], TOKEN_CONTROL, `${control} is a control token`);
  }
  const expectedBytes = [0x09, 0x0a, 0x0d, ...Array.from({ length: 0x7e - 0x20 + 1 }, (_, i) => 0x20 + i)];
  for (const b of expectedBytes) {
    const name = `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
    const i = tokens.indexOf(name);
    if (i < 0 || types[i] !== TOKEN_BYTE) t.fail(`byte token ${name} is missing or not a byte token`);
  }
  t.equal(types.filter((type) => type === TOKEN_BYTE).length, expectedBytes.length, 'tab, LF, CR and printable ASCII as byte tokens, nothing else');
  t.ok(tokens.includes('\u2581'), 'the SentencePiece space');
  t.equal(tokens[info.metadata['tokenizer.ggml.eos_token_id'] as number], '<|im_end|>', 'the end of turn is the EOS token');
  t.equal(tokens[info.metadata['tokenizer.ggml.bos_token_id'] as number], '<s>');
  t.equal(info.metadata['tokenizer.ggml.add_bos_token'], false);
  t.equal(info.metadata['tokenizer.ggml.add_space_prefix'], false);
});

t.test('the end of turn never wins and the tool-call opening is biased', async (t) => {
  const { file, info } = await written(t, { toolCallBias: 7 });
  const tokens = info.metadata['tokenizer.ggml.tokens'] as string[];
  const embedding = 64;
  const endOfTurn = tokens.indexOf('<|im_end|>');
  const toolCall = tokens.indexOf('<tool_call>\n');
  t.ok(toolCall >= 0, '<tool_call> is one token');
  const endBias = await f32At(file, info, 'output.weight', endOfTurn * embedding);
  t.ok(endBias <= -100, `the end of turn is pushed far away (bias ${endBias})`);
  t.equal(await f32At(file, info, 'output.weight', tokens.indexOf('<0x41>') * embedding), 0, 'an ordinary token has no bias');
  t.equal(await f32At(file, info, 'output.weight', toolCall * embedding), 7, 'the tool-call bias is the option');
  t.equal(await f32At(file, info, 'token_embd.weight', 5 * embedding), 1, 'channel 0 is the constant bias channel');
  t.equal(await f32At(file, info, 'blk.0.attn_output.weight', 3), 0, 'no block writes the bias channel');
});

t.test('options shape the model', async (t) => {
  const { info } = await written(t, { embedding: 128, heads: 2, layers: 3, feedForward: 96, contextLength: 4096, name: 'other' });
  const facts = modelFacts(info);
  t.match(facts, { embeddingLength: 128, headCount: 2, layerCount: 3, contextLength: 4096, keyLength: 64 });
  t.equal(info.metadata['llama.feed_forward_length'], 96);
  t.equal(info.metadata['general.name'], 'other');
  t.equal(info.tensors.length, 3 + 9 * 3);
  t.same(info.tensors.find((x) => x.name === 'blk.2.ffn_down.weight')?.dims, [96, 128]);
});

t.test('the same seed gives identical bytes; another seed gives different weights', async (t) => {
  const a = encodeGguf(tinyModel({ seed: 7 }));
  const b = encodeGguf(tinyModel({ seed: 7 }));
  const c = encodeGguf(tinyModel({ seed: 8 }));
  t.equal(Buffer.compare(Buffer.from(a), Buffer.from(b)), 0, 'seed 7 twice: identical');
  t.equal(a.length, c.length, 'the shape does not depend on the seed');
  t.not(Buffer.compare(Buffer.from(a), Buffer.from(c)), 0, 'seed 8 differs');
  const defaults = encodeGguf(tinyModel());
  t.equal(Buffer.compare(Buffer.from(defaults), Buffer.from(encodeGguf(tinyModel({ seed: 1 })))), 0, 'the default seed is 1');
  const dir = t.testdir();
  const one = await readFile(await writeTinyModel(path.join(dir, 'one.gguf'), { seed: 7 }));
  const two = await readFile(await writeTinyModel(path.join(dir, 'two.gguf'), { seed: 7 }));
  t.ok(one.equals(two), 'written files of the same seed are identical');
  t.ok(one.equals(Buffer.from(a)), 'the file is exactly the encoded model');
});

t.test('a head size that is not a multiple of 32 is refused', async (t) => {
  for (const [embedding, heads] of [
    [64, 4],
    [96, 2],
    [100, 3],
    [48, 1],
  ] as const) {
    t.throws(() => tinyModel({ embedding, heads }), /multiple of 32/, `${embedding}/${heads}`);
  }
  t.doesNotThrow(() => tinyModel({ embedding: 96, heads: 3 }), '96/3 = 32 is fine');
});

t.test('writeTinyModel writes atomically to the resolved path', async (t) => {
  const dir = t.testdir();
  const target = path.join(dir, 'models', 'nested', 'tiny.gguf');
  const returned = await writeTinyModel(path.join(dir, 'models', 'nested', '..', 'nested', 'tiny.gguf'), { seed: 3 });
  t.equal(returned, target, 'the resolved absolute path is returned');
  t.ok(path.isAbsolute(returned));
  t.same(await readdir(path.dirname(target)), ['tiny.gguf'], 'missing folders are made; no temporary file is left');
  t.ok((await readFile(target)).equals(Buffer.from(encodeGguf(tinyModel({ seed: 3 })))));

  // A write that fails half way never touches the final name: the old file stays whole.
  await writeFile(target, 'old model');
  const temp = `${target}.${process.pid}.tmp`;
  await mkdir(temp);
  await t.rejects(writeTinyModel(target, { seed: 4 }), { code: 'EISDIR' }, 'the temporary file cannot be written (a folder holds its name)');
  t.equal(await readFile(target, 'utf8'), 'old model', 'the target keeps its old content');

  // Once the temporary name is free again, the new model replaces the old one in one step.
  await rm(temp, { recursive: true });
  await writeTinyModel(target, { seed: 4 });
  t.ok((await readFile(target)).equals(Buffer.from(encodeGguf(tinyModel({ seed: 4 })))), 'replaced by the new model');
  t.same(await readdir(path.dirname(target)), ['tiny.gguf']);
});
