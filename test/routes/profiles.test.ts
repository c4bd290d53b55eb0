// Profiles and their publication (spec 2.1 rules 1-6, 2.2 and 4.1; CONTRACT sections 2 and 4):
// CRUD with revisions through the admin API, computed blockers, and what the model lists show.
// Runtimes are small shell scripts named by the SERVICE_DECK_* variables; each leaves a marker file
// when run, so that a test can prove that listing models started nothing.
import { access, chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/system/observe/log.js';
import { startService } from '../../src/compose.js';
import { MAX_PROFILES } from '../../src/store/profiles.js';
import { build, PASSWORD, tempDir, type Built } from '../helpers/build.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

interface View {
  id: string;
  revision: number;
  name: string;
  category: string;
  published: boolean;
  executable: boolean;
  blockers: string[];
  params: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

interface ModelList {
  object: string;
  data: Array<{ id: string; object: string; created: number; owned_by: string }>;
}

async function expectError(t: Test, response: Response, status: number, type: string, code: string, param: string | null, what: string) {
  t.equal(response.status, status, `${what}: status ${status}`);
  const { error } = (await response.json()) as ErrorBody;
  t.type(error?.message, 'string', `${what}: an OpenAI error body`);
  t.same({ type: error?.type, code: error?.code, param: error?.param }, { type, code, param }, `${what}: ${code} ${param ?? ''}`.trim());
}

const RUNTIMES = {
  'llama-server': 'SERVICE_DECK_LLAMA_SERVER',
  'sd-cli': 'SERVICE_DECK_SD_CLI',
  'espeak-ng': 'SERVICE_DECK_ESPEAK_NG',
  pocketsphinx: 'SERVICE_DECK_POCKETSPHINX',
} as const;

interface Fixture {
  dir: string;
  gguf: string;
  notGguf: string;
  imageModel: string;
  missing: string;
  /** The script behind a runtime; it touches `<script>.ran` if anything ever runs it. */
  runtime: (name: keyof typeof RUNTIMES) => string;
  /** Every runtime present, PATH empty. */
  env: NodeJS.ProcessEnv;
  /** No runtime anywhere: PATH is an empty folder and no SERVICE_DECK_* variable is set. */
  bare: NodeJS.ProcessEnv;
}

async function fixture(t: Test): Promise<Fixture> {
  const dir = await tempDir(t, 'sd-fixture-');
  await mkdir(path.join(dir, 'bin'));
  await mkdir(path.join(dir, 'empty-path'));
  const runtime = (name: keyof typeof RUNTIMES) => path.join(dir, 'bin', name);
  const env: NodeJS.ProcessEnv = { PATH: path.join(dir, 'empty-path') };
  for (const [name, variable] of Object.entries(RUNTIMES) as Array<[keyof typeof RUNTIMES, string]>) {
    await writeFile(runtime(name), '#!/bin/sh\ntouch "$0.ran"\nexit 0\n', { mode: 0o755 });
    env[variable] = runtime(name);
  }
  const f = {
    dir,
    gguf: path.join(dir, 'tiny.gguf'),
    notGguf: path.join(dir, 'tiny.safetensors'),
    imageModel: path.join(dir, 'image.safetensors'),
    missing: path.join(dir, 'absent.gguf'),
    runtime,
    env,
    bare: { PATH: path.join(dir, 'empty-path') },
  };
  await writeFile(f.gguf, Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.alloc(60)]));
  await writeFile(f.notGguf, Buffer.concat([Buffer.from('{"__metadata__":{}}'), Buffer.alloc(60)]));
  await writeFile(f.imageModel, Buffer.alloc(64, 1));
  return f;
}

const chat = (name: string, model: string, params: Record<string, unknown> = {}) => ({ name, category: 'chat', params: { model, ...params } });
const image = (name: string, model: string) => ({ name, category: 'image', params: { model } });

async function create(t: Test, b: Built, body: unknown): Promise<View> {
  const response = await b.admin('POST', '/api/v1/profiles', body);
  t.equal(response.status, 201, `created ${(body as { name: string }).name}`);
  return (await response.json()) as View;
}

async function get(b: Built, id: string): Promise<View> {
  return (await (await b.admin('GET', `/api/v1/profiles/${id}`)).json()) as View;
}

async function publish(t: Test, b: Built, id: string, enabled = true): Promise<string[]> {
  const response = await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled });
  t.equal(response.status, 200, `${enabled ? 'published' : 'unpublished'} ${id}`);
  return ((await response.json()) as { published: string[] }).published;
}

