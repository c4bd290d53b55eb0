// The GGUF header reader, the facts the memory forecast takes from it, and the writer: a tiny
// llama-style model written, read back value by value and tensor by tensor; the big tokenizer
// arrays stepped over; clear errors that name the file; and proof, with a spy on the file
// handle's reads, that a 64 MiB data section is never read.
import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { open, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import {
  encodeGguf,
  encodeGgufHeader,
  GGML_TYPES,
  ggmlTensorBytes,
  longestToken,
  longestTokenOf,
  modelFacts,
  readGgufInfo,
  type GgufModel,
  type GgufValue,
} from '../../src/adapters/gguf.js';
import { tempDir } from '../helpers/build.js';

const F32 = 0;
const F16 = 1;
const Q4_0 = 2;
const Q8_0 = 8;

const TOKENS = Array.from({ length: 300 }, (_, i) => (i === 0 ? '<s>' : i === 1 ? '</s>' : i % 7 === 0 ? `▁wörd${i}` : `t${i}`));
const CHAT_TEMPLATE =
  "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

function tinyMetadata(): Array<[string, GgufValue]> {
  return [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: 'tiny llama' }],
    ['llama.block_count', { type: 'uint32', value: 2 }],
    ['llama.context_length', { type: 'uint64', value: 4096n }],
    ['llama.embedding_length', { type: 'uint32', value: 32 }],
    ['llama.attention.head_count', { type: 'uint32', value: 4 }],
    ['llama.attention.head_count_kv', { type: 'array', itemType: 'int32', value: [2, 1] }],
    ['llama.rope.freq_base', { type: 'float32', value: 10000.5 }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'float32', value: 1e-5 }],
    ['tokenizer.ggml.model', { type: 'string', value: 'llama' }],
    ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: TOKENS }],
    ['tokenizer.ggml.bos_token_id', { type: 'uint32', value: 0 }],
    ['tokenizer.chat_template', { type: 'string', value: CHAT_TEMPLATE }],
    ['test.uint8', { type: 'uint8', value: 255 }],
    ['test.int8', { type: 'int8', value: -128 }],
    ['test.uint16', { type: 'uint16', value: 65535 }],
    ['test.int16', { type: 'int16', value: -32768 }],
    ['test.int32', { type: 'int32', value: -2147483648 }],
    ['test.float64', { type: 'float64', value: Math.PI }],
    ['test.true', { type: 'bool', value: true }],
    ['test.false', { type: 'bool', value: false }],
    ['test.int64', { type: 'int64', value: -5n }],
    ['test.uint64.big', { type: 'uint64', value: 2n ** 60n }],
    ['test.flags', { type: 'array', itemType: 'bool', value: [true, false, true] }],
    ['test.empty', { type: 'array', itemType: 'float32', value: [] }],
  ];
}

/** What the reader gives back for tinyMetadata(), in the same order. */
const TINY_METADATA_READ = {
  'general.architecture': 'llama',
  'general.name': 'tiny llama',
  'llama.block_count': 2,
  'llama.context_length': 4096,
  'llama.embedding_length': 32,
  'llama.attention.head_count': 4,
  'llama.attention.head_count_kv': [2, 1],
  'llama.rope.freq_base': 10000.5,
  'llama.attention.layer_norm_rms_epsilon': Math.fround(1e-5),
  'tokenizer.ggml.model': 'llama',
  'tokenizer.ggml.tokens': TOKENS,
  'tokenizer.ggml.bos_token_id': 0,
  'tokenizer.chat_template': CHAT_TEMPLATE,
  'test.uint8': 255,
  'test.int8': -128,
  'test.uint16': 65535,
  'test.int16': -32768,
  'test.int32': -2147483648,
  'test.float64': Math.PI,
  'test.true': true,
  'test.false': false,
  'test.int64': -5,
  'test.uint64.big': 2n ** 60n,
  'test.flags': [true, false, true],
  'test.empty': [],
};

