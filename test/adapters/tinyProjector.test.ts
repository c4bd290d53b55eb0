// The tiny vision projector the project generates for the image-editing enhancer's tests: its file
// reads back with the keys and tensors of a LLaVA-1.5 ("mlp") projector, the same seed gives the
// same bytes, and the real llama-server (built by set-up) loads it with the tiny chat model
// (`-m model --mmproj projector`), says it takes images, and answers chat completions whose user
// message holds a PNG: plain text, and JSON of a given schema. A projector whose width is not the
// chat model's is refused at start.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { encodeGguf, readGgufInfo } from '../../src/adapters/gguf.js';
import { pngChunk } from '../../src/adapters/png.js';
import { tinyProjector, writeTinyProjector, type TinyProjectorOptions } from '../helpers/tinyProjector.js';
import { freePort } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn, tinyProjectorIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';

const F32 = 0;
/** Tokens an image becomes with the default projector: (32 / 8)^2 patches. */
const IMAGE_TOKENS = 16;

/** An 8-bit RGB PNG whose pixels come from `pixel`. */
function rgbPng(width: number, height: number, pixel: (x: number, y: number) => [number, number, number]): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // truecolour
  const stride = width * 3 + 1;
  const rows = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) rows.set(pixel(x, y), y * stride + 1 + x * 3);
  }
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, pngChunk('IHDR', ihdr), pngChunk('IDAT', deflateSync(rows)), pngChunk('IEND', Buffer.alloc(0))]);
}

const GRADIENT = rgbPng(24, 16, (x, y) => [x * 10, y * 15, 128]);
const RED = rgbPng(24, 16, () => [255, 0, 0]);

function dataUrl(png: Buffer): string {
  return `data:image/png;base64,${png.toString('base64')}`;
}

/** A user turn with text and, when given, an image as an OpenAI content part. */
function userTurn(text: string, png?: Buffer) {
  const content: unknown[] = [{ type: 'text', text }];
  if (png) content.push({ type: 'image_url', image_url: { url: dataUrl(png) } });
  return { role: 'user', content };
}

interface Completion {
  choices: Array<{ finish_reason: string; message: { role: string; content: string } }>;
  usage: { prompt_tokens: number; completion_tokens: number };
}

interface Server {
  origin: string;
  /** Milliseconds from the start of the process to the first /health 200. */
  loadMs: number;
  output: () => string;
  chat: (body: object) => Promise<{ status: number; ms: number; json: Completion }>;
}

/** Spawns the real llama-server on a free loopback port with the chat model and the projector. */
async function launch(model: string, projector: string) {
  const binary = await llamaServerPath();
  const port = await freePort();
  const args = ['-m', model, '--mmproj', projector, '--host', '127.0.0.1', '--port', String(port), '-c', '512', '-np', '1', '--no-webui'];
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  return { child, origin: `http://127.0.0.1:${port}`, output: () => text };
}