async function listed(b: Built, url = '/v1/models'): Promise<string[]> {
  const response = await b.api('GET', url);
  if (response.status !== 200) throw new Error(`${url}: ${response.status}`);
  const list = (await response.json()) as ModelList;
  return list.data.map((m) => m.id);
}

async function endpointFile(b: Built): Promise<{ published: string[] }> {
  return JSON.parse(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8')) as { published: string[] };
}

/** The PUT body a client sends after reading a profile: everything it read, with its changes. */
const edited = (view: View, change: Partial<View>) => ({ ...view, ...change });

t.test('create: one profile per category, revision 1, unpublished, defaults filled, stored privately', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.bare });
  const cases: Array<[string, object, Record<string, unknown>]> = [
    ['chat', chat('chat-a', f.gguf), { model: f.gguf, context: 8192, slots: 1, gpuSplit: null, gpuLayers: null, sampling: {} }],
    [
      'image',
      image('image-a', f.imageModel),
      { backend: 'sd-cli', model: f.imageModel, files: {}, width: 1024, height: 1024, steps: 20, guidance: 3.5, cfgScale: 1, seed: 42, referenceImages: 0 },
    ],
    ['tts on the cpu', { name: 'tts-a', category: 'tts', params: {} }, { backend: 'espeak-ng', speed: 1, device: 'cpu', memoryMiB: 0 }],
    ['tts on a gpu', { name: 'tts-b', category: 'tts', params: { device: 'GPU-0a1b-2c3d' } }, { backend: 'espeak-ng', speed: 1, device: 'GPU-0a1b-2c3d', memoryMiB: 7168 }],
    ['stt', { name: 'stt-a', category: 'stt', params: {} }, { backend: 'pocketsphinx', threads: 2, defaultLanguage: 'de' }],
  ];
  const ids: string[] = [];
  for (const [what, body, params] of cases) {
    const view = await create(t, b, body);
    ids.push(view.id);
    t.match(view, { id: String, revision: 1, published: false, executable: Boolean, blockers: Array, category: (body as { category: string }).category }, `${what}: the view`);
    t.strictSame(view.params, params, `${what}: defaults filled`);
    const file = path.join(b.stateDir, 'profiles', `${view.id}.json`);
    t.equal((await stat(file)).mode & 0o777, 0o600, `${what}: profiles/<id>.json has mode 0600`);
    const stored = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
    t.match(stored, { id: view.id, revision: 1, name: view.name, category: view.category }, `${what}: the stored record`);
    t.strictSame(stored.params, params, `${what}: the stored params`);
    t.notOk('published' in stored || 'executable' in stored || 'blockers' in stored, `${what}: computed fields are not stored`);
    t.strictSame(await get(b, view.id), view, `${what}: GET shows what POST answered`);
  }
  t.equal(new Set(ids).size, ids.length, 'every profile has its own id');
  const all = (await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: View[] };
  t.same(all.profiles.map((p) => p.id).sort(), [...ids].sort(), 'GET /api/v1/profiles lists them all');
  t.same(b.service.profiles.published, [], 'creating publishes nothing');
});

t.test('bad values are 400 invalid_value naming the field; nothing is saved', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.bare });
  const cases: Array<[string, object, string]> = [
    ['negative context', chat('c', f.gguf, { context: -1 }), 'params.context'],
    ['zero slots', chat('c', f.gguf, { slots: 0 }), 'params.slots'],
    ['chat without a model', { name: 'c', category: 'chat', params: {} }, 'params.model'],
    ['an unknown category', { name: 'v', category: 'video', params: {} }, 'category'],
    ['the reserved image alias as a name', image('service-image', f.imageModel), 'name'],
    ['an empty name', chat('', f.gguf), 'name'],
    ['a name with a space', chat('my model', f.gguf), 'name'],
    ['whisper.cpp without a model', { name: 's', category: 'stt', params: { backend: 'whisper.cpp' } }, 'params.model'],
    ['a tts speed over 4', { name: 't', category: 'tts', params: { speed: 5 } }, 'params.speed'],
    ['zero image steps', { name: 'i', category: 'image', params: { model: f.imageModel, steps: 0 } }, 'params.steps'],
    ['a non-integer image width', { name: 'i', category: 'image', params: { model: f.imageModel, width: 512.5 } }, 'params.width'],
    // Profiles that could never run: every request of them would fail.
    ...['constructor', '__proto__', 'toString', 'Alloy', 'm3'].map((voice): [string, object, string] => [`an espeak-ng voice ${voice}`, { name: 't', category: 'tts', params: { voice } }, 'params.voice']),
    ...['gpu0', 'GPU', 'cuda:0', 'AUTO', '', 'GPU-1 ; rm'].map((device): [string, object, string] => [
      `an enhancer device ${JSON.stringify(device)}`,
      { ...image('i', f.imageModel), prompt_enhancer: { t2i: null, i2i: null, device } },
      'prompt_enhancer.device',
    ]),
  ];
  for (const [what, body, param] of cases) {
    await expectError(t, await b.admin('POST', '/api/v1/profiles', body), 400, 'invalid_request_error', 'invalid_value', param, what);
  }
  t.same(b.service.profiles.list(), [], 'nothing was saved');
});

