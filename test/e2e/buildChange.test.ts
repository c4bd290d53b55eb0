// A new build unloads (spec 3.5 "loaded | a new build | unloaded", spec 9 "build changes apply
// after the next unload"): when the program a loaded worker runs is replaced on disk, an idle
// worker is unloaded and the next job starts the new build; a busy one finishes its jobs first.
// The status shows which build each worker runs. Profiles are never changed.
import { chmod, copyFile, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { tinyModelIn } from '../helpers/llama.js';
import { pocketsphinxPath, speech } from '../helpers/speech.js';
import { alive, until } from '../helpers/until.js';

const FAKE_LLAMA = fileURLToPath(new URL('../fixtures/fake-llama-server.mjs', import.meta.url));

interface WorkerView {
  kind: string;
  pid: number | null;
  state: string;
  stale: string | null;
  build: { runtime: string; path: string; fingerprint: string; replaced_by: { path: string; fingerprint: string } | null } | null;
}

const workers = async (b: Built) => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: WorkerView[] }).workers;
const worker = async (b: Built, kind: string) => (await workers(b)).find((w) => w.kind === kind);

/** Installs a new build the way a build script does: the new file is written beside it, then renamed over it. */
async function replace(file: string, bytes: Buffer) {
  await writeFile(`${file}.new`, bytes, { mode: 0o755 });
  await rename(`${file}.new`, file);
}

async function publish(b: Built, body: object) {
  const created = await b.admin('POST', '/api/v1/profiles', body);
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const view = (await created.json()) as { id: string; revision: number };
  await b.admin('POST', '/api/v1/endpoint/profile', { id: view.id, enabled: true });
  return view;
}

t.test('an idle STT worker whose engine program is replaced is unloaded; the next recording starts the new build', async (t) => {
  const dir = await tempDir(t);
  // A private copy of the real pocketsphinx engine program, so the test can replace it.
  const engine = path.join(dir, 'pocketsphinx-worker');
  await copyFile(await pocketsphinxPath(), engine);
  await chmod(engine, 0o755);
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: engine, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_BUILD_POLL_MS: '200' } });
  await b.startEndpoint();
  const profile = await publish(b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  const pcm = await speech(dir, 'hello world this is a test');
  const recording = () => toFile(encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2), 16_000), 'a.wav');

  await client.audio.transcriptions.create({ model: 'listener', file: await recording() });
  const first = await worker(b, 'stt');
  t.match(first, { state: 'loaded', stale: null, build: { runtime: 'pocketsphinx', path: engine, fingerprint: /^[0-9a-f]{12}$/, replaced_by: null } }, 'the status shows the build');
  await new Promise((resolve) => setTimeout(resolve, 600));
  t.equal((await worker(b, 'stt'))?.pid, first?.pid, 'an unchanged program keeps its worker');

  // The "new build": the same program with one more byte at its end (an ELF file runs the same).
  await replace(engine, Buffer.concat([await readFile(engine), Buffer.from([0])]));
  await until('the worker of the old build to be unloaded', async () => ((await worker(b, 'stt')) ? undefined : true));
  t.notOk(alive(first!.pid!), 'its engine process has ended');
  const reason = b.logLines.find((line) => line.includes('new build'));
  t.ok(reason, 'the log says why');

  const heard = await client.audio.transcriptions.create({ model: 'listener', file: await recording() });
  t.match(heard.text, /hello|world|test/, `the new build transcribes: "${heard.text}"`);
  const second = await worker(b, 'stt');
  t.not(second?.pid, first?.pid, 'in a new process');
  t.not(second?.build?.fingerprint, first?.build?.fingerprint, 'of the new build');
  t.match(await (await b.admin('GET', `/api/v1/profiles/${profile.id}`)).json(), { revision: profile.revision }, 'the profile is not changed');
});

t.test('a busy chat worker whose llama-server is replaced finishes its answer first, and takes no new one', async (t) => {
  const dir = await tempDir(t);
  const wrapper = path.join(dir, 'llama-server');
  const script = (tag: string) => Buffer.from(`#!/bin/sh\n# build ${tag}\nFAKE_LLAMA_MODE=slow exec "${process.execPath}" "${FAKE_LLAMA}" "$@"\n`);
  await writeFile(wrapper, script('one'), { mode: 0o755 });
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: wrapper, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_BUILD_POLL_MS: '200' } });
  await b.startEndpoint();
  await publish(b, { name: 'chat', category: 'chat', params: { model: await tinyModelIn(dir), slots: 2 } });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  const stream = await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'x' }], stream: true });
  let tokens = 0;
  const read = (async () => {
    for await (const chunk of stream) if (chunk.choices[0]?.delta.content) tokens += 1;
  })();
  await until('the first token', async () => (tokens > 0 ? true : undefined));
  const before = await worker(b, 'chat');
  await replace(wrapper, script('two'));
  const marked = await until('the new build to be seen', async () => {
    const w = await worker(b, 'chat');
    return w?.build?.replaced_by ? w : undefined;
  });
  t.equal(marked.pid, before?.pid, 'the busy worker stays loaded for its answer');
  t.match(marked.stale, /a new build of llama-server/, 'and says it goes when idle');
  // A second answer fits the free slot of the old build, but waits for the new build instead.
  const second = (async () => {
    let count = 0;
    for await (const chunk of await client.chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'y' }], stream: true })) {
      if (chunk.choices[0]?.delta.content) count += 1;
    }
    return count;
  })();
  await read;
  t.equal(tokens, 30, 'the running answer finished whole');
  t.equal(await second, 30, 'the second answer too');
  const after = await worker(b, 'chat');
  t.not(after?.pid, before?.pid, 'the next answer came from a new process');
  t.not(after?.build?.fingerprint, before?.build?.fingerprint, 'of the new build');
  t.notOk(alive(before!.pid!), 'the old process has ended');
});
