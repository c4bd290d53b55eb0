// GET /metrics forgets a profile with the profile: every series labelled with its name (requests,
// latency, chat first token and tokens, queue wait, worker loads) goes when it is deleted, and
// the old name's when it is renamed. Cycles of create, use, rename and delete against the
// stand-in llama-server (test/fixtures/fake-llama-server.mjs) leave the exposition as long as
// before them.
import { chmod, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { build, tempDir, type Built } from '../helpers/build.js';
import { tinyModelIn } from '../helpers/llama.js';

const FAKE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/fake-llama-server.mjs');

/** The service's own series (prom-client's process metrics come and go with the runtime: GC kinds, handle types). */
async function ownLines(b: Built): Promise<string[]> {
  const text = await (await fetch(`${b.adminUrl}/metrics`, { headers: { cookie: b.session().cookie } })).text();
  return text.split('\n').filter((line) => line.startsWith('service_deck_'));
}

async function setUp(t: Test): Promise<Built & { model: string }> {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const wrapper = path.join(dir, 'llama-server');
  await writeFile(wrapper, `#!/bin/sh\nFAKE_LLAMA_MODE=instant exec "${process.execPath}" "${FAKE}" "$@"\n`);
  await chmod(wrapper, 0o755);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  return Object.assign(b, { model });
}

const chat = async (b: Built, model: string, expected: number, t: Test) => {
  const answer = await b.api('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }] });
  await answer.text();
  t.equal(answer.status, expected, `${model}: ${expected}`);
};

/**
 * One cycle: a profile named `name` is created and asked for (unpublished: 404, counted under its
 * name); with `worker`, published and asked again (the worker loads: queue wait, loads, first token,
 * tokens), renamed and asked under the new name; then deleted.
 */
async function cycle(b: Built & { model: string }, name: string, worker: boolean, t: Test): Promise<void> {
  const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'chat', params: { model: b.model } });
  const profile = (await created.json()) as { id: string; revision: number };
  await chat(b, name, 404, t);
  if (worker) {
    await b.admin('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled: true });
    await chat(b, name, 200, t);
    const renamed = await b.admin('PUT', `/api/v1/profiles/${profile.id}`, { revision: profile.revision, name: `${name}-renamed`, category: 'chat', params: { model: b.model } });
    t.equal(renamed.status, 200, 'renamed');
    await chat(b, `${name}-renamed`, 200, t);
  }
  t.equal((await b.admin('DELETE', `/api/v1/profiles/${profile.id}`)).status, 204, 'deleted');
}

t.test('deleted and renamed profiles leave no series behind', async (t) => {
  const b = await setUp(t);
  // Every route and code the cycles use is counted once before the baseline.
  await cycle(b, 'warm-up', true, t);
  await ownLines(b);
  const before = await ownLines(b);
  t.notOk(before.some((line) => line.includes('warm-up')), 'the warm-up profile left nothing');

  for (let i = 0; i < 50; i++) await cycle(b, `cycle-${i}`, false, t);
  for (let i = 0; i < 3; i++) await cycle(b, `loaded-${i}`, true, t);
  const after = await ownLines(b);
  const left = after.filter((line) => /model="(cycle|loaded)-/.test(line));
  t.same(left, [], 'no series names a deleted or renamed profile');
  t.equal(after.length, before.length, `as many lines as before the cycles (${before.length})`);
});