t.test('a profile that could never run is refused at save with what is allowed; files saved before still load', async (t) => {
  const f = await fixture(t);
  const stateDir = await tempDir(t, 'sd-state-');
  await mkdir(path.join(stateDir, 'profiles'), { mode: 0o700 });
  const created = '2024-01-01T00:00:00.000Z';
  const old = { id: 'p-old', revision: 1, created_at: created, updated_at: created, name: 'old-voice', category: 'tts', params: { backend: 'espeak-ng', voice: 'constructor', speed: 1, device: 'cpu', memoryMiB: 0 } };
  await writeFile(path.join(stateDir, 'profiles', 'p-old.json'), JSON.stringify(old), { mode: 0o600 });
  const b = await build(t, { env: f.env, stateDir });
  t.match(await get(b, 'p-old'), { params: { voice: 'constructor' } }, 'a file saved before the check loads: the start does not fail on it');

  let response = await b.admin('POST', '/api/v1/profiles', { name: 't', category: 'tts', params: { voice: 'constructor' } });
  t.equal(response.status, 400);
  let { error } = (await response.json()) as ErrorBody;
  t.match(error, { type: 'invalid_request_error', code: 'invalid_value', param: 'params.voice' });
  t.match(error.message, /"constructor" is not a voice of the espeak-ng backend; it has alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse/, 'the message lists the voices');

  response = await b.admin('PUT', '/api/v1/profiles/p-old', { ...old, name: 'old-voice' });
  t.equal(response.status, 400, 'a PUT that keeps the old voice is refused too');
  t.match(((await response.json()) as ErrorBody).error, { code: 'invalid_value', param: 'params.voice' });
  const fixed = await b.admin('PUT', '/api/v1/profiles/p-old', { ...old, params: { ...old.params, voice: 'nova' } });
  t.equal(fixed.status, 200, 'and one that fixes it is saved');

  const server = { backend: 'openai-server', command: ['/bin/speech-server', '--port', '{port}'], voice: 'af_heart' };
  t.equal((await b.admin('POST', '/api/v1/profiles', { name: 'own-voices', category: 'tts', params: server })).status, 201, 'an openai-server backend has voices of its own: any name is kept');

  for (const device of ['auto', 'cpu', 'GPU-1a2b3c4d-5e6f-7a8b-9c0d-112233445566']) {
    const saved = await b.admin('POST', '/api/v1/profiles', { ...image(`img-${device.slice(0, 8)}`, f.imageModel), prompt_enhancer: { t2i: null, i2i: null, device } });
    t.equal(saved.status, 201, `the enhancer device ${device} is a choice`);
  }
  response = await b.admin('POST', '/api/v1/profiles', { ...image('img-bad', f.imageModel), prompt_enhancer: { t2i: null, i2i: null, device: 'gpu0' } });
  ({ error } = (await response.json()) as ErrorBody);
  t.match(error, { code: 'invalid_value', param: 'prompt_enhancer.device', message: /one of "auto", "cpu", or a GPU UUID/ }, 'the message names the choices');
});

