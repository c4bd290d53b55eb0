// Model paths that are not regular files: a FIFO, a socket or a device named as a
// profile's model is a blocker naming its kind, and probing it never hangs the service. Opening a
// FIFO blocks until a writer comes and pins one of libuv's four threads; four such profiles once
// hung chat, TTS, login and the profile delete, across restarts.
import { execFileSync } from 'node:child_process';
import { constants, openSync } from 'node:fs';
import { createServer } from 'node:net';
import { chmod, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { writeTinyModel } from '../../../src/adapters/tinyModel.js';
import type { StoredProfile } from '../../../src/store/profile.schema.js';
import { chatReadyNow, profileBlockers } from '../../../src/system/catalog/blockers.js';
import { build, PASSWORD, tempDir, type Built } from '../../helpers/build.js';

/** How long any one answer may take here: the service answers these in milliseconds. */
const BOUND_MS = 3_000;

/** The promise, or a rejection naming what did not answer within BOUND_MS. */
function bounded<T>(what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${BOUND_MS} ms`)), BOUND_MS);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

interface View {
  id: string;
  name: string;
  executable: boolean;
  blockers: string[];
}

async function views(b: Built): Promise<View[]> {
  const response = await bounded('GET /api/v1/profiles', b.admin('GET', '/api/v1/profiles'));
  return ((await response.json()) as { profiles: View[] }).profiles;
}

async function login(t: Parameters<typeof build>[0], b: Built) {
  const response = await bounded(
    'POST /api/v1/session',
    fetch(`${b.adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) }),
  );
  t.equal(response.status, 200, 'login answers (scrypt runs on the same threads as file probes)');
}

t.test('FIFOs as model files: blockers naming the kind, and the service keeps answering, also after a restart', async (t) => {
  const dir = await tempDir(t);
  const fifos = Array.from({ length: 6 }, (_, i) => path.join(dir, `model-${i}.bin`));
  for (const fifo of fifos) execFileSync('mkfifo', [fifo]);
  try {
    await attack(t, fifos, dir);
  } finally {
    // A writer lets go of every open a broken probe left blocked on a FIFO, and of those queued
    // behind them, so that a failing run still ends (the shutdown needs those threads too). The
    // descriptors stay open until the test process exits.
    for (const fifo of fifos) openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
  }
});

async function attack(t: Parameters<typeof build>[0], fifos: string[], dir: string) {
  const socket = path.join(dir, 'model.sock');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  t.teardown(() => server.close());

  const env = { SERVICE_DECK_GPUS: 'none' };
  const b = await build(t, { env });
  await b.startEndpoint();
  const bodies = [
    ...fifos.slice(0, 3).map((model, i) => ({ name: `ears-${i}`, category: 'stt', params: { backend: 'whisper.cpp', model, defaultLanguage: 'en' } })),
    { name: 'picture-0', category: 'image', params: { model: fifos[3] } },
    { name: 'picture-1', category: 'image', params: { model: fifos[4], files: { vae: fifos[5] } } },
    { name: 'chat-fifo', category: 'chat', params: { model: fifos[0] } },
    { name: 'picture-device', category: 'image', params: { model: '/dev/null' } },
    { name: 'picture-socket', category: 'image', params: { model: socket } },
  ];
  const created = await bounded(
    'creating the profiles',
    Promise.all(bodies.map(async (body) => {
      const response = await b.admin('POST', '/api/v1/profiles', body);
      t.equal(response.status, 201, `${body.name} created`);
      return (await response.json()) as View;
    })),
  );
  const byName = new Map(created.map((view) => [view.name, view]));
  const expectBlocker = (view: View | undefined, what: string, kind: string, file: string) => {
    t.equal(view?.executable, false, `${view?.name}: not executable`);
    t.ok(view?.blockers.includes(`${what} is a ${kind}, not a regular file: ${file}`), `${view?.name}: the blocker names the ${kind} (${view?.blockers.join('; ')})`);
  };
  for (let i = 0; i < 3; i++) expectBlocker(byName.get(`ears-${i}`), 'model file', 'FIFO', fifos[i] as string);
  expectBlocker(byName.get('picture-0'), 'model file', 'FIFO', fifos[3] as string);
  expectBlocker(byName.get('picture-1'), 'model file', 'FIFO', fifos[4] as string);
  expectBlocker(byName.get('picture-1'), 'vae file', 'FIFO', fifos[5] as string);
  expectBlocker(byName.get('chat-fifo'), 'model file', 'FIFO', fifos[0] as string);
  expectBlocker(byName.get('picture-device'), 'model file', 'character device', '/dev/null');
  expectBlocker(byName.get('picture-socket'), 'model file', 'socket', socket);

  // Every profile published and read again and again: each read probes every file once more.
  for (const view of created) await bounded(`publishing ${view.name}`, b.admin('POST', '/api/v1/endpoint/profile', { id: view.id, enabled: true }));
  for (let round = 0; round < 3; round++) t.equal((await views(b)).length, created.length, `round ${round}: the profile list answers`);
  const models = await bounded('GET /v1/models', b.api('GET', '/v1/models'));
  t.same(((await models.json()) as { data: unknown[] }).data, [], '/v1/models answers: nothing executable is listed');
  const sttModels = await bounded('GET /v1/audio/transcriptions/models', b.api('GET', '/v1/audio/transcriptions/models'));
  t.equal(sttModels.status, 200, 'the STT model list answers');
  const chat = await bounded('POST /v1/chat/completions', b.api('POST', '/v1/chat/completions', { model: 'chat-fifo', messages: [{ role: 'user', content: 'hi' }] }));
  t.equal(chat.status, 404, 'a chat request for the blocked profile is refused at once');
  await login(t, b);
  const deleted = await bounded('DELETE a profile', b.admin('DELETE', `/api/v1/profiles/${byName.get('ears-0')?.id ?? ''}`));
  t.equal(deleted.status, 204, 'a profile is deleted');

  // A restart on the same state: the stored profiles are probed again at once.
  await bounded('shutdown', b.service.shutdown());
  const again = await bounded('the restart', build(t, { env, stateDir: b.stateDir }));
  const after = await views(again);
  t.equal(after.length, created.length - 1, 'after the restart the profile list answers');
  t.ok(after.filter((view) => view.blockers.some((blocker) => blocker.includes('is a FIFO'))).length >= 5, 'the FIFO blockers are there after the restart');
  await login(t, again);
}