/** name, dims (ne0 first), ggml type, type name, bytes, offset in the data section (alignment 32). */
const TINY_TENSORS: Array<[string, number[], number, string, number, number]> = [
  ['token_embd.weight', [32, 300], Q8_0, 'Q8_0', 10200, 0],
  ['blk.0.attn_norm.weight', [32], F32, 'F32', 128, 10208],
  ['blk.0.attn_q.weight', [32, 32], Q4_0, 'Q4_0', 576, 10336],
  ['blk.0.attn_k.weight', [32, 16], Q4_0, 'Q4_0', 288, 10912],
  ['blk.0.ffn_down.weight', [64, 32], Q8_0, 'Q8_0', 2176, 11200],
  ['output_norm.weight', [32], F32, 'F32', 128, 13376],
  ['blk.1.attn_norm.weight', [32], F32, 'F32', 128, 13504],
  ['blk.1.attn_q.weight', [32, 32], Q4_0, 'Q4_0', 576, 13632],
  ['blk.1.attn_k.weight', [32, 8], Q4_0, 'Q4_0', 144, 14208],
  ['output.weight', [32, 300], Q8_0, 'Q8_0', 10200, 14368],
];
const TINY_DATA_SECTION = 24576;

function pattern(length: number, seed: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (seed * 31 + i * 7) & 0xff);
}

function tinyModel(options: { without?: string[]; metadata?: Array<[string, GgufValue]>; alignment?: number } = {}): GgufModel {
  return {
    metadata: [...tinyMetadata().filter(([key]) => !options.without?.includes(key)), ...(options.metadata ?? [])],
    tensors: TINY_TENSORS.map(([name, dims, type, , bytes], i) => ({ name, dims, type, data: pattern(bytes, i + 1) })),
    ...(options.alignment === undefined ? {} : { alignment: options.alignment }),
  };
}

async function writeModel(t: Test, bytes: Uint8Array, name = 'model.gguf'): Promise<string> {
  const file = path.join(await tempDir(t), name);
  await writeFile(file, bytes);
  return file;
}

/** The rejection's message; fails the test if the promise resolves. */
async function failure(t: Test, promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    return (error as Error).message;
  }
  t.fail('expected an error');
  return '';
}

function thrown(t: Test, fn: () => unknown): string {
  try {
    fn();
  } catch (error) {
    return (error as Error).message;
  }
  t.fail('expected an error');
  return '';
}

/** The offset just after the first GGUF string `text` (uint64 length, bytes) in an encoded file. */
function after(bytes: Uint8Array, text: string): number {
  const key = Buffer.alloc(8 + Buffer.byteLength(text));
  key.writeBigUInt64LE(BigInt(Buffer.byteLength(text)));
  key.write(text, 8);
  const at = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).indexOf(key);
  if (at < 0) throw new Error(`${text} not found`);
  return at + key.length;
}

/**
 * The oracle: llama.cpp's own table of the release this project builds (gguf-py/gguf/constants.py
 * in node-llama-cpp's bundle): `class GGMLQuantizationType` (name = id) and `GGML_QUANT_SIZES`
 * (block size, bytes per block, written as sums of products and floor divisions of QK_K = 256).
 */