t.test('update and delete: revisions, stale revisions, category, names, unknown ids', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.bare });
  const a = await create(t, b, chat('chat-a', f.gguf));
  const other = await create(t, b, chat('chat-b', f.gguf));

  let response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, { revision: 1, ...chat('chat-a', f.gguf, { context: 4096 }) });
  t.equal(response.status, 200, 'PUT with the current revision');
  const second = (await response.json()) as View;
  t.match(second, { id: a.id, revision: 2, params: { context: 4096 }, created_at: a.created_at });
  const file = path.join(b.stateDir, 'profiles', `${a.id}.json`);
  t.match(JSON.parse(await readFile(file, 'utf8')), { revision: 2, params: { context: 4096 } }, 'the file has the new revision');
  t.equal((await stat(file)).mode & 0o777, 0o600, 'the rewritten file keeps mode 0600');

  response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, { revision: 1, ...chat('chat-a', f.gguf, { context: 2048 }) });
  await expectError(t, response, 409, 'conflict', 'stale_revision', null, 'PUT with the revision read before');
  t.match(await get(b, a.id), { revision: 2, params: { context: 4096 } }, 'the stale PUT changed nothing');

  response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, { revision: 2, ...image('chat-a', f.imageModel) });
  await expectError(t, response, 400, 'invalid_request_error', 'invalid_value', 'category', 'PUT changing the category');
  t.match(await get(b, a.id), { revision: 2, category: 'chat' }, 'the category stays');

  response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, { revision: 2, ...chat('chat-b', f.gguf) });
  await expectError(t, response, 409, 'conflict', 'name_taken', null, "PUT taking another profile's name");
  response = await b.admin('POST', '/api/v1/profiles', chat('chat-b', f.notGguf));
  await expectError(t, response, 409, 'conflict', 'name_taken', null, 'POST with a name in use');

  response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, edited(second, { name: 'chat-a2' }));
  t.equal(response.status, 200, 'PUT of the read view with a change (read-only fields sent back)');
  t.match(await response.json(), { revision: 3, name: 'chat-a2' });
  response = await b.admin('PUT', `/api/v1/profiles/${a.id}`, { revision: 3, ...chat('chat-a2', f.gguf), id: other.id });
  await expectError(t, response, 400, 'invalid_request_error', 'invalid_value', 'id', 'PUT whose body names another id');

  await expectError(t, await b.admin('GET', '/api/v1/profiles/p-nope'), 404, 'invalid_request_error', 'profile_not_found', null, 'GET unknown id');
  await expectError(t, await b.admin('PUT', '/api/v1/profiles/p-nope', { revision: 1, ...chat('x', f.gguf) }), 404, 'invalid_request_error', 'profile_not_found', null, 'PUT unknown id');
  await expectError(t, await b.admin('DELETE', '/api/v1/profiles/p-nope'), 404, 'invalid_request_error', 'profile_not_found', null, 'DELETE unknown id');

  response = await b.admin('DELETE', `/api/v1/profiles/${a.id}`);
  t.equal(response.status, 204, 'DELETE');
  t.equal(await response.text(), '', 'DELETE has no body');
  await expectError(t, await b.admin('GET', `/api/v1/profiles/${a.id}`), 404, 'invalid_request_error', 'profile_not_found', null, 'GET after DELETE');
  await t.rejects(access(file), { code: 'ENOENT' }, 'the file is gone');
  await expectError(t, await b.admin('DELETE', `/api/v1/profiles/${a.id}`), 404, 'invalid_request_error', 'profile_not_found', null, 'DELETE twice');
  t.equal((await b.admin('POST', '/api/v1/profiles', chat('chat-a2', f.gguf))).status, 201, 'a deleted profile frees its name');
});

t.test('blockers: missing model, not GGUF, missing runtime; none once everything is there', async (t) => {
  const f = await fixture(t);
  const bare = await build(t, { env: f.bare });
  const runtimeMissing = await create(t, bare, chat('no-runtime', f.gguf));
  t.match(runtimeMissing, { executable: false, blockers: ['runtime missing: llama-server'] }, 'no llama-server on PATH nor named');
  const both = await create(t, bare, chat('no-runtime-no-model', f.missing));
  t.same(both.blockers.slice().sort(), [`model file missing: ${f.missing}`, 'runtime missing: llama-server'], 'both blockers at once');

  const b = await build(t, { env: f.env });
  const missing = await create(t, b, chat('missing', f.missing));
  t.match(missing, { executable: false }, 'a missing model blocks');
  t.same(missing.blockers, [`model file missing: ${f.missing}`]);
  const wrong = await create(t, b, chat('not-gguf', f.notGguf));
  t.equal(wrong.executable, false, 'a file without GGUF magic blocks');
  t.equal(wrong.blockers.length, 1);
  t.match(wrong.blockers[0], /not a GGUF file/);
  t.match(wrong.blockers[0], f.notGguf, 'the blocker names the file');
  const ready = await create(t, b, chat('ready', f.gguf));
  t.match(ready, { executable: true, blockers: [] }, 'GGUF model and runtime: executable');

  // Blockers are computed when read, not saved.
  await chmod(f.runtime('llama-server'), 0o644);
  t.match(await get(b, ready.id), { executable: false, blockers: ['runtime missing: llama-server'] }, 'a runtime that is not executable counts as missing');
  await chmod(f.runtime('llama-server'), 0o755);
  await writeFile(f.missing, Buffer.from('GGUF and more'));
  t.match(await get(b, missing.id), { executable: true, blockers: [], revision: 1 }, 'the model file appeared: executable, same revision');
});

