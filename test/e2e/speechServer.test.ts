// The openai-server TTS backend (spec 3.4, 4.5) with the official openai client: the service starts
// the speech server from the profile's command line on a loopback port it chose, keeps it running
// for further requests, proxies each request, checks that a WAV comes back, shows the server only
// its designated GPU, refuses the start without 7 GiB free there, ends it at the endpoint stop, and
// diagnoses a crash. A stand-in server (test/fixtures/fake-speech-server.mjs) plays the GPU engine.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import t from 'tap';
import { readWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { alive, until } from '../helpers/until.js';

const SERVER = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));

interface Recorded {
  body: Record<string, unknown>;
  env: { CUDA_VISIBLE_DEVICES: string | null; service_deck: string[] };
  pid: number;
}

async function speaker(b: Built, name: string, params: Record<string, unknown>): Promise<string> {
  const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'tts', params: { backend: 'openai-server', ...params } });
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const id = ((await created.json()) as { id: string }).id;
  const published = await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  if (published.status !== 200) throw new Error(`publish: ${published.status} ${await published.text()}`);
  return id;
}

const records = async (file: string): Promise<Recorded[]> =>
  (await readFile(file, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Recorded);
const ttsWorker = async (b: Built) =>
  ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; state: string; pid: number | null; gpus: string[] }> }).workers.find((w) => w.kind === 'tts');

t.test('speech through a speech server the profile starts: proxied, kept running, ended at the stop', async (t) => {
  const dir = await tempDir(t);
  const record = path.join(dir, 'requests.jsonl');
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await speaker(b, 'server-voice', { command: [process.execPath, SERVER, '--port', '{port}', '--host', '{host}', '--record', record, '--mode', 'slow'], model: 'kokoro', voice: 'af_sky', speed: 1.5 });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  const spoken = await client.audio.speech.create({ model: 'server-voice', input: 'Hello from the speech server.', voice: 'nova', speed: 2, response_format: 'wav', language: 'English' } as OpenAI.Audio.SpeechCreateParams);
  t.equal(spoken.headers.get('content-type'), 'audio/wav');
  const wav = readWav(Buffer.from(await spoken.arrayBuffer()));
  t.same([wav.sampleRate, wav.channels, wav.bitsPerSample], [24_000, 1, 16], "the server's WAV comes back as it is");
  t.ok(Math.abs(wav.seconds - (0.06 * 29) / 2) < 0.01, `its length follows the input and the speed (${wav.seconds.toFixed(3)} s)`);

  const first = (await records(record))[0]!;
  t.same(first.body, { model: 'kokoro', input: 'Hello from the speech server.', voice: 'nova', speed: 2, language: 'English', response_format: 'wav' }, 'the request reaches the server with the profile model and wav');
  t.equal(first.env.CUDA_VISIBLE_DEVICES, '', 'a CPU profile sees no GPU');
  t.same(first.env.service_deck, [], "the service's own variables never reach the server");

  const defaults = await b.api('POST', '/v1/audio/speech', { model: 'server-voice', input: 'Zweiter Satz.' });
  t.equal(defaults.status, 200);
  const second = (await records(record))[1]!;
  // The profile's speed is 1.5, not the built-in 1: a request without `speed` gets the profile's.
  t.match(second.body, { voice: 'af_sky', language: 'German', speed: 1.5 }, "the profile's voice, the default German, the profile's speed");
  t.equal(second.pid, first.pid, 'the same server process answered: it stays loaded for further requests');
  const worker = await ttsWorker(b);
  t.equal(worker?.pid, first.pid, 'the status shows the server as the TTS worker');

  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  await until('the speech server to end', async () => (alive(first.pid) ? undefined : true));
  t.equal(await ttsWorker(b), undefined, 'the endpoint stop unloads it');
});

t.test('a profile that lists its languages refuses the others; the voice is passed on as it is', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await speaker(b, 'english-only', { command: [process.execPath, SERVER, '--port', '{port}'], languages: ['English', 'French'] });
  const refused = await b.api('POST', '/v1/audio/speech', { model: 'english-only', input: 'Hallo' });
  t.equal(refused.status, 400);
  const error = ((await refused.json()) as { error: { param: string; message: string } }).error;
  t.equal(error.param, 'language');
  t.equal(error.message, 'The language "German" is not supported; supported: English, French (the params.languages of english-only, set by the operator).', 'the refusal names the profile setting');
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'english-only', input: 'Hello', language: 'French', voice: 'any-server-voice' })).status, 200);
});

t.test('what the server does wrong is a 502 that says what happened, and the next request loads it again', async (t) => {
  const dir = await tempDir(t);
  const record = path.join(dir, 'requests.jsonl');
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await speaker(b, 'mp3-server', { command: [process.execPath, SERVER, '--port', '{port}', '--mode', 'not-wav'] });
  await speaker(b, 'failing-server', { command: [process.execPath, SERVER, '--port', '{port}', '--mode', 'status-500'] });
  await speaker(b, 'broken-model', { command: [process.execPath, SERVER, '--port', '{port}', '--mode', 'no-model'] });
  await speaker(b, 'fragile', { command: [process.execPath, SERVER, '--port', '{port}', '--record', record] });

  const expect502 = async (model: string, input: string, message: RegExp) => {
    const response = await b.api('POST', '/v1/audio/speech', { model, input, language: 'English' });
    const body = (await response.json()) as { error: { code: string; message: string } };
    t.equal(response.status, 502, `${model}: ${body.error.message}`);
    t.equal(body.error.code, 'worker_failed');
    t.match(body.error.message, message);
  };
  await expect502('mp3-server', 'hello', /did not answer with a WAV file \(audio\/mpeg\)/);
  await expect502('failing-server', 'hello', /answered 500: .*voice model crashed/);
  await expect502('broken-model', 'hello', /could not load its model/);
  await expect502('fragile', 'die now', /SIGKILL/);
  const killed = (await records(record))[0]!.pid;
  t.notOk(alive(killed));
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'fragile', input: 'hello again', language: 'English' })).status, 200, 'the next request loads it again');
  const again = (await records(record))[1]!.pid;
  t.not(again, killed, 'in a new process');
});

