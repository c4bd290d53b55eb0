// Errors say what to do. A model_not_found says why when the name is known to
// the API: a published profile that cannot run (where the operator sees why, without the server
// paths its blockers name), a profile of another category (which route takes it), no published
// image profile behind `service-image`. A runtime variable that points nowhere is named in the
// blocker (with its value, for the operator) and in the worker's runtime_missing (without it, as
// that reaches API clients). A refusal that depends on a profile setting names the setting
// (`params.referenceImages`, `params.context`).
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { runtimeMissingMessage } from '../../src/adapters/runtimes.js';
import { createLogger } from '../../src/system/observe/log.js';
import { WorkerHooks } from '../../src/system/workers.js';
import { SttWorker, type SttProfile } from '../../src/workers/speech/stt.js';
import { png } from '../helpers/png.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { until } from '../helpers/until.js';
import { baseStart } from '../helpers/workerStart.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const NOWHERE = '/nonexistent/llama-server';

interface ApiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function create(b: Built, profile: Record<string, unknown>, publish = true): Promise<string> {
  const created = await b.admin('POST', '/api/v1/profiles', profile);
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const { id } = (await created.json()) as { id: string };
  if (publish) await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return id;
}

const chatRequest = (model: string, content = 'Hello') => ({ model, messages: [{ role: 'user', content }], max_tokens: 4 });

t.test('model_not_found says why: published but not executable, another category, nothing published', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: NOWHERE, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const blocked = await create(b, { name: 'tiny', category: 'chat', params: { model } });
  await create(b, { name: 'draft', category: 'chat', params: { model } }, false);
  await create(b, { name: 'speaker', category: 'tts', params: {} });

  // The blocker names the variable and where it points: the operator set it.
  const view = (await (await b.admin('GET', `/api/v1/profiles/${blocked}`)).json()) as { executable: boolean; blockers: string[] };
  t.same(view.blockers, [`runtime missing: llama-server (SERVICE_DECK_LLAMA_SERVER is set to ${NOWHERE}, which is not an executable file)`], 'the blocker names the variable and its value');

  for (const [what, response] of [
    ['chat completion', await b.api('POST', '/v1/chat/completions', chatRequest('tiny'))],
    ['model retrieve', await b.api('GET', '/v1/models/tiny')],
  ] as const) {
    const { error } = (await response.json()) as ApiErrorBody;
    t.same([response.status, error.code, error.param], [404, 'model_not_found', 'model'], `${what}: 404 model_not_found`);
    t.match(error.message, /published but not executable/, `${what}: says the profile is published but cannot run`);
    t.match(error.message, new RegExp(`console.*GET /api/v1/profiles/${blocked}`), `${what}: says where the operator sees why`);
    t.notMatch(error.message, /nonexistent|\.gguf|SERVICE_DECK_/, `${what}: no server path or variable reaches the API client`);
  }

  const draft = (await (await b.api('POST', '/v1/chat/completions', chatRequest('draft'))).json()) as ApiErrorBody;
  t.equal(draft.error.message, "The model 'draft' does not exist or is not published.", 'an unpublished profile is not told apart from none');
  const none = (await (await b.api('POST', '/v1/chat/completions', chatRequest('nobody'))).json()) as ApiErrorBody;
  t.equal(none.error.message, "The model 'nobody' does not exist or is not published.");

  const other = (await (await b.api('POST', '/v1/chat/completions', chatRequest('speaker'))).json()) as ApiErrorBody;
  t.match(other.error, { code: 'model_not_found', message: /'speaker' is a speech \(TTS\) profile, not a chat profile: send it to POST \/v1\/audio\/speech/ }, 'a profile of another category says which route takes it');

  const image = (await (await b.api('POST', '/v1/images/generations', { model: 'service-image', prompt: 'x' })).json()) as ApiErrorBody;
  t.match(image.error, { code: 'model_not_found', message: /No image profile is published/ }, 'service-image with nothing published says so');

  // The admin side shows the blocker itself: the chat test's refusal names the variable.
  const test = await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: blocked, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  const refused = (await test.json()) as ApiErrorBody;
  t.same([test.status, refused.error.code], [503, 'runtime_missing'], 'the chat test: 503 runtime_missing');
  t.match(refused.error.message, /SERVICE_DECK_LLAMA_SERVER is set to \/nonexistent\/llama-server/, 'and names the variable');
});

t.test("a worker whose runtime variable points nowhere says so, without the variable's value", async (t) => {
  t.equal(
    runtimeMissingMessage('chat worker', ['llama-server'], {}, 'llama-server is not installed'),
    'The chat worker cannot start: llama-server is not installed.',
    'no variable set: how to install it',
  );
  const reports: Array<Record<string, unknown>> = [];
  const env = { ...process.env, SERVICE_DECK_POCKETSPHINX: '/nonexistent/pocketsphinx-worker' };
  const worker = new SttWorker({ workers: new WorkerHooks(), log: createLogger({ level: 'silent' }), lookup: { env, cacheDir: os.tmpdir() }, env });
  worker.runAlone((event) => void reports.push(event as Record<string, unknown>));
  t.teardown(() => worker.stop());
  const profile = { id: 'stt-1', revision: 1, name: 'listener', category: 'stt', params: { backend: 'pocketsphinx', threads: 1 } } as unknown as SttProfile;
  worker.actor.send({ type: 'worker.start', start: baseStart({ generation: 1, profileId: profile.id, revision: profile.revision }, profile) });
  const exited = await until('the exit report', async () => reports.find((r) => r.type === 'worker.exited'));
  t.match(exited, { cause: 'runtime_missing', message: /SERVICE_DECK_POCKETSPHINX is set but names no executable file: point it at pocketsphinx, or unset it/ }, 'the variable is named');
  t.notMatch(String(exited.message), /nonexistent/, 'its value (a server path) is not');
});

t.test('an edit beyond the profile capability names params.referenceImages', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const model = path.join(dir, 'painter.gguf');
  await writeFile(model, 'ok');
  await create(b, { name: 'painter', category: 'image', params: { model, width: 64, height: 64, steps: 2, referenceImages: 1 } });
  const form = new FormData();
  form.set('model', 'service-image');
  form.set('prompt', 'winter');
  for (const name of ['a.png', 'b.png']) form.append('image[]', new Blob([png()]), name);
  const response = await fetch(`${b.apiUrl()}/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  const { error } = (await response.json()) as ApiErrorBody;
  t.same([response.status, error.code, error.param], [400, 'invalid_value', 'image']);
  t.match(error.message, /takes at most 1 reference image\(s\) \(its params\.referenceImages\); 2 were sent/);
});

t.test('a request over the context names the profile setting params.context', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await create(b, { name: 'small', category: 'chat', params: { model: await tinyModelIn(dir), context: 256, slots: 1 } });
  // 2750 bytes: within what 256 tokens could hold at the model's longest token (12 bytes), so the
  // worker tokenizes it and finds it too long (promptFit.ts refuses more bytes at once).
  const response = await b.api('POST', '/v1/chat/completions', chatRequest('small', 'many words '.repeat(250)));
  const { error } = (await response.json()) as ApiErrorBody;
  t.same([response.status, error.code], [400, 'context_length_exceeded'], `400 context_length_exceeded (${error.message})`);
  t.match(error.message, /exceeds the available context size/, "llama-server's own words stay");
  t.match(error.message, /chat profile small's params\.context, 256 tokens shared by its 1 slot\(s\)/, 'and the profile setting is named');
  t.match(error.message, /ask the operator to raise params\.context/, 'with who can change it');
});
