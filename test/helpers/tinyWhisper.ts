// A tiny whisper model that the project generates itself, for the tests (model weights
// cannot be downloaded here). It is a file in whisper.cpp's own legacy ggml format, the one
// `whisper_model_load` reads (src/whisper.cpp of whisper.cpp 1.9): magic, hyperparameters, mel
// filters, vocabulary, then every tensor with its dimensions, type and name. The real whisper-cli
// and whisper-server load it and run it; its weights are random from a seeded generator (the same
// seed gives the same file), so what it "hears" is noise, but the programs, their flags, formats
// and errors are the real ones.
//
// Layout choices, each because whisper.cpp derives something from it:
// - n_vocab 51865: whisper.cpp calls a model multilingual from 51865 tokens on, counts
//   n_vocab - 51766 = 99 languages, and places the special tokens (end of text, start of
//   transcript, the language tokens, transcribe, no timestamps) above the text tokens. So `-l de`,
//   `-l en` and `-l auto` (language detection over the language tokens) all work.
// - The file holds the 50257 text tokens only; whisper.cpp names the specials itself ("adding 1608
//   extra tokens"), as it does for the real multilingual models. The text tokens are printable
//   ASCII characters, then made-up syllable words with a leading space, so the noise reads as
//   words and is valid UTF-8. The single space " " must be there: whisper.cpp suppresses it by
//   name at the first step, and stops with an exception when it is missing.
// - Weights are Q4_0 (ftype 2), as in a quantized whisper model: the token embedding (width x
//   51865) is the bulk of the file, and Q4_0 keeps it under 2 MB. Convolutions are then F16, biases,
//   norms and positional embeddings F32, exactly the types whisper.cpp creates its tensors with.
// - n_audio_ctx 1500 and n_text_ctx 448 as in every whisper model: the encoder always sees a 30 s
//   window (3000 mel frames, halved by the second convolution's stride).
//
// Pure noise would be slow: a decoder that never picks the end of text runs every 30 s window to
// 224 tokens, and whisper.cpp, finding the answer unlikely (average log-probability below -1),
// decodes it again at five higher temperatures; the real whisper-cli took over five minutes for
// one second of audio. So three things in the decoder are shaped, and the rest is random:
// - The end channel: dimension 0 of the token embedding (which is also the output projection) is
//   zero for every token but the end of text, and the decoder's positional embedding puts a large
//   negative value there before position END_POSITION and a large positive one from it on. The
//   end of text is then impossible early and certain later: every answer is a few words.
// - Confident words: the decoder's final norm has a gain, so the top word's logit stands well
//   clear of the others and whisper.cpp accepts the first decoding at temperature 0 (no
//   fallback). The rows stay small: they are the input embeddings too, and large rows made every
//   word repeat itself.
// - Varied words: the positional embedding's other dimensions are large, so the words change from
//   position to position; which words come also depends on the audio (through the
//   cross-attention), and on the seed.
// The result: about 0.2 s for a short recording with whisper-cli's defaults (5 beams), seven words.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ggmlTensorBytes } from '../../src/adapters/gguf.js';
import { seededRandom } from '../../src/adapters/tinyModel.js';

/** GGML_FILE_MAGIC: "ggml" read as a little-endian uint32. */
export const GGML_FILE_MAGIC = 0x67676d6c;
/** The vocabulary size of the real multilingual whisper models (99 languages). */
export const WHISPER_MULTILINGUAL_VOCAB = 51865;
/** Token ids below this are text; whisper.cpp puts its specials from here on. */
export const WHISPER_TEXT_TOKENS = 50257;

const GGML_TYPE_F32 = 0;
const GGML_TYPE_F16 = 1;
const GGML_TYPE_Q4_0 = 2;
/** GGML_FTYPE_MOSTLY_Q4_0, stored as whisper.cpp's quantizer stores it: + GGML_QNT_VERSION (2) x 1000. */
const FTYPE_Q4_0 = 2 + 2 * 1000;
const Q4_0_BLOCK = 32;
const Q4_0_BLOCK_BYTES = 18;

/** The decoder position from which the end of text wins (the prompt takes 3 or 4 positions). */
export const END_POSITION = 10;
/** The end channel's value in the positional embedding. */
const END_CHANNEL = 8;
/** The end of text's weight on the end channel: its logit then outweighs every word's (at most ~40). */
const END_WEIGHT = 64;
/** Range of the positional embedding's other dimensions. */
const POSITION_RANGE = 2;
/** Weight range of a text token's row and of a special token's row in the token embedding. */
const TEXT_ROW = 0.5;
const SPECIAL_ROW = 0.125;
/** The weight of the decoder's final norm (1 in the other norms). */
const OUTPUT_GAIN = 4;

