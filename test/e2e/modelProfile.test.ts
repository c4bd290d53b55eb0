// From a file in the model folder to an answer: `POST /api/v1/model-files/profile` makes a profile
// of the generated tiny GGUF and of the generated tiny whisper model, each is published, and the
// official `openai` client gets a chat answer from the real llama-server and a transcript from the
// real whisper-server, each started with the file the profile was made from.
import { readFile, realpath } from 'node:fs/promises';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { matchesSchema } from '../helpers/openapi.js';
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

/** The pid of the worker of `kind`, from the status. */
async function workerPid(b: Built, kind: string): Promise<number> {
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> };
  const pid = status.workers.find((w) => w.kind === kind)?.pid;
  if (typeof pid !== 'number') throw new Error(`no ${kind} worker pid`);
  return pid;
}

t.test('a chat answer and a transcript from profiles made of model files', async (t) => {
  const dir = await tempDir(t);
  const llama = await llamaServerPath();
  const { server } = await whisperPrograms();
  const model = await tinyModelIn(dir);
  const whisper = await tinyWhisperIn(dir, 'ggml-tiny.bin');
  const b = await build(t, { env: { SERVICE_DECK_MODEL_DIRS: dir, SERVICE_DECK_LLAMA_SERVER: llama, SERVICE_DECK_WHISPER_SERVER: server, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
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