function upstreamTypes(): Array<[number, string, number, number]> {
  const root = path.resolve(import.meta.dirname, '..', '..');
  const source = execFileSync('sh', ['scripts/build-llama.sh', '--fetch-only'], { cwd: root, encoding: 'utf8' }).trim();
  const bare = execFileSync('mktemp', ['-d'], { encoding: 'utf8' }).trim();
  try {
    execFileSync('git', ['clone', '--quiet', '--bare', path.join(source, 'gitRelease.bundle'), bare]);
    const constants = execFileSync('git', ['--git-dir', bare, 'show', 'HEAD:gguf-py/gguf/constants.py'], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
    const enumBlock = /class GGMLQuantizationType\(IntEnum\):\n([\s\S]*?)\n\n/.exec(constants)?.[1] ?? '';
    const ids = new Map([...enumBlock.matchAll(/^\s+(\w+)\s*=\s*(\d+)\s*$/gm)].map((m) => [m[1] as string, Number(m[2])]));
    const evaluate = (expression: string) =>
      expression.split('+').reduce((sum, term) => {
        const [first, ...rest] = term.trim().replaceAll('QK_K', '256').split(/\s*(\*|\/\/)\s*/);
        let value = Number(first);
        for (let i = 0; i < rest.length; i += 2) value = rest[i] === '*' ? value * Number(rest[i + 1]) : Math.floor(value / Number(rest[i + 1]));
        return sum + value;
      }, 0);
    const sizes = /GGML_QUANT_SIZES[^=]*=\s*\{([\s\S]*?)\n\}/.exec(constants)?.[1] ?? '';
    return [...sizes.matchAll(/GGMLQuantizationType\.(\w+):\s*\((\d+),\s*([^)]+)\)/g)]
      .map((m): [number, string, number, number] => [ids.get(m[1] as string) ?? -1, m[1] as string, Number(m[2]), evaluate(m[3] as string)])
      .sort((x, y) => x[0] - y[0]);
  } finally {
    execFileSync('rm', ['-rf', bare]);
  }
}

t.test("ggml types: block sizes and bytes per block as llama.cpp's own table has them, and tensor sizes from them", async (t) => {
  const expected = upstreamTypes();
  t.ok(expected.length >= 30 && expected.every(([id, , block, bytes]) => id >= 0 && block > 0 && bytes > 0), `the upstream table was read (${expected.length} types)`);
  t.same(
    [...GGML_TYPES.values()].map((type) => [type.id, type.name, type.blockSize, type.typeSize]),
    expected,
    'every type of the built release, with its block size and bytes per block',
  );
  for (const [id, name, blockSize, typeSize] of expected) {
    t.equal(ggmlTensorBytes(id, [blockSize * 2, 3, 5]), 2 * 3 * 5 * typeSize, `${name}: [${blockSize * 2}, 3, 5]`);
  }
  t.equal(ggmlTensorBytes(12, [4096, 14336]), 4096 / 256 * 14336 * 144, 'a Q4_K ffn matrix of a 8B model');
  t.equal(ggmlTensorBytes(F32, []), 4, 'no dimensions: one element');
  t.match(thrown(t, () => ggmlTensorBytes(4, [32])), /unknown ggml type id 4/, 'a removed type id');
  t.match(thrown(t, () => ggmlTensorBytes(Q4_0, [33, 2])), /33 elements is not a whole number of Q4_0 blocks of 32/);
  t.match(thrown(t, () => ggmlTensorBytes(F32, [1, 2, 3, 4, 5])), /5 dimensions/);
  t.match(thrown(t, () => ggmlTensorBytes(F32, [2 ** 40, 2 ** 20])), /absurd size/);
});

t.test('round trip: a tiny llama-style model is written and read back value by value', async (t) => {
  const model = tinyModel();
  const bytes = encodeGguf(model);
  const file = await writeModel(t, bytes);
  const info = await readGgufInfo(file);

  t.equal(info.file, file);
  t.equal(info.version, 3);
  t.equal(info.alignment, 32, 'no general.alignment: the default');
  t.same({ ...info.metadata }, TINY_METADATA_READ);
  t.same(Object.keys(info.metadata), Object.keys(TINY_METADATA_READ), 'in file order');
  t.equal(typeof info.metadata['test.uint64.big'], 'bigint', 'a 64-bit value beyond 2^53 stays exact');
  t.equal(info.metadata['llama.context_length'], 4096, 'a safe uint64 reads as a number');
  t.same(
    info.tensors.map((x) => [x.name, x.dims, x.type, x.typeName, x.bytes, x.offset]),
    TINY_TENSORS,
  );

  t.equal(info.dataOffset % 32, 0, 'the data section is aligned');
  t.equal(info.fileSize, bytes.length);
  t.equal(bytes.length, info.dataOffset + TINY_DATA_SECTION, 'the data section is padded to the alignment');
  const onDisk = await readFile(file);
  info.tensors.forEach((tensor, i) => {
    const start = info.dataOffset + tensor.offset;
    t.same(onDisk.subarray(start, start + tensor.bytes), Buffer.from(model.tensors[i]?.data ?? []), `${tensor.name}: its data at dataOffset + offset`);
  });
  t.ok(onDisk.subarray(info.dataOffset + 14368 + 10200).every((b) => b === 0), 'the padding after the last tensor is zeros');
});