const SAMPLE_RATE = 16_000;
/** WHISPER_N_FFT: 400 samples per frame, so 201 frequency bins from 0 Hz to Nyquist. */
const N_FFT = 400;

export interface TinyWhisperOptions {
  /** Seed of the weights (default 1). */
  seed?: number;
  /** n_audio_state = n_text_state (default 64); a multiple of 32 (the Q4_0 block). */
  width?: number;
  /** Attention heads in encoder and decoder (default 2). */
  heads?: number;
  /** Encoder blocks (default 2). */
  audioLayers?: number;
  /** Decoder blocks (default 2). */
  textLayers?: number;
}

/** The hyperparameters in the order of the file's header. */
export interface WhisperHparams {
  n_vocab: number;
  n_audio_ctx: number;
  n_audio_state: number;
  n_audio_head: number;
  n_audio_layer: number;
  n_text_ctx: number;
  n_text_state: number;
  n_text_head: number;
  n_text_layer: number;
  n_mels: number;
  ftype: number;
}

export const HPARAM_ORDER: ReadonlyArray<keyof WhisperHparams> = [
  'n_vocab',
  'n_audio_ctx',
  'n_audio_state',
  'n_audio_head',
  'n_audio_layer',
  'n_text_ctx',
  'n_text_state',
  'n_text_head',
  'n_text_layer',
  'n_mels',
  'ftype',
];

/** One tensor as whisper.cpp expects it: name, dimensions (ne[0] first) and ggml type. */
export interface WhisperTensorSpec {
  name: string;
  dims: number[];
  type: number;
}

/**
 * Every tensor whisper_model_load creates for these hyperparameters, with its shape and type: the
 * file must hold exactly these (an unknown name, a wrong shape or a missing tensor fails the load).
 */
export function whisperTensors(h: WhisperHparams): WhisperTensorSpec[] {
  const w = GGML_TYPE_Q4_0;
  const s = h.n_audio_state;
  const t = h.n_text_state;
  const f32 = (name: string, ...dims: number[]) => ({ name, dims, type: GGML_TYPE_F32 });
  const q = (name: string, ...dims: number[]) => ({ name, dims, type: w });
  // A block's tensors; `p` is its prefix, `n` its width. The key projection has no bias.
  const attention = (p: string, n: number) => [
    f32(`${p}_ln.weight`, n),
    f32(`${p}_ln.bias`, n),
    q(`${p}.query.weight`, n, n),
    f32(`${p}.query.bias`, n),
    q(`${p}.key.weight`, n, n),
    q(`${p}.value.weight`, n, n),
    f32(`${p}.value.bias`, n),
    q(`${p}.out.weight`, n, n),
    f32(`${p}.out.bias`, n),
  ];
  const mlp = (p: string, n: number) => [
    f32(`${p}.mlp_ln.weight`, n),
    f32(`${p}.mlp_ln.bias`, n),
    q(`${p}.mlp.0.weight`, n, 4 * n),
    f32(`${p}.mlp.0.bias`, 4 * n),
    q(`${p}.mlp.2.weight`, 4 * n, n),
    f32(`${p}.mlp.2.bias`, n),
  ];
  const tensors: WhisperTensorSpec[] = [
    f32('encoder.positional_embedding', s, h.n_audio_ctx),
    { name: 'encoder.conv1.weight', dims: [3, h.n_mels, s], type: GGML_TYPE_F16 },
    f32('encoder.conv1.bias', 1, s),
    { name: 'encoder.conv2.weight', dims: [3, s, s], type: GGML_TYPE_F16 },
    f32('encoder.conv2.bias', 1, s),
    f32('encoder.ln_post.weight', s),
    f32('encoder.ln_post.bias', s),
  ];
  for (let i = 0; i < h.n_audio_layer; i += 1) tensors.push(...mlp(`encoder.blocks.${i}`, s), ...attention(`encoder.blocks.${i}.attn`, s));
  tensors.push(f32('decoder.positional_embedding', t, h.n_text_ctx), q('decoder.token_embedding.weight', t, h.n_vocab), f32('decoder.ln.weight', t), f32('decoder.ln.bias', t));
  for (let i = 0; i < h.n_text_layer; i += 1) {
    tensors.push(...mlp(`decoder.blocks.${i}`, t), ...attention(`decoder.blocks.${i}.attn`, t), ...attention(`decoder.blocks.${i}.cross_attn`, t));
  }
  return tensors;
}