/** Starts llama-server and waits for /health 200; it is killed when the test ends. */
async function startServer(t: Test, model: string, projector: string): Promise<Server> {
  const started = performance.now();
  const { child, origin, output } = await launch(model, projector);
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  await until(
    'llama-server /health 200',
    async () => {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`llama-server exited (${child.exitCode ?? child.signalCode}):\n${output()}`);
      const status = await fetch(`${origin}/health`).then(
        (r) => r.status,
        () => 0,
      );
      return status === 200 ? true : undefined;
    },
    60_000,
  );
  const loadMs = performance.now() - started;
  return {
    origin,
    loadMs,
    output,
    chat: async (body) => {
      const begun = performance.now();
      const res = await fetch(`${origin}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const raw = await res.text();
      const ms = performance.now() - begun;
      if (res.status !== 200) return { status: res.status, ms, json: { choices: [], usage: { prompt_tokens: 0, completion_tokens: 0 } } };
      return { status: res.status, ms, json: JSON.parse(raw) as Completion };
    },
  };
}

/** Runs llama-server with a projector that it should refuse, and returns its exit code and output. */
async function refusedStart(model: string, projector: string): Promise<{ code: number | null; output: string }> {
  const { child, output } = await launch(model, projector);
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, output: output() };
}

t.test('the projector reads back with the keys and tensors of a LLaVA-1.5 mlp projector', async (t) => {
  const file = await writeTinyProjector(path.join(t.testdir(), 'proj.gguf'));
  const info = await readGgufInfo(file);
  const m = info.metadata;
  t.equal(m['general.architecture'], 'clip');
  t.equal(m['clip.projector_type'], 'mlp');
  t.equal(m['clip.has_vision_encoder'], true);
  t.match(m, {
    'clip.vision.image_size': 32,
    'clip.vision.patch_size': 8,
    'clip.vision.embedding_length': 32,
    'clip.vision.feed_forward_length': 64,
    'clip.vision.block_count': 2,
    'clip.vision.attention.head_count': 2,
    'clip.vision.projection_dim': 64,
  });
  t.ok(Math.abs((m['clip.vision.attention.layer_norm_epsilon'] as number) - 1e-5) < 1e-9);
  t.equal((m['clip.vision.image_mean'] as number[]).length, 3);
  t.equal((m['clip.vision.image_std'] as number[]).length, 3);
  const dims = new Map(info.tensors.map((x) => [x.name, x.dims]));
  t.same(dims.get('v.patch_embd.weight'), [8, 8, 3, 32], 'the patch convolution: kernel 8 x 8, RGB in, encoder width out');
  t.same(dims.get('v.position_embd.weight'), [32, IMAGE_TOKENS], 'one position per patch');
  t.same(dims.get('v.blk.1.attn_q.weight'), [32, 32]);
  t.same(dims.get('v.blk.1.ffn_up.weight'), [32, 64]);
  t.same(dims.get('v.blk.1.ffn_down.weight'), [64, 32], 'ffn_down takes the feed-forward width (clip.cpp would swap it otherwise)');
  t.same(dims.get('mm.0.weight'), [32, 64]);
  t.same(dims.get('mm.2.weight'), [64, 64], 'mm.2 gives the chat model its embedding width');
  t.equal(info.tensors.length, 5 + 16 * 2 + 4, 'stem, sixteen tensors per block, the two-layer projector');
  t.ok(info.tensors.every((x) => x.type === F32), 'all tensors are f32');
});

t.test('the same seed gives identical bytes; options shape the projector', async (t) => {
  const bytes = (options: TinyProjectorOptions) => Buffer.from(encodeGguf(tinyProjector(options)));
  t.equal(Buffer.compare(bytes({ seed: 3 }), bytes({ seed: 3 })), 0);
  t.not(Buffer.compare(bytes({ seed: 3 }), bytes({ seed: 4 })), 0);
  t.equal(Buffer.compare(bytes({}), bytes({ seed: 1 })), 0, 'the default seed is 1');
  const other = tinyProjector({ imageSize: 56, patchSize: 14, embedding: 48, heads: 3, blocks: 1, hidden: 40, output: 128 });
  const dims = new Map(other.tensors.map((x) => [x.name, x.dims]));
  t.same(dims.get('v.patch_embd.weight'), [14, 14, 3, 48]);
  t.same(dims.get('v.position_embd.weight'), [48, 16]);
  t.same(dims.get('mm.2.weight'), [40, 128]);
  t.notOk(dims.has('v.blk.1.ln1.weight'), 'one block');
  t.throws(() => tinyProjector({ imageSize: 30, patchSize: 8 }), /multiple of the patch size/);
  t.throws(() => tinyProjector({ embedding: 32, heads: 3 }), /multiple of the heads/);
  t.throws(() => tinyProjector({ embedding: 32, feedForward: 32 }), /must differ/);
});

t.test('the real llama-server loads the projector with the tiny chat model and reads images', async (t) => {
  const dir = t.testdir();
  const model = await tinyModelIn(dir);
  const projector = await tinyProjectorIn(dir);
  const server = await startServer(t, model, projector);
  t.comment(`llama-server with the projector: /health 200 after ${server.loadMs.toFixed(0)} ms`);
  t.match(server.output(), /loaded multimodal model/, 'libmtmd loaded the projector');

  const props = (await (await fetch(`${server.origin}/props`)).json()) as { modalities?: { vision?: boolean } };
  t.equal(props.modalities?.vision, true, '/props: vision');
  const models = (await (await fetch(`${server.origin}/v1/models`)).json()) as { models?: Array<{ capabilities?: string[] }> };
  t.ok(models.models?.[0]?.capabilities?.includes('multimodal'), '/v1/models: multimodal');

  const withImage = await server.chat({ messages: [userTurn('Describe the edit.', GRADIENT)], max_tokens: 8 });
  t.comment(`chat completion with an image: ${withImage.ms.toFixed(0)} ms`);
  t.equal(withImage.status, 200);
  const message = withImage.json.choices[0]?.message;
  t.equal(message?.role, 'assistant');
  t.equal(typeof message?.content, 'string');
  t.ok((message?.content.length ?? 0) > 0, 'some text came back');
  t.equal(withImage.json.usage.completion_tokens, 8);

  const textOnly = await server.chat({ messages: [userTurn('Describe the edit.')], max_tokens: 8 });
  t.equal(textOnly.status, 200);
  t.equal(withImage.json.usage.prompt_tokens - textOnly.json.usage.prompt_tokens, IMAGE_TOKENS, 'the image took its (32 / 8)^2 tokens of the prompt');

  // Greedy answers for two images: the image's embeddings reach the chat model, so they differ.
  const greedy = async (png: Buffer) => (await server.chat({ messages: [userTurn('Describe the edit.', png)], max_tokens: 16, temperature: 0 })).json.choices[0]?.message.content;
  const [gradient, red] = [await greedy(GRADIENT), await greedy(RED)];
  t.equal(await greedy(GRADIENT), gradient, 'the same image gives the same greedy answer');
  t.not(gradient, red, 'another image gives another answer');
});

t.test('an answer about an image in a JSON schema is JSON of that shape', async (t) => {
  const dir = t.testdir();
  const server = await startServer(t, await tinyModelIn(dir), await tinyProjectorIn(dir));
  // The model is random: maxLength bounds the string; llama.cpp's grammar bounds a number (16
  // digits a part) and the whitespace (22 characters at most), so 400 tokens always finish it.
  const schema = {
    type: 'object',
    properties: { prompt: { type: 'string', maxLength: 16 }, wh_ratio: { type: 'number' } },
    required: ['prompt', 'wh_ratio'],
  };
  for (const temperature of [0, 0.8]) {
    for (const png of [GRADIENT, RED]) {
      const res = await server.chat({
        messages: [userTurn('Rewrite the edit instruction as a prompt and give the width/height ratio.', png)],
        max_tokens: 400,
        temperature,
        response_format: { type: 'json_schema', json_schema: { name: 'enhanced', schema } },
      });
      t.comment(`json_schema completion (temperature ${temperature}): ${res.ms.toFixed(0)} ms, ${res.json.usage.completion_tokens} tokens`);
      t.equal(res.status, 200);
      const choice = res.json.choices[0];
      t.equal(choice?.finish_reason, 'stop', 'the grammar finished the object');
      const parsed = JSON.parse(choice?.message.content ?? '') as unknown;
      t.match(parsed, { prompt: String, wh_ratio: Number }, `temperature ${temperature}: ${choice?.message.content}`);
      t.ok((parsed as { prompt: string }).prompt.length <= 16, 'maxLength holds');
    }
  }
});

t.test('llama-server refuses a projector whose width is not the chat model embedding width', async (t) => {
  const dir = t.testdir();
  const model = await tinyModelIn(dir);
  const projector = await tinyProjectorIn(dir, 'narrow-mmproj.gguf', { output: 32 });
  const { code, output } = await refusedStart(model, projector);
  t.not(code, 0, 'it exits with an error');
  t.match(output, /mismatch between text model \(n_embd = 64\) and mmproj \(n_embd = 32\)/);
});
