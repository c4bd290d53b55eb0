// CONTRACT section 10, `POST /api/v1/model-files/profile`: a file the model folders' listing has
// becomes a profile, created as `POST /api/v1/profiles` creates one (unpublished, the same answer,
// the same refusals): a GGUF a chat profile at the largest context the forecast holds with every
// layer on the GPUs (or the operator's), a whisper.cpp model an stt profile on whisper.cpp. A path
// the listing does not have is refused however it points into the folders: outside them, through
// `..`, through a symlinked folder, a text file, the second part of a split model. A hostile header
// or a whisper file that is none is a 422; nothing is created on any refusal.
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { encodeGguf, type GgufValue } from '../../src/adapters/gguf.js';
import { tinyModel, writeTinyModel } from '../../src/adapters/tinyModel.js';
import type { ModelFilesView } from '../../src/system/models/modelFiles.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { hostileGguf } from '../helpers/hostileGguf.js';
import { writeTinyWhisper } from '../helpers/tinyWhisper.js';

/** A simulated GPU of `mib` MiB. */
const gpus = (mib: number) => JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: mib }]);

interface ErrorBody {
  error: { message: string; type: string; code: string | null; param: string | null };
}

interface Profile {
  id: string;
  revision: number;
  name: string;
  category: string;
  published: boolean;
  params: Record<string, unknown>;
}

/** A tiny model large enough (8 blocks of 256 wide, about 33 MB) that its context moves its forecast on a small GPU. */
const wider = (file: string, contextLength?: number) => writeTinyModel(file, { embedding: 256, layers: 8, heads: 4, ...(contextLength ? { contextLength } : {}) });

/** A runtime that is present (never run here), so that a published profile is executable and listed. */
async function presentRuntime(dir: string): Promise<string> {
  const file = path.join(dir, 'runtime.sh');
  await writeFile(file, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  return file;
}

const fromFile = (b: Built, body: unknown) => b.admin('POST', '/api/v1/model-files/profile', body);
const profileNames = async (b: Built) => ((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: Profile[] }).profiles.map((p) => p.name).sort();

t.test('a GGUF becomes an unpublished chat profile at the largest context that keeps every layer on the GPU', async (t) => {
  const dir = await tempDir(t);
  const model = await wider(path.join(dir, 'org', 'wide.gguf'));
  const short = await wider(path.join(dir, 'short.gguf'), 4096);
  // 1630 MiB, less the default reserve of 1024: at 32768 tokens 7 or 8 of the 9 layers fit, at 16384 all of them.
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: gpus(1630), SERVICE_DECK_LLAMA_SERVER: await presentRuntime(dir) } });
  const listed = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  t.match(listed.files.find((f) => f.path === model), { facts: { context_length: 32768 }, forecast: { fits: true } }, 'the listing has it');

  const res = await fromFile(b, { path: model, name: 'wide' });
  t.equal(res.status, 201);
  const profile = (await res.json()) as Profile;
  t.match(profile, { name: 'wide', category: 'chat', revision: 1, published: false, params: { model, context: 16384, slots: 1, gpuLayers: null } });
  t.same((await (await b.admin('GET', `/api/v1/profiles/${profile.id}`)).json()) as Profile, profile, 'the answer is the profile as stored, as POST /api/v1/profiles answers');

  t.match((await (await fromFile(b, { path: short, name: 'short' })).json()) as Profile, { params: { context: 4096 } }, "a model's own smaller context is its most");
  t.match((await (await fromFile(b, { path: model, name: 'chosen', context: 2048 })).json()) as Profile, { params: { context: 2048 } }, "the operator's context");
  const over = await fromFile(b, { path: short, name: 'over', context: 8192 });
  t.equal(over.status, 400);
  t.match(((await over.json()) as ErrorBody).error, { code: 'invalid_value', param: 'context', message: "8192 tokens is more than the model's own context of 4096 tokens" });

  // Unpublished: not served until it is published.
  await b.startEndpoint();
  const served = async () => ((await (await b.api('GET', '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  t.same(await served(), [], 'not in GET /v1/models while unpublished');
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled: true })).status, 200);
  t.same(await served(), ['wide'], 'listed once published');
});

t.test('on a large GPU and on a machine without one: the own context', async (t) => {
  const dir = await tempDir(t);
  const model = await wider(path.join(dir, 'wide.gguf'));
  for (const [what, env] of [['a 24 GiB GPU', gpus(24_576)], ['no GPU', 'none']] as const) {
    const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: env } });
    t.match((await (await fromFile(b, { path: model, name: 'wide' })).json()) as Profile, { params: { context: 32768 } }, what);
  }
});