t.test('the writer: alignment written as general.alignment, and refusals', async (t) => {
  const bytes = encodeGguf(tinyModel({ alignment: 64 }));
  const info = await readGgufInfo(await writeModel(t, bytes));
  t.equal(info.alignment, 64);
  t.equal(info.metadata['general.alignment'], 64, 'a non-default alignment is declared in the metadata');
  t.equal(info.dataOffset % 64, 0);
  t.same(
    info.tensors.map((x) => x.offset),
    [0, 10240, 10368, 10944, 11264, 13440, 13568, 13696, 14272, 14464],
  );
  t.equal(bytes.length, info.dataOffset + 24704, '14464 + 10200 rounded up to 64');

  const layout = encodeGgufHeader({ metadata: tinyMetadata(), tensors: TINY_TENSORS.map(([name, dims, type]) => ({ name, dims, type })) });
  t.equal(layout.dataBytes, TINY_DATA_SECTION);
  t.same(Buffer.from(layout.header), Buffer.from(encodeGguf(tinyModel()).subarray(0, layout.dataOffset)), 'the header alone is the start of the file');

  const refusal = (model: GgufModel) => thrown(t, () => encodeGguf(model));
  const base = tinyModel();
  const withTensor = (data: Uint8Array, type = F32, dims = [32]): GgufModel => ({ ...base, tensors: [{ name: 'x.weight', dims, type, data }] });
  t.match(refusal(withTensor(new Uint8Array(127))), /tensor "x.weight": 127 bytes of data, but \[32\] of ggml type 0 takes 128/);
  t.match(refusal(withTensor(new Uint8Array(10), 99)), /tensor "x.weight": unknown ggml type id 99/);
  t.match(refusal(withTensor(new Uint8Array(18), Q4_0, [16])), /not a whole number of Q4_0 blocks/);
  t.match(refusal({ ...base, tensors: [...base.tensors, ...base.tensors.slice(0, 1)] }), /duplicate tensor "token_embd.weight"/);
  t.match(refusal({ ...base, tensors: [{ name: 'n'.repeat(64), dims: [1], type: F32, data: new Uint8Array(4) }] }), /1 to 63 bytes/);
  t.match(refusal({ ...base, metadata: [['a', { type: 'uint8', value: 256 }]] }), /metadata "a": 256 is not a valid uint8/);
  t.match(refusal({ ...base, metadata: [['a', { type: 'int32', value: 1.5 }]] }), /1.5 is not a valid int32/);
  t.match(refusal({ ...base, metadata: [['a', { type: 'uint64', value: -1n }]] }), /-1n is not a valid uint64/);
  t.match(refusal({ ...base, metadata: [['a', { type: 'array', itemType: 'uint16', value: [1, 70000] }]] }), /metadata "a"\[1\]: 70000 is not a valid uint16/);
  t.match(refusal({ ...base, metadata: [['a', { type: 'bool', value: true }], ['a', { type: 'bool', value: false }]] }), /duplicate metadata key "a"/);
  t.match(refusal({ ...base, alignment: 48 }), /alignment 48 is not a power of two/);
  t.match(
    refusal({ ...base, metadata: [['general.alignment', { type: 'uint32', value: 16 }]], alignment: 64 }),
    /general.alignment 16 differs from the alignment 64/,
  );
  t.match(refusal({ ...base, metadata: [['general.alignment', { type: 'uint64', value: 64 }]] }), /general.alignment must be a uint32/);
});