t.test('on a GPU: the server sees only its GPU, and it starts only with 7 GiB free there (foreign processes untouched)', async (t) => {
  const dir = await tempDir(t);
  const record = path.join(dir, 'requests.jsonl');
  const gpus = path.join(dir, 'gpus.json');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 6_000, processes: [{ pid: 424242, usedMiB: 18_000 }] }]));
  const b = await build(t, { env: { SERVICE_DECK_GPUS: gpus } });
  await b.startEndpoint();
  await speaker(b, 'gpu-voice', { command: [process.execPath, SERVER, '--port', '{port}', '--record', record], device: 'GPU-a' });
  const refused = await b.api('POST', '/v1/audio/speech', { model: 'gpu-voice', input: 'hello', language: 'English' });
  const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
  t.equal(refused.status, 503, error.message);
  t.match(error.code, /^(insufficient_memory|resources_busy)$/);
  t.same(await records(record), [], 'the server never started');

  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 16_000 }]));
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'gpu-voice', input: 'hello', language: 'English' })).status, 200);
  t.equal((await records(record))[0]!.env.CUDA_VISIBLE_DEVICES, 'GPU-a', 'only the designated GPU');
  t.same((await ttsWorker(b))?.gpus, ['GPU-a']);
});

t.test('a profile asking for less than 7 GiB still needs 7 GiB free: 2048 MiB asked, 6.5 GiB free is refused', async (t) => {
  const dir = await tempDir(t);
  const record = path.join(dir, 'requests.jsonl');
  const gpus = path.join(dir, 'gpus.json');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 6_656 }]));
  const b = await build(t, { env: { SERVICE_DECK_GPUS: gpus } });
  await b.startEndpoint();
  await speaker(b, 'small-voice', { command: [process.execPath, SERVER, '--port', '{port}', '--record', record], device: 'GPU-a', memoryMiB: 2048 });
  const refused = await b.api('POST', '/v1/audio/speech', { model: 'small-voice', input: 'hello', language: 'English' });
  // A WAV where the refusal was due is this check's failure, not a parse error.
  const json = refused.headers.get('content-type')?.startsWith('application/json');
  const error = json ? ((await refused.json()) as { error: { code: string; message: string } }).error : undefined;
  t.same([refused.status, error?.code], [503, 'insufficient_memory'], error?.message ?? 'refused');
  t.match(error?.message, /6656 MiB free.*at least 7168 MiB/, "the spec's 7 GiB, not the profile's 2048 MiB");
  t.same(await records(record), [], 'the server never started');

  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 7_168 }]));
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'small-voice', input: 'hello', language: 'English' })).status, 200, 'with 7 GiB free it starts');
});

t.test('a missing server program is the blocker `runtime missing`; a command without {port} is refused', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const id = await speaker(b, 'absent', { command: ['/nonexistent/tts-server', '--port', '{port}'] });
  const view = (await (await b.admin('GET', `/api/v1/profiles/${id}`)).json()) as { executable: boolean; blockers: string[] };
  t.same([view.executable, view.blockers], [false, ['runtime missing: /nonexistent/tts-server']]);
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'absent', input: 'hello' })).status, 404, 'not executable: not in the model list');
  const noPort = await b.admin('POST', '/api/v1/profiles', { name: 'no-port', category: 'tts', params: { backend: 'openai-server', command: ['tts-server'] } });
  t.equal(noPort.status, 400);
  t.match(((await noPort.json()) as { error: { message: string } }).error.message, /\{port\}/);
  const mixed = await b.admin('POST', '/api/v1/profiles', { name: 'mixed', category: 'tts', params: { backend: 'espeak-ng', model: 'kokoro' } });
  t.equal(mixed.status, 400, 'server fields on the espeak-ng backend are refused');
});

t.test('a server behind a wrapper is stopped with its whole process group; one that listens beyond loopback is refused', async (t) => {
  const dir = await tempDir(t);
  const record = path.join(dir, 'requests.jsonl');
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  // `sh` stays the parent: the server is its child, as with `uv run` or a start script.
  await speaker(b, 'wrapped', { command: ['sh', '-c', `"${process.execPath}" "${SERVER}" --port "$1" --record "${record}" & wait`, 'sh', '{port}'] });
  t.equal((await b.api('POST', '/v1/audio/speech', { model: 'wrapped', input: 'hello', language: 'English' })).status, 200);
  const server = (await records(record))[0]!.pid;
  const wrapper = (await ttsWorker(b))?.pid;
  t.not(server, wrapper, `the worker is the wrapper (${wrapper}); the server (${server}) is its child`);
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  await until('the server behind the wrapper to end', async () => (alive(server) ? undefined : true));
  t.notOk(alive(wrapper!), 'the wrapper is gone too');

  t.equal((await b.admin('POST', '/api/v1/endpoint/start', {})).status, 200);
  await speaker(b, 'exposed', { command: [process.execPath, SERVER, '--port', '{port}', '--host', '0.0.0.0'] });
  const refused = await b.api('POST', '/v1/audio/speech', { model: 'exposed', input: 'hello', language: 'English' });
  const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
  t.equal(refused.status, 502, error.message);
  t.match(error.message, /beyond loopback.*\{host\}/);
  t.equal(await ttsWorker(b), undefined, 'nothing stays loaded');
});
