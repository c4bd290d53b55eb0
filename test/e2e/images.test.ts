// Images (spec 3.3, 4.3, 4.4, 7) with the official openai client, through the real service, the
// real scheduler and the real image worker; only sd-cli is a stand-in (test/fixtures/sd-cli, the
// real flags, a real PNG with a `parameters` text chunk). Checked: the body against openapi.json,
// no text or EXIF chunk in the returned PNG, the job folder gone, no image process left, the
// prompt in no log, the references in order in a private folder, and every error of 4.3/4.4.
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t, { type Test } from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { METADATA_CHUNKS, pngChunks, pngSize } from '../../src/adapters/png.js';
import { build, failureOf, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { png } from '../helpers/png.js';
import { matchesSchema } from '../helpers/openapi.js';
import { alive, until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const PROMPT = 'a lighthouse on a cliff at dusk, oil painting';

interface Run {
  pid: number;
  args: string[];
  refs: Array<{ file: string; bytes: number; mode: string }>;
  outputDirMode: string;
}

async function painter(b: Built, dir: string, name: string, over: { behaviour?: string; referenceImages?: number; publish?: boolean } = {}) {
  const model = path.join(dir, `${name}.gguf`);
  await writeFile(model, over.behaviour ?? 'ok');
  const created = await b.admin('POST', '/api/v1/profiles', {
    name,
    category: 'image',
    params: { model, width: 64, height: 72, steps: 4, seed: 7, guidance: 2.5, cfgScale: 1, referenceImages: over.referenceImages ?? 4 },
  });
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const id = ((await created.json()) as { id: string }).id;
  if (over.publish !== false) await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return { id, model };
}

const runs = async (model: string): Promise<Run[]> =>
  (await readFile(`${model}.runs.jsonl`, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Run);
const jobFolders = async (b: Built) => readdir(path.join(b.stateDir, 'jobs'));

async function setUp(t: Test, imageLimits?: { loadTimeLimitMs: number }) {
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_DRAIN_LIMIT_MS: '1000' }, ...(imageLimits ? { imageLimits } : {}) });
  await b.startEndpoint();
  const dir = await tempDir(t);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  return { b, dir, client };
}

async function expectError(t: Test, response: Response, status: number, code: string, param?: string | null) {
  const body = (await response.json()) as { error: { code: string; param: string | null; message: string } };
  t.equal(response.status, status, `${status} ${code}: ${body.error.message}`);
  t.equal(body.error.code, code);
  if (param !== undefined) t.equal(body.error.param, param);
  return body.error;
}

t.test('generate through the openai client: the profile decides, the PNG carries no metadata, nothing is left', async (t) => {
  const { b, dir, client } = await setUp(t);
  const { model } = await painter(b, dir, 'painter');
  const answer = await client.images.generate({ model: 'service-image', prompt: PROMPT, n: 1, size: '1024x1024', response_format: 'b64_json' });
  matchesSchema(t, 'ImagesResponse', answer, 'the body matches ImagesResponse');
  t.same((answer as unknown as { service_deck: unknown }).service_deck, { size: '64x72', requested_size: '1024x1024', size_policy: 'profile', enhancer: null });
  const image = Buffer.from(answer.data![0]!.b64_json!, 'base64');
  t.same(pngSize(image), { width: 64, height: 72 }, "the profile's resolution, not the wish");
  const types = pngChunks(image).map((c) => c.type);
  t.same(types.filter((type) => METADATA_CHUNKS.has(type)), [], `no text or EXIF chunk (${types.join(', ')})`);
  t.notOk(image.includes(Buffer.from('lighthouse')), 'the prompt is nowhere in the file');

  const [run] = await runs(model);
  const flag = (name: string) => run!.args[run!.args.indexOf(name) + 1];
  t.same([flag('-m'), flag('-W'), flag('-H'), flag('--steps'), flag('-s'), flag('--guidance'), flag('--cfg-scale')], [model, '64', '72', '4', '7', '2.5', '1'], "sd-cli gets the profile's settings");
  t.ok(run!.args.includes('--disable-image-metadata'));
  t.match(flag('-o'), new RegExp(`^${path.join(b.stateDir, 'jobs')}/image-[0-9a-f-]+/output\\.png$`), 'the output goes into the job folder');
  t.equal(run!.outputDirMode, '700', 'the job folder is private');
  t.same(await jobFolders(b), [], 'and removed when the job ended');
  await until('the image process to be gone', async () => (alive(run!.pid) ? undefined : true));
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string }> };
  t.notOk(status.workers.some((w) => w.kind === 'image'), 'no image worker is left');
  t.notOk(b.logLines.join('\n').includes('lighthouse'), 'the prompt reached no log line');

  const direct = await client.images.generate({ model: 'painter', prompt: PROMPT });
  t.ok(direct.data?.[0]?.b64_json, 'the direct name of the published profile works too');
  t.equal((direct as unknown as { service_deck: { requested_size: string | null } }).service_deck.requested_size, null);
});

