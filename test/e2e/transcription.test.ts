// POST /v1/audio/transcriptions with the official openai client and plain multipart requests:
// English speech made with espeak-ng goes through the real pocketsphinx engine and comes back as
// text; every rule of spec 4.6 refuses with a 400 that names it.
import { readFile } from 'node:fs/promises';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, failureOf, TOKEN, type Built } from '../helpers/build.js';
import { matchesSchema } from '../helpers/openapi.js';
import { padWav, pocketsphinxPath, speech } from '../helpers/speech.js';
import { until } from '../helpers/until.js';

async function setUp(t: Parameters<typeof build>[0]) {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const id = ((await created.json()) as { id: string }).id;
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  return b;
}

const wav = (pcm: Buffer) => encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2), 16_000);

async function post(b: Built, fields: Record<string, string>, file?: { bytes: Buffer; name?: string }) {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  if (file) form.append('file', new Blob([file.bytes]), file.name ?? 'audio.wav');
  const response = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  return { status: response.status, body: (await response.json()) as { text?: string; error?: { code: string; param: string | null; message: string } } };
}

t.test('the openai client transcribes English speech; the worker stays loaded', async (t) => {
  const b = await setUp(t);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  const dir = t.testdir();
  const recording = wav(await speech(dir, 'hello world this is a test'));
  // No language: the profile's defaultLanguage (en) applies.
  const first = await client.audio.transcriptions.create({ model: 'listener', file: await toFile(recording, 'speech.wav') });
  matchesSchema(t, 'CreateTranscriptionResponseJson', first, 'the answer matches CreateTranscriptionResponseJson');
  t.match(first.text, /hello|world|test/, `heard: "${first.text}"`);
  const status = async () => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number; state: string }> }).workers.find((w) => w.kind === 'stt');
  const worker = await status();
  t.equal(worker?.state, 'loaded', 'the STT worker stays loaded');
  const second = await client.audio.transcriptions.create({ model: 'listener', file: await toFile(wav(await speech(dir, 'good morning how are you')), 'x.bin'), language: 'auto' });
  t.match(second.text, /morning|how|are|you/, `heard: "${second.text}" (the name of the file does not matter)`);
  t.equal((await status())?.pid, worker?.pid, 'the same process transcribed both recordings');
});

