// From a hub repository to an answer, as a new operator goes: the generated tiny GGUF and tiny
// whisper model are pulled from a local hub that answers like huggingface.co (a redirect to its
// CDN with the size and sha256), verified, listed in the model folder with their facts and
// forecast, made profiles by `POST /api/v1/model-files/profile`, published, and the official
// `openai` client gets a chat answer from the real llama-server and a transcript from the real
// whisper-server, each started with the pulled file.
import { createHash } from 'node:crypto';
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import type { ModelFilesView } from '../../src/system/models/modelFiles.js';
import type { PullView } from '../../src/system/models/modelPulls.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { startHub } from '../helpers/hub.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';
import { until } from '../helpers/until.js';
import { tinyWhisperIn, whisperPrograms } from '../helpers/whisper.js';

interface Profile {
  id: string;
  name: string;
  category: string;
  published: boolean;
  params: { model: string; context?: number; backend?: string };
}

/** `seconds` of a 440 Hz tone, 16 kHz mono PCM16, as a WAV file. */
const tone = (seconds: number) => encodeWav(Int16Array.from({ length: 16_000 * seconds }, (_, i) => Math.round(6000 * Math.sin((2 * Math.PI * 440 * i) / 16_000))), 16_000);

/** Makes a profile of `file` and publishes it; the profile as made. */
async function profileOf(t: Parameters<typeof build>[0], b: Built, file: string, name: string): Promise<Profile> {
  const made = await b.admin('POST', '/api/v1/model-files/profile', { path: file, name });
  t.equal(made.status, 201, `a profile of ${path.basename(file)}`);
  const profile = (await made.json()) as Profile;
  t.equal(profile.published, false, 'made unpublished');
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled: true })).status, 200, 'published');
  return profile;
}

/** Pulls `file` of `repo` from the hub and waits until it is done; the pull as it ended. */
async function pull(t: Parameters<typeof build>[0], b: Built, repo: string, file: string): Promise<PullView> {
  const started = await b.admin('POST', '/api/v1/model-pulls', { repo, path: file });
  t.equal(started.status, 202, `the pull of ${file} is accepted`);
  const { id } = (await started.json()) as PullView;
  return until(`the pull of ${file} to end`, async () => {
    const { pulls } = (await (await b.admin('GET', '/api/v1/model-pulls')).json()) as { pulls: PullView[] };
    const ended = pulls.find((p) => p.id === id && p.state !== 'downloading');
    return ended;
  });
}

/** The pid of the worker of `kind`, from the status. */
async function workerPid(b: Built, kind: string): Promise<number> {
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> };
  const pid = status.workers.find((w) => w.kind === kind)?.pid;
  if (typeof pid !== 'number') throw new Error(`no ${kind} worker pid`);
  return pid;
}

t.test('pulled from a hub, made profiles, published: a chat answer and a transcript', async (t) => {
  const dir = await tempDir(t);
  const llama = await llamaServerPath();
  const { server } = await whisperPrograms();
  const hub = await startHub(t);
  const published = { gguf: await readFile(await tinyModelIn(dir)), whisper: await readFile(await tinyWhisperIn(dir, 'ggml-tiny.bin')) };
  hub.put('tiny-org/tiny-chat', 'main', 'tiny-F32.gguf', published.gguf);
  hub.put('tiny-org/tiny-ears', 'main', 'ggml-tiny.bin', published.whisper);
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_LLAMA_SERVER: llama, SERVICE_DECK_WHISPER_SERVER: server, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();

  const pulledChat = await pull(t, b, 'tiny-org/tiny-chat', 'tiny-F32.gguf');
  const model = path.join(b.stateDir, 'models', 'tiny-org', 'tiny-chat', 'tiny-F32.gguf');
  const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
  t.match(pulledChat, { state: 'done', file: model, bytes_done: published.gguf.length, bytes_total: published.gguf.length, sha256: sha256(published.gguf), error: null }, 'pulled and verified into <state>/models/<owner>/<name>/');
  t.ok((await readFile(model)).equals(published.gguf), 'the pulled file is the published one, byte for byte');
  const pulledWhisper = await pull(t, b, 'tiny-org/tiny-ears', 'ggml-tiny.bin');
  const whisper = path.join(b.stateDir, 'models', 'tiny-org', 'tiny-ears', 'ggml-tiny.bin');
  t.match(pulledWhisper, { state: 'done', file: whisper, sha256: sha256(published.whisper) });

  const { files } = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  const listed = new Map(files.map((f) => [f.path, f]));
  t.match(listed.get(model), { format: 'gguf', facts: { architecture: 'llama', context_length: 32768 }, forecast: { fits: true, summary: /^runs on the CPU at 8192 tokens/ }, error: null }, 'the pulled GGUF is listed with its facts and forecast');
  t.match(listed.get(whisper), { format: 'whisper', facts: { architecture: 'whisper' }, error: null }, 'the pulled whisper model is listed');

  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 60_000 });

  const chat = await profileOf(t, b, model, 'tiny-from-file');
  t.match(chat, { category: 'chat', params: { model, context: 32768 } }, "on the CPU the tiny model's own 32768 tokens fit");
  const answer = await client.chat.completions.create({ model: 'tiny-from-file', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8 });
  matchesSchema(t, 'CreateChatCompletionResponse', answer, 'the answer matches CreateChatCompletionResponse');
  t.equal(answer.model, 'tiny-from-file');
  t.equal(answer.usage?.completion_tokens, 8, 'eight tokens generated');
  const llamaPid = await workerPid(b, 'chat');
  t.equal(await realpath(`/proc/${llamaPid}/exe`), await realpath(llama), 'answered by the real llama-server');
  t.match(await readFile(`/proc/${llamaPid}/cmdline`, 'utf8'), `\0${model}\0`, 'started with the file the profile was made from');

  const stt = await profileOf(t, b, whisper, 'ears-from-file');
  t.match(stt, { category: 'stt', params: { backend: 'whisper.cpp', model: whisper } });
  const heard = await client.audio.transcriptions.create({ model: 'ears-from-file', language: 'en', file: await toFile(tone(1), 'a.wav') });
  matchesSchema(t, 'CreateTranscriptionResponseJson', heard, 'the transcript matches CreateTranscriptionResponseJson');
  t.match(heard.text, /\w/, `a transcript with words (the tiny model's noise): ${JSON.stringify(heard.text)}`);
  const whisperPid = await workerPid(b, 'stt');
  t.equal(await realpath(`/proc/${whisperPid}/exe`), await realpath(server), 'heard by the real whisper-server');
  t.match(await readFile(`/proc/${whisperPid}/cmdline`, 'utf8'), `\0${whisper}\0`, 'started with the file the profile was made from');
});