t.test('model facts: the architecture keys, per-layer KV heads, and tensor bytes by block, input and output', async (t) => {
  const info = await readGgufInfo(await writeModel(t, encodeGguf(tinyModel())));
  t.same(modelFacts(info), {
    architecture: 'llama',
    layerCount: 2,
    contextLength: 4096,
    embeddingLength: 32,
    headCount: 4,
    headCountKv: 2,
    headCountKvPerLayer: [2, 1],
    keyLength: 8,
    valueLength: 8,
    vocabSize: 300,
    totalBytes: 24544,
    layerBytes: [128 + 576 + 288 + 2176, 128 + 576 + 144],
    inputBytes: 10200,
    outputBytes: 128 + 10200,
  });

  const variant = tinyModel({
    without: ['llama.attention.head_count_kv'],
    metadata: [
      ['llama.attention.key_length', { type: 'uint32', value: 16 }],
      ['llama.attention.value_length', { type: 'uint32', value: 12 }],
      ['llama.vocab_size', { type: 'uint32', value: 320 }],
    ],
  });
  const extra: GgufModel['tensors'] = [
    { name: 'token_types.weight', dims: [32, 2], type: F32, data: new Uint8Array(256) },
    { name: 'per_layer_token_embd.weight', dims: [64, 300], type: F16, data: new Uint8Array(38400) },
    { name: 'rope_freqs.weight', dims: [4], type: F32, data: new Uint8Array(16) },
    { name: 'blk.2.nextn.eh_proj.weight', dims: [32, 4], type: Q8_0, data: new Uint8Array(136) },
  ];
  const facts = modelFacts(await readGgufInfo(await writeModel(t, encodeGguf({ ...variant, tensors: [...variant.tensors, ...extra] }))));
  t.equal(facts.headCountKv, 4, 'no head_count_kv: as many KV heads as heads');
  t.same(facts.headCountKvPerLayer, [4, 4]);
  t.equal(facts.keyLength, 16);
  t.equal(facts.valueLength, 12);
  t.equal(facts.vocabSize, 320, 'vocab_size wins over the token count');
  t.equal(facts.inputBytes, 10200 + 256 + 38400, 'token_types and per_layer_token_embd are input tensors');
  t.equal(facts.outputBytes, 128 + 10200 + 16, 'rope_freqs counts with the output');
  t.same(facts.layerBytes, [3168, 848, 136], 'a block past block_count is kept, not dropped');
  t.equal(facts.totalBytes, 24544 + 256 + 38400 + 16 + 136);

  const oneKvHead = tinyModel({
    without: ['llama.attention.head_count_kv'],
    metadata: [['llama.attention.head_count_kv', { type: 'uint32', value: 1 }]],
  });
  const scalarKv = modelFacts(await readGgufInfo(await writeModel(t, encodeGguf(oneKvHead))));
  t.same([scalarKv.headCountKv, scalarKv.headCountKvPerLayer], [1, [1, 1]]);
});

t.test('model facts: missing or malformed keys are errors that name the key and the file', async (t) => {
  for (const key of ['llama.block_count', 'llama.context_length', 'llama.embedding_length', 'llama.attention.head_count', 'general.architecture']) {
    const file = await writeModel(t, encodeGguf(tinyModel({ without: [key] })));
    const info = await readGgufInfo(file);
    const message = thrown(t, () => modelFacts(info));
    t.match(message, `missing metadata key "${key}"`, key);
    t.ok(message.startsWith(`${file}: `), `${key}: the message names the file`);
  }
  const read = async (model: GgufModel) => readGgufInfo(await writeModel(t, encodeGguf(model)));
  const wrongLength = tinyModel({
    without: ['llama.attention.head_count_kv'],
    metadata: [['llama.attention.head_count_kv', { type: 'array', itemType: 'uint32', value: [2, 2, 2] }]],
  });
  const infoWrongLength = await read(wrongLength);
  t.match(thrown(t, () => modelFacts(infoWrongLength)), /"llama.attention.head_count_kv" has 3 per-layer values for 2 layers/);
  const stringCount = tinyModel({ without: ['llama.block_count'], metadata: [['llama.block_count', { type: 'string', value: '2' }]] });
  const infoStringCount = await read(stringCount);
  t.match(thrown(t, () => modelFacts(infoStringCount)), /"llama.block_count" must be a non-negative integer, found "2"/);
  const negative = tinyModel({ without: ['llama.context_length'], metadata: [['llama.context_length', { type: 'int32', value: -1 }]] });
  const infoNegative = await read(negative);
  t.match(thrown(t, () => modelFacts(infoNegative)), /"llama.context_length" must be a non-negative integer, found -1/);
});

