// The tiny whisper model the project generates: its file reads back in whisper.cpp's legacy ggml
// layout with the tensors whisper.cpp creates (names, shapes, types from src/whisper.cpp of 1.9),
// the same seed gives the same bytes, and the real whisper-cli (built by set-up) loads it as a
// multilingual model and transcribes a WAV with it in German, English and with detection.
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { ggmlTensorBytes } from '../../src/adapters/gguf.js';
import { GGML_FILE_MAGIC, HPARAM_ORDER, tinyWhisper, writeTinyWhisper, type WhisperHparams } from '../helpers/tinyWhisper.js';
import { encodeWav } from '../../src/adapters/wav.js';
import { whisperPrograms } from '../helpers/whisper.js';

const run = promisify(execFile);
const F32 = 0;
const F16 = 1;
const Q4_0 = 2;

interface Parsed {
  magic: number;
  hparams: WhisperHparams;
  filters: { mels: number; bins: number; data: Float32Array };
  tokens: string[];
  tensors: Map<string, { dims: number[]; type: number; bytes: number }>;
  trailing: number;
}

/** Reads a file the way whisper_model_load does, every length checked against the bytes there. */
function parse(bytes: Buffer): Parsed {
  let at = 0;
  const int32 = () => {
    const value = bytes.readInt32LE(at);
    at += 4;
    return value;
  };
  const magic = bytes.readUInt32LE(0);
  at = 4;
  const hparams = Object.fromEntries(HPARAM_ORDER.map((key) => [key, int32()])) as unknown as WhisperHparams;
  const mels = int32();
  const bins = int32();
  const data = new Float32Array(mels * bins);
  for (let i = 0; i < data.length; i += 1) data[i] = bytes.readFloatLE(at + 4 * i);
  at += 4 * data.length;
  const tokens: string[] = [];
  for (let n = int32(), i = 0; i < n; i += 1) {
    const length = int32();
    tokens.push(bytes.toString('latin1', at, at + length));
    at += length;
  }
  const tensors = new Map<string, { dims: number[]; type: number; bytes: number }>();
  while (at < bytes.length) {
    const dimCount = int32();
    const nameLength = int32();
    const type = int32();
    const dims = Array.from({ length: dimCount }, int32);
    const name = bytes.toString('latin1', at, at + nameLength);
    at += nameLength;
    const size = ggmlTensorBytes(type, dims);
    if (at + size > bytes.length) throw new Error(`tensor ${name} runs past the end`);
    if (tensors.has(name)) throw new Error(`tensor ${name} twice`);
    tensors.set(name, { dims, type, bytes: size });
    at += size;
  }
  return { magic, hparams, filters: { mels, bins, data }, tokens, tensors, trailing: bytes.length - at };
}

/** One second of a 440 Hz tone at 16 kHz, mono PCM16. */
const tone = () => encodeWav(Int16Array.from({ length: 16_000 }, (_, i) => Math.round(6000 * Math.sin((2 * Math.PI * 440 * i) / 16_000))), 16_000);

t.test('the header, mel filters and vocabulary are what whisper.cpp reads for a multilingual model', async (t) => {
  const started = performance.now();
  const bytes = tinyWhisper();
  const ms = performance.now() - started;
  t.ok(ms < 1000, `generated in ${ms.toFixed(0)} ms (well under a second)`);
  t.ok(bytes.length < 4 * 1024 * 1024, `${bytes.length} bytes: a few MB at most`);
  const file = parse(bytes);
  t.equal(file.magic, GGML_FILE_MAGIC);
  t.equal(bytes.toString('latin1', 0, 4), 'lmgg', '"ggml" as a little-endian uint32');
  t.same(file.hparams, {
    n_vocab: 51865,
    n_audio_ctx: 1500,
    n_audio_state: 64,
    n_audio_head: 2,
    n_audio_layer: 2,
    n_text_ctx: 448,
    n_text_state: 64,
    n_text_head: 2,
    n_text_layer: 2,
    n_mels: 80,
    ftype: 2002,
  });
  // whisper.cpp: multilingual from 51865 tokens on, and n_vocab - 51765 - 1 languages.
  t.ok(file.hparams.n_vocab >= 51865, 'multilingual');
  t.equal(file.hparams.n_vocab - 51765 - 1, 99, '99 languages, de and en among them');
  t.equal(file.hparams.ftype % 1000, 2, 'GGML_FTYPE_MOSTLY_Q4_0, quantization version 2');

  t.equal(file.filters.mels, 80);
  t.equal(file.filters.bins, 201, '1 + WHISPER_N_FFT / 2, which whisper.cpp asserts');
  const peaks: number[] = [];
  for (let m = 0; m < file.filters.mels; m += 1) {
    const row = [...file.filters.data.subarray(m * 201, (m + 1) * 201)];
    const peak = Math.max(...row);
    if (!(peak > 0 && peak <= 1) || row.some((v) => v < 0)) t.fail(`mel filter ${m} is not a triangle in 0..1`);
    peaks.push(row.indexOf(peak));
  }
  t.ok(peaks.every((bin, m) => m === 0 || bin >= peaks[m - 1]!), 'the bands rise from low to high frequencies');
  t.ok(peaks[0]! < 5 && peaks[79]! > 190, `from near 0 Hz to near 8 kHz (peak bins ${peaks[0]} .. ${peaks[79]})`);

  t.equal(file.tokens.length, 50257, 'the text tokens; whisper.cpp adds the 1608 special tokens itself');
  t.equal(file.tokens.indexOf(' '), 0, 'the single space, which whisper.cpp suppresses by name at the first step');
  t.ok(file.tokens.every((token) => /^[\x20-\x7e]+$/.test(token)), 'printable ASCII only: the noise is valid UTF-8');
  t.equal(new Set(file.tokens).size, file.tokens.length, 'no token twice');
});