t.test('when the GPUs cannot be probed: the operator gives the context, else 503', async (t) => {
  const dir = await tempDir(t);
  const model = await writeTinyModel(path.join(dir, 'tiny.gguf'));
  const inventory = path.join(dir, 'gpus.json');
  await writeFile(inventory, gpus(24_576));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: inventory } });
  // The simulated inventory is read again at each probe: a damaged one makes the probe fail.
  await writeFile(inventory, '[{');
  const res = await fromFile(b, { path: model, name: 'tiny' });
  t.equal(res.status, 503);
  t.match(((await res.json()) as ErrorBody).error, { type: 'server_error', code: 'gpu_probe_failed', message: new RegExp(`^No context can be chosen for ${model}: .+\\. Give the context yourself \\("context"\\)\\.$`) });
  t.match((await (await fromFile(b, { path: model, name: 'tiny', context: 4096 })).json()) as Profile, { params: { context: 4096 } }, "the operator's context needs no probe");
});

t.test('a whisper.cpp model becomes an stt profile on whisper.cpp', async (t) => {
  const dir = await tempDir(t);
  const whisper = await writeTinyWhisper(path.join(dir, 'ggml-tiny.bin'));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_WHISPER_SERVER: await presentRuntime(dir) } });
  const res = await fromFile(b, { path: whisper, name: 'ears' });
  t.equal(res.status, 201);
  const profile = (await res.json()) as Profile;
  t.match(profile, { name: 'ears', category: 'stt', published: false, params: { backend: 'whisper.cpp', model: whisper, defaultLanguage: 'de' } });
  await b.startEndpoint();
  const served = async () => ((await (await b.api('GET', '/v1/audio/transcriptions/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  t.same(await served(), [], 'not served while unpublished');
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled: true })).status, 200);
  t.same(await served(), ['ears'], 'served once published');
  const context = await fromFile(b, { path: whisper, name: 'ears-2', context: 4096 });
  t.equal(context.status, 400, 'a transcription profile has no context');
  t.match(((await context.json()) as ErrorBody).error, { code: 'invalid_value', param: 'context' });
});