t.test('big metadata arrays are stepped over: their type and length are kept, the keys after them are read', async (t) => {
  const vocab = 150_000;
  const model: GgufModel = {
    metadata: [
      ['general.architecture', { type: 'string', value: 'qwen2' }],
      ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: Array.from({ length: vocab }, (_, i) => `token-${i}-Ġ`) }],
      ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: Array.from({ length: vocab }, (_, i) => i % 6) }],
      ['tokenizer.ggml.scores', { type: 'array', itemType: 'float32', value: Array.from({ length: vocab }, (_, i) => -i) }],
      ['tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: Array.from({ length: 513 }, (_, i) => `a${i} b`) }],
      ['test.per_layer', { type: 'array', itemType: 'uint64', value: Array.from({ length: 512 }, (_, i) => BigInt(i)) }],
      [
        'test.nested',
        {
          type: 'array',
          itemType: 'array',
          value: [
            { type: 'array', itemType: 'string', value: ['x', 'yy'] },
            { type: 'array', itemType: 'uint8', value: [1, 2, 3] },
          ],
        },
      ],
      ['tokenizer.ggml.eos_token_id', { type: 'uint32', value: 151643 }],
    ],
    tensors: [{ name: 'token_embd.weight', dims: [32, 4], type: Q8_0, data: pattern(136, 9) }],
  };
  const info = await readGgufInfo(await writeModel(t, encodeGguf(model)));
  t.same(info.metadata['tokenizer.ggml.tokens'], { skipped: true, itemType: 'string', length: vocab, longest: Buffer.byteLength('token-149999-Ġ') });
  t.same(info.metadata['tokenizer.ggml.token_type'], { skipped: true, itemType: 'int32', length: vocab });
  t.same(info.metadata['tokenizer.ggml.scores'], { skipped: true, itemType: 'float32', length: vocab });
  t.same(info.metadata['tokenizer.ggml.merges'], { skipped: true, itemType: 'string', length: 513, longest: 6 }, 'one over the small-array limit');
  t.equal(longestToken(info), 15, "the vocabulary's longest token in bytes (Ġ is two), from the array stepped over");
  t.same(info.metadata['test.per_layer'], Array.from({ length: 512 }, (_, i) => i), 'at the small-array limit: kept');
  t.same(info.metadata['test.nested'], { skipped: true, itemType: 'array', length: 2 }, 'arrays of arrays are summarised');
  t.equal(info.metadata['tokenizer.ggml.eos_token_id'], 151643, 'the key after the big arrays is read right');
  t.same(info.tensors, [{ name: 'token_embd.weight', dims: [32, 4], type: Q8_0, typeName: 'Q8_0', bytes: 136, offset: 0 }]);
});