/** The text tokens: printable ASCII (the single space among them), then " " + syllable words. */
export function tinyWhisperVocabulary(): string[] {
  const tokens: string[] = [];
  for (let c = 0x20; c <= 0x7e; c += 1) tokens.push(String.fromCharCode(c));
  const syllables = [...'bdfgklmnprstvz'].flatMap((c) => [...'aeiou'].map((v) => c + v));
  for (let n = 0; tokens.length < WHISPER_TEXT_TOKENS; n += 1) {
    let word = '';
    let rest = n;
    do {
      word = syllables[rest % syllables.length]! + word;
      rest = Math.floor(rest / syllables.length);
    } while (rest > 0);
    tokens.push(` ${word}`);
  }
  return tokens;
}

/**
 * Triangular filters evenly spaced on the mel scale from 0 Hz to Nyquist, one row of 201 FFT bins
 * per mel band: the shape of the filters whisper's own files carry, so the log-mel spectrogram
 * whisper.cpp computes from a recording is a real one.
 */
function melFilters(mels: number): Float32Array {
  const bins = N_FFT / 2 + 1;
  const mel = (hz: number) => 2595 * Math.log10(1 + hz / 700);
  const hz = (m: number) => 700 * (10 ** (m / 2595) - 1);
  const top = mel(SAMPLE_RATE / 2);
  const edges = Array.from({ length: mels + 2 }, (_, i) => hz((top * i) / (mels + 1)));
  const filters = new Float32Array(mels * bins);
  for (let m = 0; m < mels; m += 1) {
    const [low, centre, high] = [edges[m]!, edges[m + 1]!, edges[m + 2]!];
    for (let k = 0; k < bins; k += 1) {
      const f = (k * SAMPLE_RATE) / N_FFT;
      filters[m * bins + k] = Math.max(0, Math.min((f - low) / (centre - low), (high - f) / (high - centre)));
    }
  }
  return filters;
}

const halfScratch = new DataView(new ArrayBuffer(4));

/** IEEE half precision of `x` (round to nearest; tiny values flush to zero, which random weights never need). */
function toHalf(x: number): number {
  halfScratch.setFloat32(0, x);
  const bits = halfScratch.getUint32(0);
  const sign = (bits >>> 16) & 0x8000;
  const exponent = ((bits >>> 23) & 0xff) - 127 + 15;
  if (exponent <= 0) return sign;
  if (exponent >= 0x1f) return sign | 0x7c00;
  const half = sign | (exponent << 10) | ((bits >>> 13) & 0x3ff);
  return (bits & 0x1000) !== 0 ? half + 1 : half;
}

/**
 * Q4_0 blocks of random weights: each block a half-precision step d, then 32 random nibbles q
 * (16 bytes, written four at a time), each weight (q - 8) x d, so uniform in about +-8d. `range`
 * gives the range of block `block`. Returns the offset after the last block.
 */
function writeQ4Rows(out: Buffer, at: number, blocks: number, range: (block: number) => number, random: () => number): number {
  for (let block = 0; block < blocks; block += 1) {
    at = out.writeUInt16LE(toHalf(range(block) / 8), at);
    for (let j = 0; j < 4; j += 1) at = out.writeUInt32LE(Math.floor(random() * 0x1_0000_0000), at);
  }
  return at;
}

/**
 * The token embedding with the end channel (see the file's opening): dimension 0 zero (nibble 8) in
 * every row but the end of text's, which is END_WEIGHT there and zero elsewhere. Text rows are in
 * +-TEXT_ROW; the special rows (languages, timestamps) in the smaller +-SPECIAL_ROW, so that with
 * timestamps on a word still outweighs the 1501 timestamps together and the answer has words.
 */
function writeTokenEmbedding(out: Buffer, at: number, width: number, tokens: number, random: () => number): number {
  const blocksPerRow = width / Q4_0_BLOCK;
  const endOfText = WHISPER_TEXT_TOKENS;
  for (let token = 0; token < tokens; token += 1) {
    const start = at;
    if (token === endOfText) {
      // Dimension 0 is the low nibble of the first block's first byte: 15, so 7d; all else 8, so 0.
      out.fill(0x88, at, at + blocksPerRow * Q4_0_BLOCK_BYTES);
      out.writeUInt16LE(toHalf(END_WEIGHT / 7), at);
      out[at + 2] = 0x8f;
      at += blocksPerRow * Q4_0_BLOCK_BYTES;
      continue;
    }
    at = writeQ4Rows(out, at, blocksPerRow, () => (token < WHISPER_TEXT_TOKENS ? TEXT_ROW : SPECIAL_ROW), random);
    out[start + 2] = (out[start + 2]! & 0xf0) | 0x08;
  }
  return at;
}