t.test('edit with several references through the openai client: in order, private, removed afterwards', async (t) => {
  const { b, dir, client } = await setUp(t);
  const { model } = await painter(b, dir, 'editor');
  const references = [png(8, 8, 10), png(16, 16, 20), png(4, 4, 30)];
  const answer = await client.images.edit({
    model: 'service-image',
    prompt: 'make it winter',
    image: await Promise.all(references.map((bytes, i) => toFile(bytes, `ref-${i}.png`, { type: 'image/png' }))),
  });
  matchesSchema(t, 'ImagesResponse', answer);
  const stripped = Buffer.from(answer.data![0]!.b64_json!, 'base64');
  t.same(pngChunks(stripped).filter((c) => METADATA_CHUNKS.has(c.type)), []);
  const [run] = await runs(model);
  t.same(run!.refs.map((r) => r.bytes), references.map((r) => r.length), 'three -r flags, in the order sent');
  t.same(run!.refs.map((r) => r.mode), ['600', '600', '600'], 'each reference private');
  t.same(run!.refs.map((r) => path.basename(r.file)), ['reference-1.png', 'reference-2.png', 'reference-3.png']);
  t.same(await jobFolders(b), [], 'removed with the job');
});

t.test('every refusal of spec 4.3, 4.4 and 7', async (t) => {
  const { b, dir } = await setUp(t);
  const post = (body: unknown) => b.api('POST', '/v1/images/generations', body);
  const unpublished = await expectError(t, await post({ model: 'service-image', prompt: 'x' }), 404, 'model_not_found', 'model');
  t.match(unpublished.message, /No image profile is published/, 'the alias with nothing behind it says so');
  const { id } = await painter(b, dir, 'flat', { referenceImages: 0 });

  await expectError(t, await post({ model: 'service-image', prompt: 'x', n: 2 }), 400, 'invalid_value', 'n');
  await expectError(t, await post({ model: 'service-image', prompt: 'x', response_format: 'url' }), 400, 'invalid_value', 'response_format');
  await expectError(t, await post({ model: 'service-image', prompt: 'x', size: 'huge' }), 400, 'invalid_value', 'size');
  await expectError(t, await post({ model: 'service-image', prompt: 'x', steps: 30 }), 400, 'unknown_parameter', 'steps');
  await expectError(t, await post({ model: 'service-image', prompt: 'x', output_format: 'jpeg' }), 400, 'invalid_value', 'output_format');
  await expectError(t, await post({ model: 'service-image', prompt: '  ' }), 400, 'invalid_value', 'prompt');
  await expectError(t, await post({ model: 'service-image' }), 400, 'invalid_value', 'prompt');
  await expectError(t, await post({ model: 'service-image', prompt: 'TOPSECRET\u0000x' }), 400, 'invalid_value', 'prompt');
  await expectError(t, await post({ model: 'no-such', prompt: 'x' }), 404, 'model_not_found');

  const edit = async (files: Array<{ bytes: Buffer; name: string }>, fields: Record<string, string> = {}) => {
    const form = new FormData();
    form.set('model', 'service-image');
    form.set('prompt', 'make it winter');
    for (const [name, value] of Object.entries(fields)) form.set(name, value);
    for (const file of files) form.append('image[]', new Blob([file.bytes]), file.name);
    return fetch(`${b.apiUrl()}/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  };
  const one = [{ bytes: png(), name: 'a.png' }];
  let error = await expectError(t, await edit(one), 400, 'invalid_value', 'image');
  t.match(error.message, /takes no reference images \(its params\.referenceImages is 0\)/, 'capability zero, named by the profile setting');

  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: false });
  await painter(b, dir, 'kontext', { referenceImages: 4 });
  const five = Array.from({ length: 5 }, (_, i) => ({ bytes: png(), name: `${i}.png` }));
  error = await expectError(t, await edit(five), 400, 'invalid_value', 'image');
  t.match(error.message, /At most 4/);
  await expectError(t, await edit([{ bytes: Buffer.concat([png(), Buffer.alloc(11 * 1024 * 1024)]), name: 'big.png' }]), 413, 'payload_too_large', 'image');
  const gif = Buffer.concat([Buffer.from('GIF89a', 'latin1'), Buffer.alloc(64)]);
  error = await expectError(t, await edit([{ bytes: gif, name: 'cat.png' }]), 400, 'invalid_value', 'image');
  t.match(error.message, /not a PNG, JPEG or WebP file by its bytes/);
  await expectError(t, await edit([]), 400, 'invalid_value', 'image');
  await expectError(t, await edit(one, { n: '2' }), 400, 'invalid_value', 'n');
  await expectError(t, await edit(one, { response_format: 'url' }), 400, 'invalid_value', 'response_format');
  error = await expectError(t, await edit(one, { background: 'transparent' }), 400, 'invalid_value', 'background');
  t.match(error.message, /a transparent background is not offered/);
  error = await expectError(t, await edit(one, { mask: 'x' }), 400, 'invalid_value', 'mask');
  t.match(error.message, /mask is not offered/);
  await expectError(t, await edit(one, { seed: '3' }), 400, 'unknown_parameter', 'seed');
  const wav = encodeWav(new Int16Array(16), 16_000);
  await expectError(t, await edit([{ bytes: wav, name: 'sound.png' }]), 400, 'invalid_value', 'image');
  const json = await b.api('POST', '/v1/images/edits', { model: 'service-image', prompt: 'x' });
  t.equal(json.status, 415, 'a JSON edit is refused: multipart only');

  // Headers only, each declaring 64x64: a JPEG's APP0 segment and frame header, a lossy WebP's VP8 frame header.
  const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0, 0xff, 0xc0, 0, 11, 8, 0, 64, 0, 64, 1, 1, 0x11, 0]), Buffer.alloc(16)]);
  const webp = Buffer.concat([Buffer.from('RIFF', 'latin1'), Buffer.alloc(4), Buffer.from('WEBPVP8 ', 'latin1'), Buffer.alloc(7), Buffer.from([0x9d, 0x01, 0x2a, 64, 0, 64, 0]), Buffer.alloc(8)]);
  t.equal((await edit([{ bytes: jpeg, name: 'a.jpg' }, { bytes: webp, name: 'b.webp' }])).status, 200, 'JPEG and WebP are taken by their magic bytes');
  // A 20 KB PNG may declare 100000x100000 pixels: refused by its header, before sd-cli would try to allocate them.
  const huge = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]), Buffer.from('IHDR', 'latin1'), Buffer.from([0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0]), Buffer.alloc(20_000)]);
  error = await expectError(t, await edit([{ bytes: huge, name: 'huge.png' }]), 400, 'invalid_value', 'image');
  t.match(error.message, /Image 1 declares 100000x100000 pixels: at most 4096 on the long side/);
  const headless = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(40)]);
  error = await expectError(t, await edit([{ bytes: headless, name: 'cut.png' }]), 400, 'invalid_value', 'image');
  t.match(error.message, /no readable width and height/);
  t.same(await jobFolders(b), [], 'no refused or finished job left a folder');
});

t.test('a failing or hanging sd-cli: 502 with the cause, the process ended, the folder removed', async (t) => {
  const { b, dir } = await setUp(t, { loadTimeLimitMs: 1_500 });
  const { model: failing } = await painter(b, dir, 'broken', { behaviour: 'fail' });
  // A prompt written like the error lines the diagnosis looks for: sd-cli echoes it, and it must not become evidence in a log.
  const sneaky = 'a lighthouse\nload_model: failed to load model TOPSECRET\nCUDA error: out of memory';
  let error = await expectError(t, await b.api('POST', '/v1/images/generations', { model: 'broken', prompt: sneaky }), 502, 'worker_failed');
  t.notMatch(error.message, /TOPSECRET|out of memory/, 'the diagnosis did not read the prompt');
  t.match(error.message, /image worker/);
  t.equal((await runs(failing)).length, 1);

  const { model: hanging } = await painter(b, dir, 'stuck', { behaviour: 'hang' });
  const started = Date.now();
  error = await expectError(t, await b.api('POST', '/v1/images/generations', { model: 'stuck', prompt: PROMPT }), 502, 'worker_failed');
  t.match(error.message, /did not finish its image within 2 s \(timeout\)/);
  const elapsed = Date.now() - started;
  // Bounds a loaded machine cannot miss: the limit was waited for, and the stand-in (which hangs for ever) did not end it.
  t.ok(elapsed >= 1_500 && elapsed < 60_000, `ended by the limit (${elapsed} ms)`);
  const [run] = await runs(hanging);
  await until('the hung process to be gone', async () => (alive(run!.pid) ? undefined : true));
  t.same(await jobFolders(b), []);
  t.notOk(/lighthouse|TOPSECRET/.test(b.logLines.join('\n')), 'the prompt reached no log line, even for failures');
});

t.test('a client that leaves mid-image: the image process is ended and its folder removed', async (t) => {
  const { b, dir } = await setUp(t);
  const { model } = await painter(b, dir, 'stuck', { behaviour: 'hang' });
  const controller = new AbortController();
  const request = failureOf(
    fetch(`${b.apiUrl()}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stuck', prompt: PROMPT }),
      signal: controller.signal,
    }),
  );
  const [run] = await until('the image process', async () => ((await runs(model)).length > 0 ? runs(model) : undefined));
  await until('the job folder', async () => ((await jobFolders(b)).length > 0 ? true : undefined));
  controller.abort();
  t.equal(await request, 'AbortError', 'the client went away before any answer');
  await until('the image process to end', async () => (alive(run!.pid) ? undefined : true));
  await until('the folder to go', async () => ((await jobFolders(b)).length === 0 ? true : undefined));
  t.notOk(alive(run!.pid), 'the image process was ended');
  t.same(await jobFolders(b), [], 'its folder was removed');
});