t.test('every rule of spec 4.6 refuses with its own 400', async (t) => {
  const b = await setUp(t);
  const good = wav(Buffer.alloc(16_000 * 2 * 0.5));
  const stereo = encodeWav(new Int16Array(16_000), 16_000, 2);
  // Exactly 8 MiB, the spec's limit: a true WAV of 131 s, so past the size its content is judged.
  const eightMiB = encodeWav(new Int16Array((8 * 1024 * 1024 - 44) / 2), 16_000);
  t.equal(eightMiB.length, 8 * 1024 * 1024, 'the 8 MiB file is exactly 8 MiB');
  type Case = [string, Record<string, string>, { bytes: Buffer; name?: string } | undefined, number, string, string | null];
  const cases: Case[] = [
    ['de on an English-only backend', { model: 'listener', language: 'de' }, { bytes: good }, 400, 'invalid_value', 'language'],
    ['an unknown language', { model: 'listener', language: 'fr' }, { bytes: good }, 400, 'invalid_value', 'language'],
    ['response_format text', { model: 'listener', language: 'en', response_format: 'text' }, { bytes: good }, 400, 'invalid_value', 'response_format'],
    ['timestamps', { model: 'listener', language: 'en', 'timestamp_granularities[]': 'word' }, { bytes: good }, 400, 'invalid_value', 'timestamp_granularities'],
    ['streaming', { model: 'listener', language: 'en', stream: 'true' }, { bytes: good }, 400, 'invalid_value', 'stream'],
    ['an unknown field', { model: 'listener', language: 'en', beam_size: '5' }, { bytes: good }, 400, 'unknown_parameter', 'beam_size'],
    ['temperature 2', { model: 'listener', language: 'en', temperature: '2' }, { bytes: good }, 400, 'invalid_value', 'temperature'],
    ['several languages', { model: 'listener', 'languages[]': 'en' }, { bytes: good }, 400, 'invalid_value', 'languages'],
    ['no model', { language: 'en' }, { bytes: good }, 400, 'invalid_value', 'model'],
    ['no file', { model: 'listener', language: 'en' }, undefined, 400, 'invalid_value', 'file'],
    ['an unknown model', { model: 'nope', language: 'en' }, { bytes: good }, 404, 'model_not_found', 'model'],
    ['stereo', { model: 'listener', language: 'en' }, { bytes: stereo }, 400, 'wav_not_mono', 'file'],
    ['44.1 kHz', { model: 'listener', language: 'en' }, { bytes: encodeWav(new Int16Array(4410), 44_100) }, 400, 'wav_sample_rate', 'file'],
    ['an MP3 named .wav', { model: 'listener', language: 'en' }, { bytes: Buffer.concat([Buffer.from('ID3'), Buffer.alloc(100)]), name: 'song.wav' }, 400, 'wav_not_riff', 'file'],
    ['a truncated WAV', { model: 'listener', language: 'en' }, { bytes: good.subarray(0, 1000) }, 400, 'wav_riff_size', 'file'],
    ['9 MiB', { model: 'listener', language: 'en' }, { bytes: Buffer.concat([good, Buffer.alloc(9 * 1024 * 1024)]) }, 413, 'payload_too_large', 'file'],
    ['8 MiB and 1 byte', { model: 'listener', language: 'en' }, { bytes: Buffer.concat([eightMiB, Buffer.alloc(1)]) }, 413, 'payload_too_large', 'file'],
    ['exactly 8 MiB: not refused for its size, but for its 131 s', { model: 'listener', language: 'en' }, { bytes: eightMiB }, 400, 'wav_too_long', 'file'],
    // Names every plain object has: neither a language nor a field name finds anything on a prototype.
    ...['constructor', '__proto__', 'toString', 'hasOwnProperty'].flatMap((name): Case[] => [
      [`the language ${name}`, { model: 'listener', language: name }, { bytes: good }, 400, 'invalid_value', 'language'],
      // The multipart parser refuses these names before the route reads the form: no param to name.
      [`a field named ${name}`, { model: 'listener', language: 'en', [name]: 'x' }, { bytes: good }, 400, 'unknown_parameter', null],
    ]),
  ];
  for (const [name, fields, file, status, code, param] of cases) {
    const answer = await post(b, fields, file);
    t.same([answer.status, answer.body.error?.code, answer.body.error?.param], [status, code, param], name);
    if (['44.1 kHz', 'stereo', 'an MP3 named .wav'].includes(name)) {
      t.match(answer.body.error?.message, /Convert it to a 16 kHz mono 16-bit WAV first: `ffmpeg -i in -ar 16000 -ac 1 -c:a pcm_s16le out\.wav`\.$/, `${name}: the refusal gives the conversion`);
    }
    if (name === 'a truncated WAV' || name.startsWith('exactly 8 MiB')) t.notMatch(answer.body.error?.message, /ffmpeg/, `${name}: no conversion where it would not help`);
    if (name === 'de on an English-only backend') {
      t.equal(
        answer.body.error?.message,
        'The pocketsphinx backend of listener (its params.backend) cannot transcribe language de: it takes en, auto; a profile with params.backend whisper.cpp takes it.',
        'the refusal names the profile setting that decides it, and the one that would take it',
      );
    }
  }
  const json = await b.api('POST', '/v1/audio/transcriptions', { model: 'listener' });
  t.equal(json.status, 415, 'a JSON body is not a multipart form');
  t.match(
    ((await json.json()) as { error: { message: string } }).error.message,
    /multipart\/form-data .*with the openai client, `file: await toFile\(await fs\.promises\.readFile\(path\), "name\.wav"\)`; with curl, `-F file=@name\.wav`/,
    'the 415 says how the openai client and curl send the recording',
  );
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: unknown[]; queue: { running: unknown[] } };
  t.same([status.workers, status.queue.running], [[], []], 'no refused request started a worker');
});

/** Bytes this process has read by read() and pread() so far, from sockets and files (Linux's /proc/self/io). */
const bytesRead = async () => Number(/^rchar: (\d+)$/m.exec(await readFile('/proc/self/io', 'utf8'))?.[1]);