t.test('several chat profiles are published at once and listed in publication order', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  await b.startEndpoint();
  const [a, bb, c, broken, idle] = [
    await create(t, b, chat('chat-a', f.gguf)),
    await create(t, b, chat('chat-b', f.gguf)),
    await create(t, b, chat('chat-c', f.gguf)),
    await create(t, b, chat('chat-broken', f.missing)),
    await create(t, b, chat('chat-idle', f.gguf)),
  ];
  t.same(await listed(b), [], 'nothing is listed before publication');
  await publish(t, b, c.id);
  await publish(t, b, broken.id);
  await publish(t, b, a.id);
  const published = await publish(t, b, bb.id);
  t.same(published, [c.id, broken.id, a.id, bb.id], 'the reply lists the publication order');
  t.same((await endpointFile(b)).published, [c.id, broken.id, a.id, bb.id], 'endpoint.json holds the published ids in order');
  t.same(await listed(b), ['chat-c', 'chat-a', 'chat-b'], 'listed in publication order; the unpublished and the non-executable one are not');
  t.match(await get(b, broken.id), { published: true, executable: false }, 'the non-executable profile is published but not listed');
  t.match(await get(b, idle.id), { published: false, executable: true }, 'the executable profile is not listed until published');

  const list = (await (await b.api('GET', '/v1/models')).json()) as ModelList;
  t.equal(list.object, 'list');
  for (const entry of list.data) t.match(entry, { id: String, object: 'model', created: Number, owned_by: String }, `${entry.id}: an OpenAI model entry`);

  t.same(await publish(t, b, a.id), [c.id, broken.id, a.id, bb.id], 'publishing again keeps the order');
  await publish(t, b, c.id, false);
  t.same(await listed(b), ['chat-a', 'chat-b'], 'unpublished: gone from the list');
  t.match(await get(b, c.id), { published: false });
});

t.test('rule 4: a deleted or incomplete published profile leaves the model list', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  await b.startEndpoint();
  const a = await create(t, b, chat('chat-a', f.gguf));
  const other = await create(t, b, chat('chat-b', f.gguf));
  await publish(t, b, a.id);
  await publish(t, b, other.id);
  t.same(await listed(b), ['chat-a', 'chat-b']);

  t.equal((await b.admin('DELETE', `/api/v1/profiles/${a.id}`)).status, 204);
  t.same(await listed(b), ['chat-b'], 'the deleted profile left /v1/models');
  t.same((await endpointFile(b)).published, [other.id], "the deleted profile left endpoint.json's published list");

  const response = await b.admin('PUT', `/api/v1/profiles/${other.id}`, { revision: 1, ...chat('chat-b', f.missing) });
  t.equal(response.status, 200);
  t.match(await response.json(), { published: true, executable: false, blockers: [`model file missing: ${f.missing}`] }, 'still published, now blocked');
  t.same(await listed(b), [], 'the incomplete profile left /v1/models');
  t.same((await endpointFile(b)).published, [other.id], 'its publication is kept');
  await expectError(t, await b.api('GET', '/v1/models/chat-b'), 404, 'invalid_request_error', 'model_not_found', 'model', 'GET /v1/models/chat-b while incomplete');

  t.equal((await b.admin('PUT', `/api/v1/profiles/${other.id}`, { revision: 2, ...chat('chat-b', f.gguf) })).status, 200);
  t.same(await listed(b), ['chat-b'], 'complete again: listed again without publishing again');
});

t.test('rule 2: publishing an image profile removes the other image publication in the same write', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  const c = await create(t, b, chat('chat-a', f.gguf));
  const imageA = await create(t, b, image('image-a', f.imageModel));
  const imageB = await create(t, b, image('image-b', f.imageModel));
  await publish(t, b, c.id);
  t.same(await publish(t, b, imageA.id), [c.id, imageA.id]);

  // Watch endpoint.json while image B is published: no version of it may hold both images or none.
  const seen: string[][] = [];
  let done = false;
  const watching = (async () => {
    while (!done) {
      seen.push((await endpointFile(b)).published);
      await new Promise((resolve) => setImmediate(resolve));
    }
  })();
  const published = await publish(t, b, imageB.id);
  done = true;
  await watching;
  seen.push((await endpointFile(b)).published);

  t.same(published, [c.id, imageB.id], 'the reply: image B replaced image A, the chat profile stays');
  t.same((await endpointFile(b)).published, [c.id, imageB.id], 'endpoint.json: image B only');
  const imagesIn = (ids: string[]) => ids.filter((id) => id === imageA.id || id === imageB.id);
  t.comment(`endpoint.json was read ${seen.length} times during the switch`);
  t.same(seen.filter((ids) => imagesIn(ids).length !== 1), [], 'every version of endpoint.json held exactly one image id');
  t.match(await get(b, imageA.id), { published: false });
  t.match(await get(b, imageB.id), { published: true });
  t.same(await publish(t, b, imageA.id), [c.id, imageA.id], 'and back: image A replaces image B');
});