t.test('the tensors are the ones whisper_model_load creates, with their shapes and types', async (t) => {
  const file = parse(tinyWhisper());
  t.equal(file.trailing, 0, 'the file ends with the last tensor');
  t.equal(file.tensors.size, 11 + 15 * 2 + 24 * 2, 'model globals, 15 tensors per encoder block, 24 per decoder block');
  const expect = (name: string, dims: number[], type: number) => t.same(file.tensors.get(name), { dims, type, bytes: ggmlTensorBytes(type, dims) }, name);
  expect('encoder.positional_embedding', [64, 1500], F32);
  expect('encoder.conv1.weight', [3, 80, 64], F16);
  expect('encoder.conv1.bias', [1, 64], F32);
  expect('encoder.conv2.weight', [3, 64, 64], F16);
  expect('encoder.ln_post.weight', [64], F32);
  expect('encoder.blocks.1.attn.query.weight', [64, 64], Q4_0);
  expect('encoder.blocks.1.mlp.0.weight', [64, 256], Q4_0);
  expect('encoder.blocks.1.mlp.2.weight', [256, 64], Q4_0);
  expect('decoder.positional_embedding', [64, 448], F32);
  expect('decoder.token_embedding.weight', [64, 51865], Q4_0);
  expect('decoder.ln.bias', [64], F32);
  expect('decoder.blocks.1.cross_attn.out.weight', [64, 64], Q4_0);
  expect('decoder.blocks.1.cross_attn_ln.bias', [64], F32);
  t.notOk(file.tensors.has('encoder.blocks.0.attn.key.bias'), 'the key projections have no bias');
  t.notOk(file.tensors.has('encoder.blocks.2.attn.query.weight'), 'two encoder blocks');
  t.notOk(file.tensors.has('decoder.blocks.2.attn.query.weight'), 'two decoder blocks');
  const norms = file.tensors.get('decoder.blocks.0.mlp_ln.weight');
  t.same(norms?.dims, [64]);

  const wide = parse(tinyWhisper({ width: 128, heads: 4, audioLayers: 1, textLayers: 3 }));
  t.match(wide.hparams, { n_audio_state: 128, n_text_state: 128, n_audio_head: 4, n_text_head: 4, n_audio_layer: 1, n_text_layer: 3 });
  t.equal(wide.tensors.size, 11 + 15 * 1 + 24 * 3);
  t.throws(() => tinyWhisper({ width: 48 }), /multiple of 32/, 'Q4_0 rows are blocks of 32');
});

t.test('the same seed gives the same bytes; another seed other weights in the same layout', async (t) => {
  const one = tinyWhisper({ seed: 7 });
  t.ok(one.equals(tinyWhisper({ seed: 7 })), 'deterministic');
  const other = tinyWhisper({ seed: 8 });
  t.equal(other.length, one.length);
  t.notOk(other.equals(one), 'another seed, other weights');
  const a = parse(one);
  const b = parse(other);
  t.same(b.hparams, a.hparams);
  t.same(b.tokens, a.tokens);
  t.same([...b.tensors.keys()], [...a.tensors.keys()]);

  const dir = t.testdir();
  const file = await writeTinyWhisper(path.join(dir, 'models', 'tiny.bin'), { seed: 7 });
  t.ok((await readFile(file)).equals(one), 'the written file is those bytes, in a folder it created');
});

t.test('the real whisper-cli loads the model as multilingual and transcribes a WAV in de, en and auto', async (t) => {
  const { cli } = await whisperPrograms();
  const dir = t.testdir();
  const model = await writeTinyWhisper(path.join(dir, 'tiny.bin'));
  const wav = path.join(dir, 'tone.wav');
  await writeFile(wav, tone());
  for (const language of ['de', 'en', 'auto']) {
    const { stdout, stderr } = await run(cli, ['-m', model, '-f', wav, '-l', language, '-t', '2', '-ng', '-nt'], { timeout: 120_000, env: { ...process.env, CUDA_VISIBLE_DEVICES: '' } });
    t.match(stderr, /whisper_model_load: n_vocab += 51865/, `${language}: the header as written`);
    t.match(stderr, /whisper_model_load: n_langs += 99/, `${language}: multilingual`);
    t.match(stderr, /adding 1608 extra tokens/, `${language}: the special tokens added by whisper.cpp`);
    t.notMatch(stderr, /WARN no tensors loaded|not all tensors loaded/, `${language}: every tensor loaded`);
    if (language === 'auto') t.match(stderr, /auto-detected language: \w+/, 'its own detection ran');
    else t.match(stderr, new RegExp(`lang = ${language}`), `${language}: the language it was given`);
    t.type(stdout, 'string', `${language}: exit 0 with a transcript (noise): ${JSON.stringify(stdout.trim().slice(0, 60))}`);
  }

  // A file cut off in its tensors (a broken download) is refused the way whisper.cpp refuses one:
  // a non-zero exit that says what is wrong. (Cut off before the tensors, whisper.cpp would take it
  // as an empty model "for testing" and run.)
  const bytes = await readFile(model);
  const damaged = path.join(dir, 'damaged.bin');
  await writeFile(damaged, bytes.subarray(0, bytes.length - 200_000));
  const failed = await run(cli, ['-m', damaged, '-f', wav, '-ng'], { timeout: 60_000 }).then(
    () => undefined,
    (error: { code?: number; stderr?: string }) => error,
  );
  t.ok(failed?.code, `whisper-cli exits non-zero (${failed?.code})`);
  t.match(failed?.stderr, /not all tensors loaded/);
  t.match(failed?.stderr, /failed to load model/);
});
