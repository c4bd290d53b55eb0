// Spec 2.1, publication rule 2, with an image job running: publishing another image profile
// removes the running job's publication at once, but the running answer is not aborted. Its image
// process finishes with the profile it was accepted with (rule 6: a consistent snapshot), a request
// that waited for it is rejected (3.7: its profile was unpublished), and the next `service-image`
// request runs on the newly published profile. Only sd-cli is a stand-in (test/fixtures/sd-cli).
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { pngSize } from '../../src/adapters/png.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { alive, until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));

/** An image profile of the stand-in; `behaviour` goes into its model file (`slow`: 300 ms a step). */
async function painter(b: Built, dir: string, name: string, size: { width: number; height: number }, behaviour = 'ok') {
  const model = path.join(dir, `${name}.gguf`);
  await writeFile(model, behaviour);
  const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'image', params: { model, ...size, steps: 8, seed: 7 } });
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  return { id: ((await created.json()) as { id: string }).id, model };
}

const runs = async (model: string): Promise<Array<{ pid: number }>> =>
  (await readFile(`${model}.runs.jsonl`, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { pid: number });

interface ImageAnswer {
  data?: Array<{ b64_json: string }>;
  error?: { code: string; message: string };
}

/** The size of the answer's image, or null when it has none. */
const sizeOf = (answer: ImageAnswer) => {
  const b64 = answer.data?.[0]?.b64_json;
  return b64 ? pngSize(Buffer.from(b64, 'base64')) : null;
};

t.test('publishing another image profile while an image job runs: the running answer is not aborted', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const dir = await tempDir(t);
  // The first takes 8 steps of 300 ms; the two make images of different sizes, so each answer tells whose it is.
  const first = await painter(b, dir, 'first', { width: 64, height: 72 }, 'slow');
  const second = await painter(b, dir, 'second', { width: 96, height: 80 });
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: first.id, enabled: true })).status, 200);
  const published = async () =>
    ((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: Array<{ name: string; published: boolean }> }).profiles.filter((p) => p.published).map((p) => p.name);
  t.same(await published(), ['first'], 'the first profile is the published image profile');

  const generate = (model: string) => b.api('POST', '/v1/images/generations', { model, prompt: 'a lighthouse' });
  const running = generate('service-image');
  let answered = false;
  void running.then(() => (answered = true));
  const [run] = await until('the first image process to run', async () => ((await runs(first.model)).length > 0 ? runs(first.model) : undefined));
  // A second request for the same alias waits behind it: it was accepted for the first profile too.
  const waiting = generate('service-image');
  await until('the second request to wait', async () => {
    const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { waiting: unknown[] } };
    return status.queue.waiting.length > 0 ? true : undefined;
  });

  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: second.id, enabled: true })).status, 200, 'the second profile is published while the first image runs');
  t.same(await published(), ['second'], 'at once the only published image profile: the first lost its publication');
  t.notOk(answered, 'the switch came while the first image was being made');
  t.ok(alive(run!.pid), 'the running image process was not ended by the switch');

  const answer = await running;
  const body = (await answer.json()) as ImageAnswer;
  t.equal(answer.status, 200, `the running answer finished: ${body.error?.message ?? 'an image'}`);
  t.same(sizeOf(body), { width: 64, height: 72 }, "made with the first profile, the one it was accepted with");
  t.equal((await runs(first.model)).length, 1, 'in its one process');

  const refused = await waiting;
  const waited = (await refused.json()) as ImageAnswer;
  t.equal(waited.error?.code, 'profile_changed', `the request that waited for the first profile is rejected (${refused.status}): ${waited.error?.message ?? ''}`);

  const next = await generate('service-image');
  const made = (await next.json()) as ImageAnswer;
  t.equal(next.status, 200, made.error?.message ?? 'the next image');
  t.same(sizeOf(made), { width: 96, height: 80 }, 'the next service-image request runs on the second profile');
  t.equal((await runs(second.model)).length, 1);
  t.equal((await generate('first')).status, 404, 'the first profile is no longer callable by its own name');
});
