// The whisper.cpp STT backend (spec 3.5, 4.6) with the official openai client: whisper-server is
// started with the profile's model and kept loaded across recordings, or whisper-cli runs once per
// recording on a private file that is removed afterwards. A stand-in (test/fixtures/fake-whisper.mjs)
// plays whisper.cpp, since neither it nor a model can be fetched here; it reports what it received.
import { access, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { alive, until } from '../helpers/until.js';

const WHISPER = fileURLToPath(new URL('../fixtures/fake-whisper.mjs', import.meta.url));

/** One second of a 440 Hz tone, 16 kHz mono PCM16, as a WAV file. */
const tone = (seconds = 1) => encodeWav(Int16Array.from({ length: 16_000 * seconds }, (_, i) => Math.round(6000 * Math.sin((2 * Math.PI * 440 * i) / 16_000))), 16_000);

async function listener(b: Built, model: string, name = 'whisper'): Promise<string> {
  const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'stt', params: { backend: 'whisper.cpp', model, threads: 3 } });
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return id;
}

const requests = async (model: string) =>
  (await readFile(`${model}.requests.jsonl`, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
const sttWorker = async (b: Built) =>
  ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> }).workers.find((w) => w.kind === 'stt');

t.test('whisper-server: loaded once with the model, German by default, kept for further recordings, ended at the stop', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'ggml-base.bin');
  await writeFile(model, 'model');
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_SERVER: WHISPER, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await listener(b, model);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  const first = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(tone(1), 'a.wav') });
  t.equal(first.text, 'heard 1.00 s of 16000 Hz mono 16-bit audio in de', 'the recording arrived whole, with the default language de');
  const second = await client.audio.transcriptions.create({ model: 'whisper', language: 'en', file: await toFile(tone(2), 'b.wav') });
  t.equal(second.text, 'heard 2.00 s of 16000 Hz mono 16-bit audio in en');
  const auto = await client.audio.transcriptions.create({ model: 'whisper', language: 'auto', file: await toFile(tone(1), 'c.wav') });
  t.match(auto.text, /in auto$/, 'auto goes to whisper as auto (its own detection)');

  const seen = await requests(model);
  t.same(seen.map((r) => [r.mode, r.response_format, r.threads, r.noGpu, r.cuda]), Array(3).fill(['server', 'json', '3', true, '']), 'on the CPU: -ng, and no GPU visible');
  t.equal(new Set(seen.map((r) => r.pid)).size, 1, 'one whisper-server process answered all three: it stays loaded');
  const pid = seen[0]!.pid as number;
  t.equal((await sttWorker(b))?.pid, pid);

  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  await until('whisper-server to end', async () => (alive(pid) ? undefined : true));
  t.equal(await sttWorker(b), undefined);
});

t.test('whisper-cli: one run per recording on a private file that is removed afterwards', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'ggml-base.bin');
  await writeFile(model, 'model');
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_CLI: WHISPER, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await listener(b, model);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  const heard = await client.audio.transcriptions.create({ model: 'whisper', language: 'en', file: await toFile(tone(1), 'a.wav') });
  t.equal(heard.text, 'heard 1.00 s of 16000 Hz mono 16-bit audio in en');
  const [run] = await requests(model);
  t.match(run, { mode: 'cli', fileMode: '600', threads: '3', flags: ['-m', '-f', '-l', '-t', '-ng', '-nt', '-np'] });
  await t.rejects(access(run!.file as string), 'the recording file is gone after the run');
});

t.test('what keeps whisper.cpp from running is a blocker or a 502 that names it', async (t) => {
  const dir = await tempDir(t);
  const model = path.join(dir, 'ggml-base.bin');
  await writeFile(model, 'model');
  const none = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  const id = await listener(none, model);
  const missing = (await (await none.admin('GET', `/api/v1/profiles/${id}`)).json()) as { blockers: string[] };
  t.same(missing.blockers, ['runtime missing: whisper-server or whisper-cli']);
  const noModel = await listener(none, path.join(dir, 'absent.bin'), 'absent');
  t.match(((await (await none.admin('GET', `/api/v1/profiles/${noModel}`)).json()) as { blockers: string[] }).blockers, [/runtime missing/, /model file missing: .*absent\.bin/]);

  const broken = path.join(dir, 'broken.bin');
  await writeFile(broken, 'broken');
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_SERVER: WHISPER, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await listener(b, broken, 'broken');
  const form = new FormData();
  form.set('model', 'broken');
  form.set('file', new Blob([tone(1)]), 'a.wav');
  const response = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  const error = ((await response.json()) as { error: { code: string; message: string } }).error;
  t.equal(response.status, 502, error.message);
  t.equal(error.code, 'worker_failed');
  t.match(error.message, /could not load its model/);
});