t.test('/v1/images/models lists only service-image, and only while an executable image profile is published', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  await b.startEndpoint();
  const images = () => listed(b, '/v1/images/models');
  const ready = await create(t, b, image('image-ready', f.imageModel));
  const broken = await create(t, b, image('image-broken', f.missing));
  t.same(await images(), [], 'no image profile published');

  await publish(t, b, broken.id);
  t.same(await images(), [], 'the published image profile is not executable');
  await publish(t, b, ready.id);
  const list = (await (await b.api('GET', '/v1/images/models')).json()) as ModelList;
  t.equal(list.object, 'list');
  t.equal(list.data.length, 1, 'one entry');
  t.match(list.data[0], { id: 'service-image', object: 'model' }, 'only the alias, never the profile name');
  t.same(await listed(b), [], 'image profiles never appear in /v1/models');
  await expectError(t, await b.api('GET', '/v1/models/service-image'), 404, 'invalid_request_error', 'model_not_found', 'model', 'the alias is not a chat model');

  await chmod(f.runtime('sd-cli'), 0o644);
  t.same(await images(), [], 'sd-cli not executable: the alias disappears');
  await chmod(f.runtime('sd-cli'), 0o755);
  t.same(await images(), ['service-image'], 'sd-cli back: the alias returns');
  await rm(f.imageModel);
  t.same(await images(), [], 'model file gone: the alias disappears');
  await writeFile(f.imageModel, Buffer.alloc(64, 1));
  t.same(await images(), ['service-image']);
  await publish(t, b, ready.id, false);
  t.same(await images(), [], 'unpublished: the alias disappears');
});

t.test('TTS and STT lists show published, executable profiles by name', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  await b.startEndpoint();
  const speech = () => listed(b, '/v1/audio/speech/models');
  const transcription = () => listed(b, '/v1/audio/transcriptions/models');
  const tts = await create(t, b, { name: 'voice-a', category: 'tts', params: {} });
  const ttsIdle = await create(t, b, { name: 'voice-b', category: 'tts', params: {} });
  const stt = await create(t, b, { name: 'ears-a', category: 'stt', params: { defaultLanguage: 'en' } });
  const whisper = await create(t, b, { name: 'ears-whisper', category: 'stt', params: { backend: 'whisper.cpp', model: f.missing } });
  t.match(ttsIdle, { executable: true, published: false });
  t.same(await speech(), []);
  t.same(await transcription(), []);

  await publish(t, b, tts.id);
  await publish(t, b, stt.id);
  await publish(t, b, whisper.id);
  t.same(await speech(), ['voice-a'], 'the published TTS profile, by name');
  t.same(await transcription(), ['ears-a'], 'the published executable STT profile; whisper.cpp lacks runtime and model');
  t.match(await get(b, whisper.id), { published: true, executable: false });
  t.same(await listed(b), [], 'no audio profile in /v1/models');

  await chmod(f.runtime('espeak-ng'), 0o644);
  t.same(await speech(), [], 'espeak-ng not executable: the TTS profile disappears');
  await chmod(f.runtime('pocketsphinx'), 0o644);
  t.same(await transcription(), [], 'pocketsphinx not executable: the STT profile disappears');
});