/** A chat profile of `model`, as the store holds one. */
const chatProfile = (model: string) =>
  ({ id: 'p', revision: 1, name: 'p', category: 'chat', params: { model, context: 512, slots: 1, gpuSplit: null, gpuLayers: null, sampling: {} } }) as unknown as StoredProfile;

t.test('a model file checked on every request: each change is seen at the next check, also on the fast path', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'model.gguf');
  await writeTinyModel(model);
  const profile = chatProfile(model);
  const lookup = { env: {}, cacheDir: dir };
  const modelBlockers = async () => (await profileBlockers(profile, lookup)).filter((b) => b.startsWith('model file'));
  t.same(await modelBlockers(), [], 'a GGUF file: no blocker (the first look, on the probe lane)');
  t.same(await modelBlockers(), [], 'unchanged: still none (stat on the event loop, the head from memory)');
  await rm(model);
  t.same(await modelBlockers(), [`model file missing: ${model}`], 'removed: missing at the next check');
  await writeFile(model, 'not a model');
  t.same(await modelBlockers(), [`model file is not a GGUF file: ${model}`], 'replaced by another file: read again');
  await rm(model);
  execFileSync('mkfifo', [model]);
  t.same(await modelBlockers(), [`model file is a FIFO, not a regular file: ${model}`], 'a FIFO in its place: named, never opened');
  await rm(model);
  await writeTinyModel(model);
  t.same(await modelBlockers(), [], 'a GGUF file again: no blocker');
});

t.test('the chat fast path (chatReadyNow) answers only what profileBlockers found, and steps aside at every change', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'model.gguf');
  const runtime = path.join(dir, 'llama-server');
  await writeTinyModel(model);
  await writeFile(runtime, '#!/bin/sh\n', { mode: 0o755 });
  const profile = chatProfile(model);
  const lookup = { env: { SERVICE_DECK_LLAMA_SERVER: runtime }, cacheDir: dir };
  t.equal(chatReadyNow(profile, lookup), undefined, 'never checked: only profileBlockers can tell');
  t.same(await profileBlockers(profile, lookup), [], 'profileBlockers: none');
  t.equal(chatReadyNow(profile, lookup), true, 'then ready at once');
  t.equal(chatReadyNow({ ...profile, category: 'tts' } as unknown as StoredProfile, lookup), undefined, 'only chat profiles');

  await writeTinyModel(model, { seed: 9 });
  t.equal(chatReadyNow(profile, lookup), undefined, 'the model file changed: steps aside');
  t.same(await profileBlockers(profile, lookup), [], 'profileBlockers reads it again: still a GGUF file');
  t.equal(chatReadyNow(profile, lookup), true, 'ready at once again');

  await rm(model);
  t.equal(chatReadyNow(profile, lookup), undefined, 'the model file removed: steps aside');
  t.same(await profileBlockers(profile, lookup), [`model file missing: ${model}`], 'and profileBlockers names it');
  await writeTinyModel(model);
  t.same(await profileBlockers(profile, lookup), [], 'back');

  await chmod(runtime, 0o644);
  t.equal(chatReadyNow(profile, lookup), undefined, 'the runtime lost its x bit (its stat changed): steps aside');
  t.match((await profileBlockers(profile, lookup))[0], /^runtime missing: llama-server/, 'and profileBlockers names it');
  await rm(runtime);
  t.equal(chatReadyNow(profile, lookup), undefined, 'the runtime removed: steps aside');
  t.equal(chatReadyNow(profile, { env: {}, cacheDir: dir }), undefined, 'a look-up that finds no runtime: steps aside');
});
