// The operator's speech and transcription tests (the console's Audio page): real espeak-ng and
// the real pocketsphinx engine through the same scheduler and workers as the API, for profiles
// that are not published; and every refusal with its status and code.
import t from 'tap';
import { encodeWav, pcm16, readWav, resample } from '../../src/adapters/wav.js';
import { build, type Built } from '../helpers/build.js';
import { pocketsphinxPath, speech } from '../helpers/speech.js';

async function setUp(t: Parameters<typeof build>[0]) {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  const make = async (body: unknown) => ((await (await b.admin('POST', '/api/v1/profiles', body)).json()) as { id: string }).id;
  const speaker = await make({ name: 'speaker', category: 'tts', params: {} });
  const listener = await make({ name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  return { b, speaker, listener };
}

const wav = (pcm: Buffer) => encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2), 16_000);

async function transcribe(b: Built, fields: Record<string, string>, file?: Buffer, headers: Record<string, string> = {}) {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  if (file) form.append('file', new Blob([new Uint8Array(file)]), 'recording.wav');
  const { cookie, csrf } = b.session();
  const response = await fetch(`${b.adminUrl}/api/v1/transcription-tests`, { method: 'POST', headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrf, ...headers }, body: form });
  return { status: response.status, body: (await response.json()) as { text?: string; language?: string; error?: { code: string; param: string | null } } };
}

t.test('speak with an unpublished TTS profile, then hear it back through an unpublished STT profile', async (t) => {
  const { b, speaker, listener } = await setUp(t);
  const spoken = await b.admin('POST', '/api/v1/speech-tests', { profile_id: speaker, input: 'hello world this is a test', language: 'English', speed: 0.8 });
  t.equal(spoken.status, 200);
  t.equal(spoken.headers.get('content-type'), 'audio/wav');
  t.equal(spoken.headers.get('cache-control'), 'no-store');
  const bytes = Buffer.from(await spoken.arrayBuffer());
  const parsed = readWav(bytes);
  t.ok(parsed.data.length > 16_000, `a real recording (${parsed.data.length} bytes of ${parsed.sampleRate} Hz samples)`);

  const samples = resample(pcm16(parsed), parsed.sampleRate, 16_000);
  const heard = await transcribe(b, { profile_id: listener }, wav(Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength)));
  t.equal(heard.status, 200);
  t.equal(heard.body.language, 'en', "the profile's default language");
  t.match(heard.body.text, /hello|world|test/, `heard: "${heard.body.text}"`);
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; profile_id: string | null }> };
  t.same(
    status.workers.filter((w) => w.kind === 'tts' || w.kind === 'stt').map((w) => [w.kind, w.profile_id]).sort(),
    [
      ['stt', listener],
      ['tts', speaker],
    ],
    'the same workers as the API ran them',
  );
  t.notOk(b.logLines.join('\n').includes('hello world'), 'neither text nor transcript reached a log line');
});

t.test('the speech test refuses what it cannot do', async (t) => {
  const { b, speaker, listener } = await setUp(t);
  const cases: Array<[string, unknown, number, string]> = [
    ['no such profile', { profile_id: 'nope', input: 'hi' }, 404, 'profile_not_found'],
    ['an STT profile', { profile_id: listener, input: 'hi' }, 400, 'invalid_value'],
    ['empty input', { profile_id: speaker, input: '' }, 400, 'invalid_value'],
    ['an unknown field', { profile_id: speaker, input: 'hi', model: 'x' }, 400, 'unknown_parameter'],
    ['an unknown voice', { profile_id: speaker, input: 'hi', voice: 'nobody' }, 400, 'invalid_value'],
  ];
  for (const [what, body, status, code] of cases) {
    const response = await b.admin('POST', '/api/v1/speech-tests', body);
    t.equal(response.status, status, what);
    t.equal(((await response.json()) as { error: { code: string } }).error.code, code, what);
  }
  const noCsrf = await b.admin('POST', '/api/v1/speech-tests', { profile_id: speaker, input: 'hi' }, { 'x-csrf-token': 'wrong' });
  t.equal(noCsrf.status, 403, 'CSRF applies');
  const loggedOut = await fetch(`${b.adminUrl}/api/v1/speech-tests`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: '{}' });
  t.equal(loggedOut.status, 401, 'only for a session');
});

t.test('the transcription test refuses what it cannot do', async (t) => {
  const { b, speaker, listener } = await setUp(t);
  const dir = t.testdir();
  const good = wav(await speech(dir, 'hello'));
  const eightMiB = encodeWav(new Int16Array((8 * 1024 * 1024 - 44) / 2), 16_000);
  const cases: Array<[string, Record<string, string>, Buffer | undefined, number, string, string | null]> = [
    ['no profile', {}, good, 400, 'invalid_value', 'profile_id'],
    ['no file', { profile_id: listener }, undefined, 400, 'invalid_value', 'file'],
    ['a TTS profile', { profile_id: speaker }, good, 400, 'invalid_value', 'profile_id'],
    ['a language pocketsphinx lacks', { profile_id: listener, language: 'de' }, good, 400, 'invalid_value', 'language'],
    ['an unknown language', { profile_id: listener, language: 'fr' }, good, 400, 'invalid_value', 'language'],
    ['an unknown field', { profile_id: listener, model: 'x' }, good, 400, 'unknown_parameter', 'model'],
    ['44.1 kHz', { profile_id: listener }, encodeWav(new Int16Array(4410), 44_100), 400, 'wav_sample_rate', 'file'],
    // The limit is 8 MiB exactly: one byte more is too large; 8 MiB is read, and refused for its 131 s.
    ['8 MiB and 1 byte', { profile_id: listener }, Buffer.concat([eightMiB, Buffer.alloc(1)]), 413, 'payload_too_large', 'file'],
    ['exactly 8 MiB', { profile_id: listener }, eightMiB, 400, 'wav_too_long', 'file'],
  ];
  for (const [what, fields, file, status, code, param] of cases) {
    const response = await transcribe(b, fields, file);
    t.equal(response.status, status, what);
    t.equal(response.body.error?.code, code, what);
    t.equal(response.body.error?.param, param, what);
  }
  const json = await b.admin('POST', '/api/v1/transcription-tests', { profile_id: listener });
  t.equal(json.status, 415, 'JSON is not a recording');
});
