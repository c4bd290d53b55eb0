// The official `openai` npm client against the real service: model lists for every category,
// validated against OpenAI's schema; listing starts no worker.
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { build, tempDir, TOKEN } from '../helpers/build.js';
import { matchesSchema } from '../helpers/openapi.js';

t.test('openai client lists exactly the published, executable profiles', async (t) => {
  const dir = await tempDir(t);
  const fakeRuntime = path.join(dir, 'runtime.sh');
  await writeFile(fakeRuntime, '#!/bin/sh\nexit 0\n');
  await chmod(fakeRuntime, 0o755);
  const gguf = path.join(dir, 'model.gguf');
  await writeFile(gguf, Buffer.concat([Buffer.from('GGUF'), Buffer.alloc(60)]));
  const b = await build(t, {
    env: {
      SERVICE_DECK_LLAMA_SERVER: fakeRuntime,
      SERVICE_DECK_SD_CLI: fakeRuntime,
      SERVICE_DECK_ESPEAK_NG: fakeRuntime,
      SERVICE_DECK_POCKETSPHINX: fakeRuntime,
    },
  });
  await b.startEndpoint();
  const create = async (body: unknown) => {
    const response = await b.admin('POST', '/api/v1/profiles', body);
    t.equal(response.status, 201);
    return ((await response.json()) as { id: string }).id;
  };
  const publish = async (id: string, enabled = true) => t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled })).status, 200);

  const chatA = await create({ name: 'chat-a', category: 'chat', params: { model: gguf } });
  const chatB = await create({ name: 'chat-b', category: 'chat', params: { model: gguf, slots: 2 } });
  const broken = await create({ name: 'chat-broken', category: 'chat', params: { model: path.join(dir, 'missing.gguf') } });
  await create({ name: 'chat-unpublished', category: 'chat', params: { model: gguf } });
  const image = await create({ name: 'flux', category: 'image', params: { model: gguf } });
  const tts = await create({ name: 'speaker', category: 'tts', params: {} });
  const stt = await create({ name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  for (const id of [chatA, chatB, broken, image, tts, stt]) await publish(id);

  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  const page = await client.models.list();
  t.same(
    page.data.map((m) => m.id),
    ['chat-a', 'chat-b'],
    'chat profiles only, published and executable, in publication order',
  );

  for (const route of ['/v1/models', '/v1/images/models', '/v1/audio/speech/models', '/v1/audio/transcriptions/models']) {
    const response = await b.api('GET', route);
    t.equal(response.status, 200, route);
    const body = await response.json();
    matchesSchema(t, 'ListModelsResponse', body, `${route} matches ListModelsResponse`);
  }
  const ids = async (route: string) => ((await (await b.api('GET', route)).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  t.same(await ids('/v1/images/models'), ['service-image'], 'images appear only as the alias');
  t.same(await ids('/v1/audio/speech/models'), ['speaker']);
  t.same(await ids('/v1/audio/transcriptions/models'), ['listener']);

  const retrieved = await client.models.retrieve('chat-b');
  matchesSchema(t, 'Model', retrieved);
  t.equal(retrieved.id, 'chat-b');
  const missing = await client.models.retrieve('chat-broken').catch((e: unknown) => e);
  t.ok(missing instanceof OpenAI.NotFoundError, 'a non-executable profile is not found');

  await publish(chatA, false);
  t.same((await client.models.list()).data.map((m) => m.id), ['chat-b'], 'unpublishing takes effect for the next list');
  await publish(image, false);
  t.same(await ids('/v1/images/models'), [], 'no alias without a published image profile');

  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: unknown[]; counters: { requests: number; by_route: Record<string, number> } };
  t.same(status.workers, [], 'listing starts no worker');
  t.ok(status.counters.requests >= 9);
  t.ok((status.counters.by_route['/v1/models'] ?? 0) >= 3, 'requests are counted by route');

  const wrong = new OpenAI({ apiKey: 'wrong', baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  t.ok((await wrong.models.list().catch((e: unknown) => e)) instanceof OpenAI.AuthenticationError, 'a wrong token is refused');
});