t.test('an upload is read once, from its socket: the check reads its headers, the engine its samples alone', async (t) => {
  const b = await setUp(t);
  const MIB = 1024 * 1024;
  // The worker loaded and the route's code warm before anything is counted.
  t.equal((await post(b, { model: 'listener', language: 'en' }, { bytes: wav(Buffer.alloc(16_000)) })).status, 200);
  const silence = Buffer.alloc(16_000 * 2 * 5);
  const cases: Array<[string, Buffer, number, number]> = [
    // 8 MiB of samples: 262 s, refused by its header.
    ['8 MiB refused for its length', encodeWav(new Int16Array((8 * MIB - 44) / 2), 16_000), 400, 0],
    // 5 s of samples and 7.8 MiB of another chunk: accepted, only the samples go to the engine.
    ['8 MiB accepted with 5 s of samples', padWav(wav(silence), 8 * MIB), 200, silence.length],
  ];
  for (const [name, bytes, status, samples] of cases) {
    const before = await bytesRead();
    const answer = await post(b, { model: 'listener', language: 'en' }, { bytes });
    const read = (await bytesRead()) - before;
    t.equal(answer.status, status, `${name}: ${status}`);
    // The service reads the body from its socket once; beyond that only headers and the samples.
    t.ok(read < bytes.length + samples + MIB, `${name}: ${(read / MIB).toFixed(2)} MiB read for a ${(bytes.length / MIB).toFixed(2)} MiB upload with ${(samples / MIB).toFixed(2)} MiB of samples (at most 1 MiB more than both)`);
  }
});

t.test('defaultLanguage: de unless the profile says otherwise; a default its backend cannot transcribe is a blocker naming both', async (t) => {
  const b = await setUp(t);
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'german-ears', category: 'stt', params: {} });
  const view = (await created.json()) as { id: string; revision: number; executable: boolean; blockers: string[]; params: Record<string, unknown> };
  t.equal(view.params.defaultLanguage, 'de', 'the default is de (spec 4.6)');
  t.equal(view.executable, false);
  t.match(view.blockers, [/default language de not supported by the pocketsphinx backend \(it transcribes en, auto\)/]);
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: view.id, enabled: true })).status, 200);
  const listed = async () => ((await (await b.api('GET', '/v1/audio/transcriptions/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id).sort();
  t.same(await listed(), ['listener'], 'the blocked profile is not listed');
  const refused = await post(b, { model: 'german-ears' }, { bytes: wav(Buffer.alloc(16_000)) });
  t.same([refused.status, refused.body.error?.code], [404, 'model_not_found']);
  const edited = await b.admin('PUT', `/api/v1/profiles/${view.id}`, { name: 'german-ears', category: 'stt', revision: view.revision, params: { defaultLanguage: 'auto' } });
  t.match(await edited.json(), { executable: true, blockers: [], params: { defaultLanguage: 'auto' } }, 'auto is one pocketsphinx takes');
  t.same(await listed(), ['german-ears', 'listener']);
  const bad = await b.admin('POST', '/api/v1/profiles', { name: 'x', category: 'stt', params: { defaultLanguage: 'fr' } });
  t.same([bad.status, ((await bad.json()) as { error: { param: string } }).error.param], [400, 'params.defaultLanguage']);
});

t.test('a client that leaves mid-transcription never hands its answer to the next job', async (t) => {
  const b = await setUp(t);
  const dir = t.testdir();
  const long = wav(await speech(dir, 'one two three four five six seven eight nine ten '.repeat(6)));
  const short = wav(await speech(dir, 'good morning how are you'));
  await post(b, { model: 'listener', language: 'en' }, { bytes: short });
  const controller = new AbortController();
  const form = new FormData();
  form.append('model', 'listener');
  form.append('language', 'en');
  form.append('file', new Blob([long]), 'long.wav');
  const left = failureOf(fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form, signal: controller.signal }));
  await until('the long recording to be transcribed', async () => {
    const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: Array<{ kind: string }> } };
    return status.queue.running.some((job) => job.kind === 'stt') ? true : undefined;
  });
  controller.abort();
  t.equal(await left, 'AbortError', 'the first client left before any answer');
  const next = await post(b, { model: 'listener', language: 'en' }, { bytes: short });
  t.equal(next.status, 200);
  t.notMatch(next.body.text ?? '', /one|two|three|four|five|six|seven|eight|nine|ten/, `the next job gets its own answer: "${next.body.text}"`);
  t.match(next.body.text ?? '', /morning|how|are|you/);
});