t.test("the longest token of a model file: from a kept vocabulary, none without one, read again when the file changes", async (t) => {
  const file = await writeModel(t, encodeGguf({ metadata: tinyMetadata(), tensors: [] }));
  t.equal(await longestTokenOf(file), Buffer.byteLength('▁wörd294'), 'the longest of 300 kept tokens, in UTF-8 bytes');
  await writeFile(file, encodeGguf({ metadata: [...tinyMetadata().filter(([key]) => key !== 'tokenizer.ggml.tokens'), ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: ['<s>', 'a'.repeat(40)] }]], tensors: [] }));
  t.equal(await longestTokenOf(file), 40, 'a changed file is read again');
  await writeFile(file, encodeGguf({ metadata: tinyMetadata().filter(([key]) => key !== 'tokenizer.ggml.tokens'), tensors: [] }));
  t.equal(await longestTokenOf(file), undefined, 'no vocabulary: nothing is known');
  t.equal(await longestTokenOf(path.join(path.dirname(file), 'missing.gguf')), undefined, 'no file: nothing is known');
});

t.test('the data section is never read: a 64 MiB tensor behind a small header', async (t) => {
  const big = 4096 * 4096 * 4;
  const layout = encodeGgufHeader({ metadata: tinyMetadata(), tensors: [{ name: 'token_embd.weight', dims: [4096, 4096], type: F32 }] });
  t.equal(layout.dataBytes, big);
  const file = path.join(await tempDir(t), 'big.gguf');
  await writeFile(file, layout.header);
  const handle = await open(file, 'r+');
  await handle.truncate(layout.dataOffset + big);
  await handle.close();

  // A spy on every FileHandle's read(): what readGgufInfo pulls from the disk, in bytes.
  const probe = await open(file, 'r');
  const proto = Object.getPrototypeOf(probe) as { read: (...args: unknown[]) => Promise<{ bytesRead: number }> };
  await probe.close();
  const originalRead = proto.read;
  let bytesRead = 0;
  let reads = 0;
  proto.read = async function (this: unknown, ...args: unknown[]) {
    const result = await originalRead.apply(this, args);
    bytesRead += result.bytesRead;
    reads += 1;
    return result;
  };
  t.teardown(() => {
    proto.read = originalRead;
  });
  let info;
  try {
    info = await readGgufInfo(file);
  } finally {
    proto.read = originalRead;
  }

  t.equal(info.fileSize, layout.dataOffset + big);
  t.equal(info.tensors[0]?.bytes, big);
  t.ok(reads > 0 && bytesRead >= info.dataOffset, `the spy saw the header being read (${bytesRead} bytes in ${reads} reads)`);
  t.ok(bytesRead < 1024 * 1024, `less than 1 MiB of the ${info.fileSize}-byte file was read (${bytesRead})`);
});