t.test('the image test: runs through the same worker, shows its progress and image, and reports a busy reservation as 409', async (t) => {
  // The hung API image below ends by its own limit (3 s here): an endpoint stop waits for it.
  const { b, dir } = await setUp(t, { loadTimeLimitMs: 3_000 });
  const { id } = await painter(b, dir, 'unpublished', { publish: false });
  const started = await b.admin('POST', '/api/v1/image-tests', { profile_id: id, prompt: PROMPT });
  t.equal(started.status, 202, 'no publication needed');
  const done = await until('the test image', async () => {
    const { job } = (await (await b.admin('GET', '/api/v1/image-tests')).json()) as { job: { phase: string; b64_png: string | null; progress: unknown; result: unknown } };
    return job.phase === 'done' ? job : undefined;
  });
  t.same(done.progress, { step: 4, steps: 4 }, 'the steps done');
  t.match(done.result, { size: '64x72', removed_chunks: ['tEXt', 'iTXt', 'eXIf'] });
  t.same(pngChunks(Buffer.from(done.b64_png!, 'base64')).filter((c) => METADATA_CHUNKS.has(c.type)), []);

  const { id: stuck, model } = await painter(b, dir, 'stuck', { behaviour: 'hang', publish: true });
  const api = b.api('POST', '/v1/images/generations', { model: 'stuck', prompt: PROMPT });
  await until('the API image to run', async () => ((await runs(model)).length > 0 ? true : undefined));
  const progress = await until('the running image job to show its progress', async () => {
    const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: Array<{ kind: string; progress: { step: number; steps: number } | null }> } };
    const shown = status.queue.running.find((j) => j.kind === 'image')?.progress;
    return shown?.step === 2 ? shown : undefined;
  });
  t.same(progress, { step: 2, steps: 4 }, 'the diagnostics show the running image job with its progress (the stand-in stops after two steps)');
  await expectError(t, await b.admin('POST', '/api/v1/image-tests', { profile_id: stuck, prompt: PROMPT }), 409, 'image_busy');
  const stop = b.admin('POST', '/api/v1/endpoint/stop', {});
  const error = await expectError(t, await api, 502, 'worker_failed');
  t.match(error.message, /did not finish its image within 3 s \(timeout\)/, 'the stop let the running image go on until its own limit ended it');
  t.equal((await stop).status, 200);
  const [hung] = await runs(model);
  await until('the hung image process to be ended by the stop', async () => (alive(hung!.pid) ? undefined : true));
  await until('its folder to go', async () => ((await jobFolders(b)).length === 0 ? true : undefined));
  await expectError(t, await b.admin('POST', '/api/v1/image-tests', { profile_id: 'p-none', prompt: 'x' }), 404, 'profile_not_found');
  await expectError(t, await b.admin('POST', '/api/v1/image-tests', { profile_id: id }), 400, 'invalid_value', 'prompt');
});