/** The bytes of a tiny whisper model (see the file's opening for what it is). */
export function tinyWhisper(options: TinyWhisperOptions = {}): Buffer {
  const width = options.width ?? 64;
  const heads = options.heads ?? 2;
  if (width % Q4_0_BLOCK !== 0 || width % heads !== 0) throw new Error(`width ${width} must be a multiple of ${Q4_0_BLOCK} and of the head count ${heads}`);
  const hparams: WhisperHparams = {
    n_vocab: WHISPER_MULTILINGUAL_VOCAB,
    n_audio_ctx: 1500,
    n_audio_state: width,
    n_audio_head: heads,
    n_audio_layer: options.audioLayers ?? 2,
    n_text_ctx: 448,
    n_text_state: width,
    n_text_head: heads,
    n_text_layer: options.textLayers ?? 2,
    n_mels: 80,
    ftype: FTYPE_Q4_0,
  };
  const filters = melFilters(hparams.n_mels);
  const tokens = tinyWhisperVocabulary();
  const tensors = whisperTensors(hparams);
  // One buffer of the exact size, written front to back (a few MB in small pieces would keep the
  // garbage collector busy for longer than the writing takes). Everything is little-endian.
  const size =
    4 * (1 + HPARAM_ORDER.length) +
    8 + 4 * filters.length +
    4 + tokens.reduce((sum, token) => sum + 4 + token.length, 0) +
    tensors.reduce((sum, x) => sum + 12 + 4 * x.dims.length + x.name.length + ggmlTensorBytes(x.type, x.dims), 0);
  const out = Buffer.alloc(size);
  let at = 0;
  const int32 = (value: number) => (at = out.writeInt32LE(value, at));
  const text = (value: string) => (at += out.write(value, at, 'latin1'));
  const random = seededRandom(options.seed ?? 1);

  int32(GGML_FILE_MAGIC);
  for (const key of HPARAM_ORDER) int32(hparams[key]);
  int32(hparams.n_mels);
  int32(N_FFT / 2 + 1);
  for (const value of filters) at = out.writeFloatLE(value, at);
  int32(tokens.length);
  for (const token of tokens) {
    int32(token.length);
    text(token);
  }

  for (const tensor of tensors) {
    int32(tensor.dims.length);
    int32(tensor.name.length);
    int32(tensor.type);
    for (const d of tensor.dims) int32(d);
    text(tensor.name);
    const count = tensor.dims.reduce((a, b) => a * b, 1);
    // Norms are identity (weight 1, bias 0; the decoder's last has its gain) and biases 0;
    // everything else is uniform in +-1/sqrt(fan-in), so the activations neither vanish nor blow up.
    const fill = tensor.name === 'decoder.ln.weight' ? OUTPUT_GAIN : /_ln\.weight$|\.ln_post\.weight$/.test(tensor.name) ? 1 : tensor.name.endsWith('.bias') ? 0 : undefined;
    const scale = 1 / Math.sqrt(tensor.dims[0] === 3 ? 3 * tensor.dims[1]! : tensor.dims[0]!);
    const row = (i: number) => Math.floor(i / tensor.dims[0]!);
    if (tensor.name === 'decoder.positional_embedding') {
      for (let i = 0; i < count; i += 1) {
        const channel = i % tensor.dims[0]!;
        at = out.writeFloatLE(channel === 0 ? (row(i) < END_POSITION ? -END_CHANNEL : END_CHANNEL) : (random() * 2 - 1) * POSITION_RANGE, at);
      }
    } else if (tensor.type === GGML_TYPE_F32) {
      for (let i = 0; i < count; i += 1) at = out.writeFloatLE(fill ?? (random() * 2 - 1) * scale, at);
    } else if (tensor.type === GGML_TYPE_F16) {
      for (let i = 0; i < count; i += 1) at = out.writeUInt16LE(toHalf((random() * 2 - 1) * scale), at);
    } else if (tensor.name === 'decoder.token_embedding.weight') {
      at = writeTokenEmbedding(out, at, tensor.dims[0]!, tensor.dims[1]!, random);
    } else {
      at = writeQ4Rows(out, at, count / Q4_0_BLOCK, () => scale, random);
    }
  }
  if (at !== size) throw new Error(`tiny whisper model: wrote ${at} of ${size} bytes`);
  return out;
}

/** Writes the model atomically (a half-written file never has the final name). */
export async function writeTinyWhisper(file: string, options: TinyWhisperOptions = {}): Promise<string> {
  const target = path.resolve(file);
  await mkdir(path.dirname(target), { recursive: true });
  const temp = `${target}.${process.pid}.tmp`;
  await writeFile(temp, tinyWhisper(options));
  await rename(temp, target);
  return target;
}