t.test('errors name the file: not GGUF, unsupported version, truncated, unknown tensor type, absurd counts', async (t) => {
  const good = encodeGguf(tinyModel());
  const layout = encodeGgufHeader({ metadata: tinyMetadata(), tensors: TINY_TENSORS.map(([name, dims, type]) => ({ name, dims, type })) });
  const patched = (at: number, write: (b: Buffer) => void) => {
    const copy = Buffer.from(good);
    write(copy.subarray(at));
    return copy;
  };
  const expectError = async (name: string, bytes: Uint8Array, pattern: RegExp) => {
    const file = await writeModel(t, bytes, `${name}.gguf`);
    const message = await failure(t, readGgufInfo(file));
    t.match(message, pattern, name);
    t.ok(message.startsWith(`${file}: `), `${name}: the message names the file`);
  };

  await expectError('magic', patched(0, (b) => b.write('GGML', 'latin1')), /not a GGUF file \(it starts with "GGML", not "GGUF"\)/);
  await expectError('safetensors', Buffer.from('{"__metadata__":{}}'), /not a GGUF file/);
  await expectError('tiny', Buffer.from('GG'), /not a GGUF file \(only 2 bytes\)/);
  await expectError('version-1', patched(4, (b) => b.writeUInt32LE(1)), /unsupported GGUF version 1 \(versions 2 and 3 are supported\)/);
  await expectError('big-endian', patched(4, (b) => b.writeUInt32BE(3)), /big-endian GGUF files are not supported/);
  await expectError('header-cut', good.subarray(0, Math.floor(layout.dataOffset / 2)), /truncated: .* but the file ends at \d+/);
  await expectError('data-cut', good.subarray(0, good.length - 100), /truncated: tensor "output.weight" ends at offset \d+, but the file ends at \d+/);
  // A tensor info: name, n_dims (uint32), dims (uint64 each), type (uint32), offset (uint64).
  const typeAt = after(good, 'blk.0.attn_q.weight') + 4 + 2 * 8;
  await expectError('unknown-type', patched(typeAt, (b) => b.writeUInt32LE(99)), /tensor "blk.0.attn_q.weight" has unknown ggml type id 99/);
  await expectError('tensor-count', patched(8, (b) => b.writeBigUInt64LE(2n ** 40n)), /absurd tensor count 1099511627776/);
  await expectError('kv-count', patched(16, (b) => b.writeBigUInt64LE(2n ** 62n)), /absurd metadata count/);
  await expectError('key-length', patched(24, (b) => b.writeBigUInt64LE(2n ** 50n)), /absurd metadata key #0 length/);
  // A metadata pair: key, value type (uint32), then for an array its item type (uint32) and length (uint64).
  const arrayLength = after(good, 'tokenizer.ggml.tokens') + 4 + 4;
  const hugeArray = patched(arrayLength, (b) => b.writeBigUInt64LE(2n ** 40n));
  await expectError('array-length', hugeArray, /absurd array length for metadata "tokenizer.ggml.tokens" 1099511627776/);
  const hugeString = patched(after(good, 'tokenizer.chat_template') + 4, (b) => b.writeBigUInt64LE(2n ** 33n));
  await expectError('string-length', hugeString, /absurd metadata "tokenizer.chat_template" length 8589934592/);
  const aligned = encodeGguf(tinyModel({ alignment: 64 }));
  const alignmentAt = after(aligned, 'general.alignment') + 4;
  t.equal(Buffer.from(aligned).readUInt32LE(alignmentAt), 64, 'the test patches the right bytes');
  const odd = Buffer.from(aligned);
  odd.writeUInt32LE(48, alignmentAt);
  await expectError('alignment', odd, /general.alignment must be a uint32 power of two, found uint32 48/);

  // A cut anywhere in the header (every 13th byte) is a truncated file, never a crash or a hang.
  const dir = await tempDir(t);
  const unexpected: string[] = [];
  for (let cut = 4; cut < layout.dataOffset; cut += 13) {
    const file = path.join(dir, `cut-${cut}.gguf`);
    await writeFile(file, good.subarray(0, cut));
    const message = await failure(t, readGgufInfo(file));
    if (!message.startsWith(`${file}: truncated: `)) unexpected.push(`${cut}: ${message}`);
  }
  t.same(unexpected, [], `every cut in the ${layout.dataOffset}-byte header says truncated`);

  const v2 = await readGgufInfo(await writeModel(t, patched(4, (b) => b.writeUInt32LE(2)), 'v2.gguf'));
  t.equal(v2.version, 2, 'version 2 has the same layout and is read');
  t.equal(v2.tensors.length, TINY_TENSORS.length);

  const missing = path.join(await tempDir(t), 'absent.gguf');
  const message = await failure(t, readGgufInfo(missing));
  t.match(message, /cannot open/);
  t.ok(message.startsWith(`${missing}: `));
});

t.test('a FIFO or a device named as the model is refused by its kind, never opened', async (t) => {
  const fifo = path.join(await tempDir(t), 'model.gguf');
  execFileSync('mkfifo', [fifo]);
  // Opening the FIFO would wait for a writer: this one lets such an open go, so a failure ends.
  const writer = setTimeout(() => closeSync(openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK)), 2_000);
  t.teardown(() => clearTimeout(writer));
  const started = Date.now();
  t.match(await failure(t, readGgufInfo(fifo)), `${fifo}: not a regular file (a FIFO)`);
  t.ok(Date.now() - started < 1_000, 'at once, without waiting for a writer');
  t.match(await failure(t, readGgufInfo('/dev/zero')), '/dev/zero: not a regular file (a character device)');
});