t.test('rule 3: of several saved image publications only the first saved one stays', async (t) => {
  const f = await fixture(t);
  const stateDir = await tempDir(t, 'sd-state-');
  await mkdir(path.join(stateDir, 'profiles'), { mode: 0o700 });
  const stored = (id: string, created: string, body: object) => ({ id, revision: 1, created_at: created, updated_at: created, ...body });
  const records = [
    stored('img-a', '2024-01-01T00:00:00.000Z', image('image-a', f.imageModel)),
    stored('img-b', '2024-02-01T00:00:00.000Z', image('image-b', f.imageModel)),
    stored('chat-a', '2024-03-01T00:00:00.000Z', chat('chat-a', f.gguf)),
  ];
  for (const record of records) {
    await writeFile(path.join(stateDir, 'profiles', `${record.id}.json`), JSON.stringify(record), { mode: 0o600 });
  }
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: false, port: 8120, published: ['img-b', 'chat-a', 'img-a'] }), { mode: 0o600 });

  const b = await build(t, { env: f.env, stateDir });
  t.same(b.service.profiles.published, ['img-b', 'chat-a'], 'the first saved image id stays, the later one is dropped');
  t.match(await get(b, 'img-b'), { published: true });
  t.match(await get(b, 'img-a'), { published: false });
  t.match(await get(b, 'chat-a'), { published: true }, 'chat publications are untouched');
  await b.startEndpoint();
  t.same(await listed(b, '/v1/images/models'), ['service-image']);
  t.equal((await b.service.catalog.resolve('image', 'service-image'))?.id, 'img-b', 'service-image names the first saved image profile');
  t.same(await listed(b), ['chat-a']);
});

t.test('rule 6: a snapshot taken before an update stays as it was, frozen', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  const view = await create(t, b, chat('chat-a', f.gguf, { sampling: { temperature: 0.7 } }));
  const snapshot = b.service.profiles.get(view.id);
  if (!snapshot || snapshot.category !== 'chat') throw new Error('no chat snapshot');
  const copy = structuredClone(snapshot);

  const response = await b.admin('PUT', `/api/v1/profiles/${view.id}`, { revision: 1, ...chat('chat-a', f.gguf, { context: 4096, sampling: { temperature: 0.2 } }) });
  t.equal(response.status, 200);
  t.strictSame(snapshot, copy, 'the old snapshot is unchanged');
  t.equal(snapshot.revision, 1);
  t.ok(Object.isFrozen(snapshot), 'the snapshot is frozen');
  t.ok(Object.isFrozen(snapshot.params) && Object.isFrozen(snapshot.params.sampling), 'down to its nested objects');
  t.throws(() => {
    (snapshot.params as { context: number }).context = 1;
  }, TypeError, 'nobody can change it in place');

  const current = b.service.profiles.get(view.id);
  t.not(current, snapshot, 'the update made a new object');
  t.match(current, { revision: 2, params: { context: 4096, sampling: { temperature: 0.2 } } }, 'get() returns the new revision');
  t.ok(Object.isFrozen(current), 'the new snapshot is frozen too');
});

t.test('model lists start no worker; /v1/models/{name} finds only listed chat profiles', async (t) => {
  const f = await fixture(t);
  const b = await build(t, { env: f.env });
  await b.startEndpoint();
  const a = await create(t, b, chat('chat-a', f.gguf));
  await create(t, b, chat('chat-idle', f.gguf));
  const broken = await create(t, b, chat('chat-broken', f.missing));
  const slashed = await create(t, b, chat('org/chat-model', f.gguf));
  const img = await create(t, b, image('image-a', f.imageModel));
  const voice = await create(t, b, { name: 'voice-a', category: 'tts', params: {} });
  const ears = await create(t, b, { name: 'ears-a', category: 'stt', params: { defaultLanguage: 'en' } });
  for (const p of [a, broken, slashed, img, voice, ears]) await publish(t, b, p.id);

  for (const url of ['/v1/models', '/v1/images/models', '/v1/audio/speech/models', '/v1/audio/transcriptions/models', '/health']) {
    t.equal((await b.api('GET', url)).status, 200, url);
  }
  let response = await b.api('GET', '/v1/models/chat-a');
  t.equal(response.status, 200, 'GET /v1/models/chat-a');
  t.match(await response.json(), { id: 'chat-a', object: 'model', created: Number, owned_by: String });
  response = await b.api('GET', `/v1/models/${encodeURIComponent('org/chat-model')}`);
  t.equal(response.status, 200, 'a name with a slash, URL-encoded as clients send it');
  t.match(await response.json(), { id: 'org/chat-model', object: 'model' });
  for (const [what, name] of [
    ['unpublished', 'chat-idle'],
    ['published, not executable', 'chat-broken'],
    ['unknown', 'nope'],
    ['a TTS profile', 'voice-a'],
    ['an image profile by name', 'image-a'],
  ]) {
    await expectError(t, await b.api('GET', `/v1/models/${name}`), 404, 'invalid_request_error', 'model_not_found', 'model', `GET /v1/models/{${what}}`);
  }

  t.same(b.service.workers.statuses(), [], 'no worker is loaded');
  t.match(await (await b.admin('GET', '/api/v1/endpoint')).json(), { workers: [] }, 'the status shows no worker');
  for (const name of Object.keys(RUNTIMES) as Array<keyof typeof RUNTIMES>) {
    await t.rejects(access(`${f.runtime(name)}.ran`), { code: 'ENOENT' }, `${name} was never run`);
  }
});