t.test('only a file the listing has: outside, .., a symlinked folder, a text file, a second part, safetensors; a hostile header', async (t) => {
  const dir = await tempDir(t);
  const outside = await tempDir(t);
  const model = await writeTinyModel(path.join(dir, 'sub', 'tiny.gguf'));
  const away = await writeTinyModel(path.join(outside, 'away.gguf'));
  await symlink(outside, path.join(dir, 'linked'));
  await writeFile(path.join(dir, 'notes.txt'), 'not a model');
  await writeFile(path.join(dir, 'weights.safetensors'), 'not read');
  await writeFile(path.join(dir, 'hostile.gguf'), hostileGguf());
  await writeFile(path.join(dir, 'ggml-fake.bin'), 'not a whisper model');
  const parts = ['tiny-00001-of-00002.gguf', 'tiny-00002-of-00002.gguf'].map((name) => path.join(dir, name));
  const u16 = (value: number): GgufValue => ({ type: 'uint16', value });
  const base = tinyModel();
  for (const [no, file] of parts.entries()) {
    const metadata = no === 0 ? base.metadata : [['general.architecture', { type: 'string', value: 'llama' }] as const];
    await writeFile(file, encodeGguf({ metadata: [...metadata, ['split.no', u16(no)], ['split.count', u16(2)], ['split.tensors.count', { type: 'int32', value: base.tensors.length }]], tensors: no === 0 ? base.tensors.slice(0, 3) : base.tensors.slice(3) }));
  }
  await mkdir(path.join(dir, 'empty'));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: 'none' } });

  const notListed = [
    [away, 'a GGUF outside the folders'],
    [`${dir}/sub/../sub/tiny.gguf`, 'a listed file reached through ..'],
    [`${dir}/../${path.basename(dir)}/sub/tiny.gguf`, 'the folder left and entered again'],
    [`${dir}/sub/./tiny.gguf`, 'a listed file reached through .'],
    [`${dir}//sub/tiny.gguf`, 'a listed file reached through an empty segment'],
    [`${dir}/linked/../sub/tiny.gguf`, 'a listed file reached through the symlinked folder and ..'],
    [path.join(dir, 'linked', 'away.gguf'), 'a GGUF through a symlinked folder that points out'],
    [path.join(dir, 'notes.txt'), 'a text file'],
    [path.join(dir, 'empty'), 'a folder'],
    [parts[1]!, 'the second part of a split model'],
    ['/etc/passwd', 'a system file'],
    ['sub/tiny.gguf', 'a relative path'],
  ] as const;
  for (const [file, what] of notListed) {
    const res = await fromFile(b, { path: file, name: 'x' });
    t.equal(res.status, 400, what);
    t.same(((await res.json()) as ErrorBody).error, {
      message: `${file} is not a model file in the model folders (${dir}, ${path.join(b.stateDir, 'models')}): give a path as GET /api/v1/model-files lists it`,
      type: 'invalid_request_error',
      code: 'invalid_value',
      param: 'path',
    }, `${what}: not a model file in the model folders`);
  }

  const safetensors = await fromFile(b, { path: path.join(dir, 'weights.safetensors'), name: 'x' });
  t.equal(safetensors.status, 400);
  t.match(((await safetensors.json()) as ErrorBody).error, { code: 'invalid_value', param: 'path', message: /only GGUF and whisper files \(ggml-\*\.bin\) make profiles$/ });

  const hostile = await fromFile(b, { path: path.join(dir, 'hostile.gguf'), name: 'x' });
  t.equal(hostile.status, 422);
  t.match(((await hostile.json()) as ErrorBody).error, { code: 'model_unreadable', param: 'path', message: new RegExp(`^${path.join(dir, 'hostile.gguf')} cannot be read as a chat model: absurd tensor count ${2n ** 60n} at offset 8`) });

  const fake = await fromFile(b, { path: path.join(dir, 'ggml-fake.bin'), name: 'x' });
  t.equal(fake.status, 422);
  t.match(((await fake.json()) as ErrorBody).error, { code: 'model_unreadable', param: 'path', message: `${path.join(dir, 'ggml-fake.bin')} cannot be read as a whisper model: not a whisper.cpp model (no ggml magic)` });

  t.same(await profileNames(b), [], 'no profile was created by a refusal');
  t.equal((await fromFile(b, { path: parts[0]!, name: 'split' })).status, 201, 'the first part of a split model names the model');
  t.equal((await fromFile(b, { path: model, name: 'tiny' })).status, 201, 'the listed path itself');
});

t.test('the name as POST /api/v1/profiles checks it; the body; the admin session', async (t) => {
  const dir = await tempDir(t);
  const model = await writeTinyModel(path.join(dir, 'tiny.gguf'));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_GPUS: 'none' } });
  t.equal((await fromFile(b, { path: model, name: 'taken' })).status, 201);
  const again = await fromFile(b, { path: model, name: 'taken' });
  const direct = await b.admin('POST', '/api/v1/profiles', { name: 'taken', category: 'chat', params: { model } });
  t.equal(again.status, 409);
  t.equal(direct.status, 409);
  const againError = ((await again.json()) as ErrorBody).error;
  t.same(againError, ((await direct.json()) as ErrorBody).error, 'the same refusal as POST /api/v1/profiles');
  t.equal(againError.code, 'name_taken');

  const badName = await fromFile(b, { path: model, name: 'service-image' });
  t.equal(badName.status, 400);
  t.match(((await badName.json()) as ErrorBody).error, { code: 'invalid_value', param: 'name' });
  const unknown = await fromFile(b, { path: model, name: 'y', slots: 2 });
  t.match(((await unknown.json()) as ErrorBody).error, { code: 'unknown_parameter', param: 'slots' });
  const small = await fromFile(b, { path: model, name: 'y', context: 100 });
  t.match(((await small.json()) as ErrorBody).error, { code: 'invalid_value', param: 'context' });
  t.same(await profileNames(b), ['taken']);

  const anonymous = await fetch(`${b.adminUrl}/api/v1/model-files/profile`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', 'content-type': 'application/json' },
    body: JSON.stringify({ path: model, name: 'anon' }),
  });
  t.equal(anonymous.status, 401, 'no session: 401');
  const wrongCsrf = await b.admin('POST', '/api/v1/model-files/profile', { path: model, name: 'csrf' }, { 'x-csrf-token': 'wrong' });
  t.equal(wrongCsrf.status, 403, 'a wrong CSRF token: 403');
  t.same(await profileNames(b), ['taken'], 'neither created one');
});
