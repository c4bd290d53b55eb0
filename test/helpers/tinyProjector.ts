// A tiny vision projector (the `--mmproj` GGUF of a multimodal chat model) that the project
// generates itself, for the tests of the prompt enhancer's image editing (projector weights cannot
// be downloaded here). llama-server loads it with the tiny chat model (tinyModel.ts) and then
// takes images in chat messages: its libmtmd (tools/mtmd/clip.cpp of the llama.cpp that
// scripts/build-llama.sh builds) encodes each image into a few embeddings that go to the chat
// model in the image's place. The weights are random from a seeded generator (the same seed gives
// the same file), so what it "sees" is noise, but the loader, the image decoding, the encoder graph
// and the request formats are the real ones.
//
// It is the plainest layout clip.cpp knows, a LLaVA-1.5 projector (clip.projector_type "mlp"):
// - a CLIP ViT: a patch convolution with bias, position embeddings, a pre-norm and `blocks`
//   pre-norm transformer blocks (ln1, q/k/v/out with biases, ln2, ffn up/down with biases; GELU);
//   the llava graph reads the output of the second-to-last block, so of the two default blocks one
//   runs;
// - then mm.0 (width to hidden), GELU, mm.2 (hidden to `output`). clip.cpp takes the projector's
//   width from mm.2's rows and mtmd refuses a projector whose width is not the chat model's
//   embedding width: `output` must be the chat model's `embedding` (64 by default, as there).
// With no grid pinpoints every image is resized to image_size x image_size (a fixed-size
// preprocessor), so an image is always (image_size / patch_size)^2 tokens: 16 by default.
// Keys are uint32, float32, bool and float32 arrays exactly: clip.cpp's getters abort on another
// type. Every tensor is f32.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { encodeGguf, type GgufModel, type GgufValue } from '../../src/adapters/gguf.js';
import { seededRandom } from '../../src/adapters/tinyModel.js';

export interface TinyProjectorOptions {
  /** Seed of the weights (default 1). */
  seed?: number;
  /** Side of the square image the encoder sees (default 32); a multiple of `patchSize`. */
  imageSize?: number;
  /** Side of a patch (default 8). */
  patchSize?: number;
  /** Width of the vision encoder (default 32); a multiple of `heads`. */
  embedding?: number;
  /** Attention heads of the encoder (default 2). */
  heads?: number;
  /** Feed-forward width of the encoder (default 2 x embedding). */
  feedForward?: number;
  /** Encoder blocks (default 2; the llava graph runs all but the last). */
  blocks?: number;
  /** Hidden width of the MLP projector (default 64). */
  hidden?: number;
  /** Width of the projected embeddings: the chat model's embedding width (default 64). */
  output?: number;
  /** general.name (default "service-deck tiny test projector"). */
  name?: string;
}

const GGML_F32 = 0;
/** CLIP's normalisation (OpenAI CLIP mean and standard deviation per channel). */
const IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073];
const IMAGE_STD = [0.26862954, 0.26130258, 0.27577711];