t.test('a half-written profile file stops the start with its path', async (t) => {
  const stateDir = await tempDir(t, 'sd-state-');
  await mkdir(path.join(stateDir, 'profiles'), { recursive: true, mode: 0o700 });
  const file = path.join(stateDir, 'profiles', 'p-half.json');
  await writeFile(file, '{"id":', { mode: 0o600 });
  const config = loadConfig({ stateDir }, { PATH: '', SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') });
  const log = createLogger({ level: 'silent', destination: { write: () => undefined } });
  let failure: unknown;
  try {
    const started = await startService(config, { log, adminPort: 0 });
    t.teardown(() => started.service.shutdown());
  } catch (error) {
    failure = error;
  }
  t.ok(failure instanceof Error, 'startService rejects');
  t.match((failure as Error | undefined)?.message ?? '', file, 'the message names the file');
  t.equal(await readFile(file, 'utf8'), '{"id":', 'the damaged file is left as it was, not replaced with defaults');
});

t.test(`at most ${MAX_PROFILES} profiles: one more is a 409 profile_limit, and the lists keep answering at that count`, async (t) => {
  const f = await fixture(t);
  const stateDir = await tempDir(t, 'sd-state-');
  await mkdir(path.join(stateDir, 'profiles'), { mode: 0o700 });
  // All but one written as a restart finds them; half of them published.
  const created = '2024-01-01T00:00:00.000Z';
  const ids = Array.from({ length: MAX_PROFILES - 1 }, (_, i) => `p-many-${i}`);
  await Promise.all(
    ids.map((id, i) =>
      writeFile(path.join(stateDir, 'profiles', `${id}.json`), JSON.stringify({ id, revision: 1, created_at: created, updated_at: created, ...chat(`chat-${i}`, f.gguf) }), { mode: 0o600 }),
    ),
  );
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: false, port: 8120, published: ids.filter((_, i) => i % 2 === 0) }), { mode: 0o600 });
  const b = await build(t, { env: f.env, stateDir });
  await b.startEndpoint();

  const last = await create(t, b, chat('the-last', f.gguf));
  t.equal(last.revision, 1, `profile ${MAX_PROFILES} is created`);
  const refused = await b.admin('POST', '/api/v1/profiles', chat('one-too-many', f.gguf));
  t.equal(refused.status, 409);
  const body = (await refused.json()) as ErrorBody;
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'], 'the OpenAI error body');
  t.match(body.error, { type: 'conflict', code: 'profile_limit', param: null, message: new RegExp(`${MAX_PROFILES}.*delete one first`) });
  t.notOk(b.service.profiles.byName('one-too-many'), 'nothing was saved');

  // The full list (every profile's blockers) and the model lists at the same time.
  const started = Date.now();
  const [list, ...models] = await Promise.all([b.admin('GET', '/api/v1/profiles'), ...Array.from({ length: 5 }, () => b.api('GET', '/v1/models'))]);
  t.equal(((await list.json()) as { profiles: View[] }).profiles.length, MAX_PROFILES, 'the profile list holds them all');
  for (const answer of models) t.equal(((await answer.json()) as ModelList).data.length, MAX_PROFILES / 2, '/v1/models lists the published half');
  const elapsed = Date.now() - started;
  t.ok(elapsed < 5_000, `all answered in ${elapsed} ms`);
  const one = Date.now();
  await expectError(t, await b.api('POST', '/v1/chat/completions', { model: 'chat-1', messages: [{ role: 'user', content: 'hi' }] }), 404, 'invalid_request_error', 'model_not_found', 'model', 'an unpublished profile among them');
  t.equal(((await (await b.api('GET', '/v1/models/chat-998')).json()) as { id: string }).id, 'chat-998', 'a published one is found by name');
  t.ok(Date.now() - one < 1_000, 'a single look-up is quick');

  t.equal((await b.admin('DELETE', `/api/v1/profiles/${ids[0] ?? ''}`)).status, 204);
  await create(t, b, chat('one-too-many', f.gguf));
  t.equal((await b.admin('POST', '/api/v1/profiles', chat('and-another', f.gguf))).status, 409, 'at the limit again');
});