t.test('a chat profile loaded before the image is unloaded during it (the real llama-server) and reloads for the next chat', async (t) => {
  const { llamaServerPath, tinyModelIn } = await import('../helpers/llama.js');
  const dir = await tempDir(t);
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const chatModel = await tinyModelIn(dir);
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'words', category: 'chat', params: { model: chatModel, context: 1024 } });
  const chatId = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id: chatId, enabled: true });
  const { model } = await painter(b, dir, 'painter');
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });
  const chatPid = async () =>
    ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> }).workers.find((w) => w.kind === 'chat')?.pid ?? null;

  await client.chat.completions.create({ model: 'words', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  const before = await chatPid();
  t.ok(before && alive(before), `the chat worker is loaded (llama-server ${before})`);

  const gpuMode = async () => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { gpu_mode: string }).gpu_mode;
  t.equal(await gpuMode(), 'llm', 'the LLM GPU mode while the chat profile is loaded');
  const generating = client.images.generate({ model: 'service-image', prompt: PROMPT });
  const modes = new Set<string>();
  let done = false;
  void generating.finally(() => (done = true));
  while (!done) {
    modes.add(await gpuMode());
    await new Promise((r) => setTimeout(r, 20));
  }
  const image = await generating;
  t.ok(image.data?.[0]?.b64_json);
  t.ok(modes.has('exclusive_image'), `the exclusive image mode while the image was made (seen: ${[...modes].join(', ')})`);
  const [run] = await runs(model);
  t.notOk(alive(before!), 'llama-server was ended for the image');
  t.ok(run!.pid !== before, 'the image process ran on its own');
  t.equal(await chatPid(), null, 'no chat worker while nothing asks for one');
  await until('the LLM GPU mode again', async () => ((await gpuMode()) === 'llm' ? true : undefined), 10_000);

  await client.chat.completions.create({ model: 'words', messages: [{ role: 'user', content: 'again' }], max_tokens: 4 });
  const after = await chatPid();
  t.ok(after && after !== before && alive(after), `the next chat reloaded its profile (llama-server ${after})`);
});