export function tinyProjector(options: TinyProjectorOptions = {}): GgufModel {
  const imageSize = options.imageSize ?? 32;
  const patchSize = options.patchSize ?? 8;
  const width = options.embedding ?? 32;
  const heads = options.heads ?? 2;
  const feedForward = options.feedForward ?? width * 2;
  const blocks = options.blocks ?? 2;
  const hidden = options.hidden ?? 64;
  const output = options.output ?? 64;
  if (!Number.isInteger(imageSize / patchSize)) throw new Error(`image size ${imageSize} must be a whole multiple of the patch size ${patchSize}`);
  if (!Number.isInteger(width / heads)) throw new Error(`encoder width ${width} must be a whole multiple of the heads ${heads}`);
  // clip.cpp swaps ffn_up and ffn_down when ffn_down's input width equals the encoder width (a fix
  // for old conversions); the shapes are then the same either way, but the weights change places.
  if (feedForward === width) throw new Error(`the feed-forward width must differ from the encoder width (${width})`);
  if (blocks < 1) throw new Error('the encoder needs at least one block');
  const patches = (imageSize / patchSize) ** 2;
  const random = seededRandom(options.seed ?? 1);

  const f32 = (name: string, dims: number[], fill: () => number) => {
    const count = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(count);
    for (let i = 0; i < count; i += 1) values[i] = fill();
    return { name, dims, type: GGML_F32, data: new Uint8Array(values.buffer) };
  };
  /** Uniform in ±1/sqrt(fan-in): activations keep about the same size from layer to layer. */
  const weight = (name: string, fanIn: number, fanOut: number) =>
    f32(name, [fanIn, fanOut], () => ((random() * 2 - 1) * Math.sqrt(3)) / Math.sqrt(fanIn));
  const small = (name: string, size: number) => f32(name, [size], () => (random() * 2 - 1) * 0.02);
  const ones = (name: string, size: number) => f32(name, [size], () => 1);
  const zeros = (name: string, size: number) => f32(name, [size], () => 0);

  const tensors = [
    // ggml's convolution kernel: [kernel width, kernel height, input channels, output channels].
    f32('v.patch_embd.weight', [patchSize, patchSize, 3, width], () => ((random() * 2 - 1) * Math.sqrt(3)) / Math.sqrt(patchSize * patchSize * 3)),
    small('v.patch_embd.bias', width),
    f32('v.position_embd.weight', [width, patches], () => (random() * 2 - 1) * 0.5),
    ones('v.pre_ln.weight', width),
    zeros('v.pre_ln.bias', width),
  ];
  for (let b = 0; b < blocks; b += 1) {
    const blk = `v.blk.${b}`;
    tensors.push(
      ones(`${blk}.ln1.weight`, width),
      zeros(`${blk}.ln1.bias`, width),
      weight(`${blk}.attn_q.weight`, width, width),
      small(`${blk}.attn_q.bias`, width),
      weight(`${blk}.attn_k.weight`, width, width),
      small(`${blk}.attn_k.bias`, width),
      weight(`${blk}.attn_v.weight`, width, width),
      small(`${blk}.attn_v.bias`, width),
      weight(`${blk}.attn_out.weight`, width, width),
      small(`${blk}.attn_out.bias`, width),
      ones(`${blk}.ln2.weight`, width),
      zeros(`${blk}.ln2.bias`, width),
      weight(`${blk}.ffn_up.weight`, width, feedForward),
      small(`${blk}.ffn_up.bias`, feedForward),
      weight(`${blk}.ffn_down.weight`, feedForward, width),
      small(`${blk}.ffn_down.bias`, width),
    );
  }
  tensors.push(weight('mm.0.weight', width, hidden), small('mm.0.bias', hidden), weight('mm.2.weight', hidden, output), small('mm.2.bias', output));

  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', { type: 'string', value: 'clip' }],
    ['general.name', { type: 'string', value: options.name ?? 'service-deck tiny test projector' }],
    ['general.file_type', u32(0)],
    ['clip.projector_type', { type: 'string', value: 'mlp' }],
    ['clip.has_vision_encoder', { type: 'bool', value: true }],
    ['clip.vision.image_size', u32(imageSize)],
    ['clip.vision.patch_size', u32(patchSize)],
    ['clip.vision.embedding_length', u32(width)],
    ['clip.vision.feed_forward_length', u32(feedForward)],
    ['clip.vision.block_count', u32(blocks)],
    ['clip.vision.attention.head_count', u32(heads)],
    ['clip.vision.attention.layer_norm_epsilon', { type: 'float32', value: 1e-5 }],
    // Read and required, but the mlp projector's width comes from mm.2.
    ['clip.vision.projection_dim', u32(output)],
    ['clip.vision.image_mean', { type: 'array', itemType: 'float32', value: IMAGE_MEAN }],
    ['clip.vision.image_std', { type: 'array', itemType: 'float32', value: IMAGE_STD }],
  ];
  return { metadata, tensors };
}

/** Writes the projector atomically (a half-written file never has the final name). */
export async function writeTinyProjector(file: string, options: TinyProjectorOptions = {}): Promise<string> {
  const target = path.resolve(file);
  await mkdir(path.dirname(target), { recursive: true });
  const temp = `${target}.${process.pid}.tmp`;
  await writeFile(temp, encodeGguf(tinyProjector(options)));
  await rename(temp, target);
  return target;
}
