// A tiny GGUF chat model that the project generates itself, for tests, benchmarks and the demo
// (they need no network and no model download). It is a real llama-architecture model that the real
// llama-server loads and runs: random weights from a seeded generator (the same seed gives the
// same file), a byte-level SentencePiece vocabulary (printable ASCII, tab and newlines as byte
// tokens, `▁` for the space), ChatML control tokens and a ChatML chat template. The head size is
// a multiple of 32, so the q4_0 KV cache of the fixed backend defaults works. Its answers are
// random printable text; its end-of-turn token never wins, so answers run to max_tokens.
import { mkdir, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { encodeGguf, type GgufModel, type GgufValue } from './gguf.js';

export interface TinyModelOptions {
  /** Seed of the weights (default 1). */
  seed?: number;
  /** Embedding width (default 64); `embedding / heads` must be a multiple of 32. */
  embedding?: number;
  /** Transformer blocks (default 2). */
  layers?: number;
  /** Attention heads (default 2). */
  heads?: number;
  /** Feed-forward width (default 4 x embedding). */
  feedForward?: number;
  /** Training context the metadata claims (default 32768). */
  contextLength?: number;
  /** The bias of the `<tool_call>` token (default 4): higher makes calls come sooner. */
  toolCallBias?: number;
  /**
   * Extra bias per printable character (its byte token): e.g. `{ '"': 3 }` makes a JSON string end
   * within a few dozen characters, so an answer bounded by a schema comes quickly (the enhancer tests).
   */
  charBias?: Record<string, number>;
  /** general.name (default "service-deck tiny test model"). */
  name?: string;
}

const GGML_F32 = 0;
/** The opening of a tool call in the template; one token, so the model can start a call at once. */
const TOOL_CALL_OPEN = '<tool_call>\n';
const TOKEN_NORMAL = 1;
const TOKEN_UNKNOWN = 2;
const TOKEN_CONTROL = 3;
const TOKEN_BYTE = 6;

/**
 * ChatML with tools in the Hermes style (tools listed in the system turn, calls inside
 * <tool_call></tool_call>, results inside <tool_response>): llama-server's template analysis
 * derives the tool-call parser and grammar from it, so tool calls come back as `tool_calls`.
 */
export const TINY_CHAT_TEMPLATE = [
  "{%- if tools -%}",
  "{{- '<|im_start|>system\\n' -}}",
  "{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}",
  "{{- '# Tools\\n\\nYou may call one or more functions. Function signatures are within <tools></tools>:\\n<tools>' -}}",
  "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}",
  "{{- '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and arguments within <tool_call></tool_call> tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}",
  "{%- elif messages[0].role == 'system' -%}",
  "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- for message in messages -%}",
  "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}",
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}",
  "{%- elif message.role == 'assistant' -%}",
  "{{- '<|im_start|>assistant' -}}",
  "{%- if message.content -%}{{- '\\n' + message.content -}}{%- endif -%}",
  "{%- if message.tool_calls -%}{%- for tool_call in message.tool_calls -%}",
  "{%- if tool_call.function is defined -%}{%- set tool_call = tool_call.function -%}{%- endif -%}",
  "{{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' + (tool_call.arguments | tojson) + '}\\n</tool_call>' -}}",
  "{%- endfor -%}{%- endif -%}",
  "{{- '<|im_end|>\\n' -}}",
  "{%- elif message.role == 'tool' -%}",
  "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
].join('');

/** The vocabulary: control tokens, then byte tokens for tab, newlines and printable ASCII, then `▁`. */
function vocabulary(): { tokens: string[]; types: number[]; scores: number[] } {
  const tokens = ['<unk>', '<s>', '</s>', '<|im_start|>', '<|im_end|>'];
  const types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL, TOKEN_CONTROL, TOKEN_CONTROL];
  const bytes = [0x09, 0x0a, 0x0d];
  for (let b = 0x20; b <= 0x7e; b += 1) bytes.push(b);
  for (const b of bytes) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TOKEN_BYTE);
  }
  tokens.push('\u2581', TOOL_CALL_OPEN);
  types.push(TOKEN_NORMAL, TOKEN_NORMAL);
  return { tokens, types, scores: tokens.map(() => 0) };
}

