// The catalog's look-ups (spec 2.1, 2.2, 4.1): a request's look-up checks the blockers of
// the one profile it names, whatever the number of profiles; concurrent checks of one snapshot
// share one computation; a new revision is checked again; the lists check only their category.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { writeTinyModel } from '../../../src/adapters/tinyModel.js';
import { EndpointStore } from '../../../src/store/endpoint.js';
import type { StoredProfile } from '../../../src/store/profile.schema.js';
import { MAX_PROFILES, ProfileStore } from '../../../src/store/profiles.js';
import { Catalog } from '../../../src/system/catalog/catalog.js';
import { tempDir } from '../../helpers/build.js';

const CHATS = MAX_PROFILES - 2;

/** A state directory with CHATS published chat profiles, one published image and one published TTS profile. */
async function stateWithMany(t: Parameters<typeof tempDir>[0]): Promise<string> {
  const dir = await tempDir(t);
  await mkdir(path.join(dir, 'profiles'), { mode: 0o700 });
  const created = '2024-01-01T00:00:00.000Z';
  const records = [
    ...Array.from({ length: CHATS }, (_, i) => ({ id: `chat-${i}`, name: `chat-${i}`, category: 'chat', params: { model: `/models/${i}.gguf` } })),
    { id: 'image-0', name: 'picture', category: 'image', params: { model: '/models/image.safetensors' } },
    { id: 'tts-0', name: 'voice', category: 'tts', params: {} },
  ];
  await Promise.all(
    records.map((record) =>
      writeFile(path.join(dir, 'profiles', `${record.id}.json`), JSON.stringify({ ...record, revision: 1, created_at: created, updated_at: created }), { mode: 0o600 }),
    ),
  );
  const published = records.map((r) => r.id);
  await writeFile(path.join(dir, 'endpoint.json'), JSON.stringify({ running: false, port: 8120, published }), { mode: 0o600 });
  return dir;
}

t.test(`with ${MAX_PROFILES} published profiles a request's look-up checks only the profile it names`, async (t) => {
  const dir = await stateWithMany(t);
  const profiles = await ProfileStore.open(dir, await EndpointStore.open(dir));
  t.equal(profiles.list().length, MAX_PROFILES);
  const checked: string[] = [];
  let blocked = new Set<string>();
  const catalog = new Catalog(profiles, { env: {}, cacheDir: dir }, undefined, async (profile) => {
    checked.push(profile.id);
    // A turn of the event loop, as a real check has: concurrent look-ups overlap.
    await new Promise((resolve) => setImmediate(resolve));
    return blocked.has(profile.id) ? ['model file missing: x'] : [];
  });
  const checks = async (work: () => Promise<unknown>) => {
    checked.length = 0;
    const result = await work();
    return { result, checked: [...checked] };
  };

  t.same(await checks(async () => (await catalog.resolve('chat', 'chat-500'))?.id), { result: 'chat-500', checked: ['chat-500'] }, 'one chat profile found and checked');
  t.same(await checks(() => catalog.resolve('chat', 'nope')), { result: undefined, checked: [] }, 'an unknown name checks nothing');
  t.same(await checks(() => catalog.resolve('tts', 'chat-1')), { result: undefined, checked: [] }, 'a profile of another category checks nothing');
  t.same(await checks(async () => (await catalog.resolve('image', 'service-image'))?.id), { result: 'image-0', checked: ['image-0'] }, 'the alias finds the published image profile');
  t.same(await checks(async () => (await catalog.resolve('image', 'picture'))?.id), { result: 'image-0', checked: ['image-0'] }, 'and its own name still works');
  t.same(await checks(async () => (await catalog.listed('tts')).map((p) => p.id)), { result: ['tts-0'], checked: ['tts-0'] }, 'a list checks only its category');

  blocked = new Set(['chat-7']);
  t.same(await checks(() => catalog.resolve('chat', 'chat-7')), { result: undefined, checked: ['chat-7'] }, 'a blocked profile is not found');
  await profiles.setPublished('chat-8', false);
  t.same(await checks(() => catalog.resolve('chat', 'chat-8')), { result: undefined, checked: [] }, 'an unpublished profile is not found, and not checked');

  const many = await checks(() => Promise.all(Array.from({ length: 50 }, () => catalog.resolve('chat', 'chat-9'))));
  t.same(many.checked, ['chat-9'], '50 concurrent look-ups of one profile share one check');
  t.ok((many.result as Array<StoredProfile | undefined>).every((p) => p?.id === 'chat-9'), 'and all find it');

  const before = profiles.get('chat-9') as StoredProfile;
  const renamed = await profiles.update('chat-9', 1, { name: 'chat-nine', category: 'chat', params: before.params } as Parameters<ProfileStore['update']>[2]);
  t.same(await checks(() => catalog.resolve('chat', 'chat-9')), { result: undefined, checked: [] }, 'the old name finds nothing after a rename');
  const again = await checks(() => catalog.resolve('chat', 'chat-nine'));
  t.same(again, { result: renamed, checked: ['chat-9'] }, 'the new revision is found by its new name and checked anew');
  t.equal(again.result, profiles.get('chat-9'), 'the snapshot is the stored one');
  t.equal(catalog.readyNow('chat', 'chat-nine'), undefined, 'with blockers of its own (a test double), the fast path always steps aside');
});

t.test('readyNow: a chat profile known at once only when published, of its category and checked before with nothing changed', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'model.gguf');
  const runtime = path.join(dir, 'llama-server');
  await writeTinyModel(model);
  await writeFile(runtime, '#!/bin/sh\n', { mode: 0o755 });
  const profiles = await ProfileStore.open(dir, await EndpointStore.open(dir));
  const chat = await profiles.create({ name: 'talk', category: 'chat', params: { model, context: 512, slots: 1, gpuSplit: null, gpuLayers: null, sampling: {} } });
  const catalog = new Catalog(profiles, { env: { SERVICE_DECK_LLAMA_SERVER: runtime }, cacheDir: dir });
  t.equal(catalog.readyNow('chat', 'talk'), undefined, 'unpublished: not known at once');
  await t.rejects(catalog.require('chat', 'talk'), { code: 'model_not_found' }, 'and not found');
  await profiles.setPublished(chat.id, true);
  t.equal(catalog.readyNow('chat', 'talk'), undefined, 'published, never checked: require decides');
  t.equal(await catalog.require('chat', 'talk'), profiles.get(chat.id), 'require finds it');
  t.equal(catalog.readyNow('chat', 'talk'), profiles.get(chat.id), 'then it is known at once, the stored snapshot');
  t.equal(catalog.readyNow('tts', 'talk'), undefined, 'not for another category');
  t.equal(catalog.readyNow('chat', 'nope'), undefined, 'not for an unknown name');
  await rm(model);
  t.equal(catalog.readyNow('chat', 'talk'), undefined, 'its model file removed: not known at once');
  await t.rejects(catalog.require('chat', 'talk'), { code: 'model_not_found' }, 'and require does not find it');
  await writeTinyModel(model);
  t.equal(await catalog.require('chat', 'talk'), profiles.get(chat.id), 'the file back: found');
  await profiles.setPublished(chat.id, false);
  t.equal(catalog.readyNow('chat', 'talk'), undefined, 'unpublished again: not known at once');
});