/** mulberry32: a small, fast, seeded generator (the same seed gives the same weights); tinyWhisper uses it too. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function tinyModel(options: TinyModelOptions = {}): GgufModel {
  const embedding = options.embedding ?? 64;
  const layers = options.layers ?? 2;
  const heads = options.heads ?? 2;
  const feedForward = options.feedForward ?? embedding * 4;
  const contextLength = options.contextLength ?? 32768;
  const headSize = embedding / heads;
  if (!Number.isInteger(headSize) || headSize % 32 !== 0) {
    throw new Error(`head size ${embedding}/${heads} must be a whole multiple of 32 (the q4_0 KV cache needs it)`);
  }
  const random = seededRandom(options.seed ?? 1);
  const { tokens, types, scores } = vocabulary();
  const vocab = tokens.length;
  const endOfTurn = tokens.indexOf('<|im_end|>');
  const toolCallOpen = tokens.indexOf(TOOL_CALL_OPEN);

  const f32 = (name: string, dims: number[], fill: (i: number) => number) => {
    const count = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(count);
    for (let i = 0; i < count; i += 1) values[i] = fill(i);
    return { name, dims, type: GGML_F32, data: new Uint8Array(values.buffer) };
  };
  const uniform = (scale: number) => () => (random() * 2 - 1) * scale;
  const ones = () => 1;
  const w = 1 / Math.sqrt(embedding);
  // Dimension 0 is a constant bias channel: 1 in every embedding, never written by a block (the
  // rows of attn_output and ffn_down for it are zero), so after the final norm it is positive and
  // column 0 of the output matrix acts as a per-token bias. It keeps the end of turn away (answers
  // run to max_tokens, so tests and benchmarks get steady lengths) and makes `<tool_call>` likely
  // enough that a request with tools gets a call within a few dozen tokens.
  // The rows of the control tokens (end of turn, end of text, ...) are all bias and that bias is
  // huge, so the norm's scale of the channel never brings them near the other logits.
  const control = (token: number) => types[token] === TOKEN_CONTROL || types[token] === TOKEN_UNKNOWN;
  const charBias = new Map(Object.entries(options.charBias ?? {}).map(([char, value]) => [tokens.indexOf(`<0x${char.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}>`), value]));
  charBias.delete(-1);
  const bias = (token: number) => (control(token) ? -1e6 : token === toolCallOpen ? (options.toolCallBias ?? 4) : (charBias.get(token) ?? 0));
  const row = (i: number, width: number) => Math.floor(i / width);
  const tensors = [
    f32('token_embd.weight', [embedding, vocab], (i) => (i % embedding === 0 ? 1 : (random() * 2 - 1) * 1.7)),
    f32('output_norm.weight', [embedding], ones),
    f32('output.weight', [embedding, vocab], (i) =>
      i % embedding === 0 ? bias(row(i, embedding)) : control(row(i, embedding)) ? 0 : (random() * 2 - 1) * 1.5,
    ),
  ];
  for (let l = 0; l < layers; l += 1) {
    tensors.push(
      f32(`blk.${l}.attn_norm.weight`, [embedding], ones),
      f32(`blk.${l}.attn_q.weight`, [embedding, embedding], uniform(w)),
      f32(`blk.${l}.attn_k.weight`, [embedding, embedding], uniform(w)),
      f32(`blk.${l}.attn_v.weight`, [embedding, embedding], uniform(w)),
      f32(`blk.${l}.attn_output.weight`, [embedding, embedding], (i) => (row(i, embedding) === 0 ? 0 : (random() * 2 - 1) * w)),
      f32(`blk.${l}.ffn_norm.weight`, [embedding], ones),
      f32(`blk.${l}.ffn_gate.weight`, [embedding, feedForward], uniform(w)),
      f32(`blk.${l}.ffn_up.weight`, [embedding, feedForward], uniform(w)),
      f32(`blk.${l}.ffn_down.weight`, [feedForward, embedding], (i) => (row(i, feedForward) === 0 ? 0 : (random() * 2 - 1) / Math.sqrt(feedForward))),
    );
  }

  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  const metadata: Array<[string, GgufValue]> = [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: options.name ?? 'service-deck tiny test model' }],
    ['general.file_type', u32(0)],
    ['llama.context_length', u32(contextLength)],
    ['llama.embedding_length', u32(embedding)],
    ['llama.block_count', u32(layers)],
    ['llama.feed_forward_length', u32(feedForward)],
    ['llama.attention.head_count', u32(heads)],
    ['llama.attention.head_count_kv', u32(heads)],
    ['llama.rope.dimension_count', u32(headSize)],
    ['llama.rope.freq_base', { type: 'float32', value: 10000 }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'float32', value: 1e-5 }],
    ['llama.vocab_size', u32(vocab)],
    ['tokenizer.ggml.model', { type: 'string', value: 'llama' }],
    ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens }],
    ['tokenizer.ggml.scores', { type: 'array', itemType: 'float32', value: scores }],
    ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: types }],
    ['tokenizer.ggml.unknown_token_id', u32(0)],
    ['tokenizer.ggml.bos_token_id', u32(1)],
    ['tokenizer.ggml.eos_token_id', u32(endOfTurn)],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: false }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }],
    // No leading space before text: structured output and tool grammars then match the prompt's tail.
    ['tokenizer.ggml.add_space_prefix', { type: 'bool', value: false }],
    ['tokenizer.chat_template', { type: 'string', value: TINY_CHAT_TEMPLATE }],
  ];
  return { metadata, tensors };
}

/** Writes the model atomically (a half-written file never has the final name). */
export async function writeTinyModel(file: string, options: TinyModelOptions = {}): Promise<string> {
  const target = path.resolve(file);
  await mkdir(path.dirname(target), { recursive: true });
  const temp = `${target}.${process.pid}.tmp`;
  await writeFile(temp, encodeGguf(tinyModel(options)));
  await rename(temp, target);
  return target;
}
