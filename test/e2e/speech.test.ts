// POST /v1/audio/speech with the official openai client: espeak-ng speaks, the answer is a valid
// RIFF WAV; the English round trip goes on through /v1/audio/transcriptions (resampled to 16 kHz
// mono) and its word accuracy is measured; every rule of spec 4.5 refuses with a 400; a new
// revision of a loaded TTS or STT profile restarts its worker once the running answer has ended.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav, pcm16, readWav, resample } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { espeakRecorder, pocketsphinxPath, speech, wordAccuracy } from '../helpers/speech.js';
import { alive, ended, stopProcess, until } from '../helpers/until.js';


async function setUp(t: Parameters<typeof build>[0]) {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  for (const profile of [
    { name: 'speaker', category: 'tts', params: {} },
    { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } },
  ]) {
    const id = ((await (await b.admin('POST', '/api/v1/profiles', profile)).json()) as { id: string }).id;
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  }
  return b;
}

const SENTENCES = ['hello world this is a test', 'good morning how are you', 'open the door and turn on the light'];

t.test('speak through the openai client, then transcribe it: the round trip', async (t) => {
  const b = await setUp(t);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  const accuracies: number[] = [];
  for (const sentence of SENTENCES) {
    const spoken = await client.audio.speech.create({ model: 'speaker', input: sentence, voice: 'alloy', response_format: 'wav', language: 'English', speed: 0.75 } as OpenAI.Audio.SpeechCreateParams);
    t.equal(spoken.headers.get('content-type'), 'audio/wav');
    const wav = readWav(Buffer.from(await spoken.arrayBuffer()));
    t.same([wav.channels, wav.bitsPerSample], [1, 16], 'a valid RIFF WAV, 16-bit mono');
    t.ok(wav.seconds > 0.5, `${wav.seconds.toFixed(2)} s of speech`);
    const pcm = resample(pcm16(wav), wav.sampleRate, 16_000);
    const heard = await client.audio.transcriptions.create({ model: 'listener', language: 'en', file: await toFile(encodeWav(pcm, 16_000), 'speech.wav') });
    accuracies.push(wordAccuracy(sentence, heard.text));
    t.comment(`"${sentence}" → "${heard.text}" (${(accuracies.at(-1)! * 100).toFixed(0)}%)`);
  }
  const mean = accuracies.reduce((a, b) => a + b, 0) / accuracies.length;
  t.comment(`round-trip word accuracy: ${(mean * 100).toFixed(0)}%`);
  t.ok(mean >= 0.3, `English speech survives the round trip (${(mean * 100).toFixed(0)}% of the words)`);
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; state: string }> };
  t.equal(status.workers.find((w) => w.kind === 'tts')?.state, 'loaded', 'the TTS worker stays ready for further requests');

  const sttPid = ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> }).workers.find((w) => w.kind === 'stt')?.pid;
  t.ok(sttPid && alive(sttPid), 'the STT engine runs');

  const german = await b.api('POST', '/v1/audio/speech', { model: 'speaker', input: 'Guten Morgen, wie geht es dir?' });
  t.equal(german.status, 200, 'a German sentence is spoken (the voice used is checked below)');
  const slow = readWav(Buffer.from(await (await b.api('POST', '/v1/audio/speech', { model: 'speaker', input: 'Guten Morgen, wie geht es dir?', speed: 0.5 })).arrayBuffer()));
  t.ok(slow.seconds > readWav(Buffer.from(await german.arrayBuffer())).seconds, 'a lower speed speaks longer');

  // Endpoint stop: the TTS worker and the STT worker are unloaded.
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  const after = await until('the speech workers to go', async () => {
    const workers = ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string }> }).workers;
    return workers.some((w) => w.kind === 'tts' || w.kind === 'stt') ? undefined : workers;
  });
  t.same(after, [], 'no worker is left after the stop');
  t.notOk(alive(sttPid!), "the STT engine's process ended");
});

t.test('the voice and rate espeak-ng really speaks with: German, alloy and speed 1 by default, then the language, the preset, the profile voice and speed, and the request speed asked for', async (t) => {
  const espeak = await espeakRecorder(await tempDir(t));
  const b = await build(t, { env: { SERVICE_DECK_ESPEAK_NG: espeak.binary, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const ids: Record<string, string> = {};
  for (const profile of [
    { name: 'speaker', category: 'tts', params: {} },
    { name: 'whisperer', category: 'tts', params: { voice: 'shimmer' } },
    // A profile speed other than the built-in 1: a request without `speed` must get this one.
    { name: 'brisk', category: 'tts', params: { speed: 1.5 } },
  ]) {
    const id = ((await (await b.admin('POST', '/api/v1/profiles', profile)).json()) as { id: string }).id;
    ids[profile.name] = id;
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  }
  /** The argv of the one espeak-ng run that spoke since `before` runs. */
  const spokenSince = async (before: number, what: string) => {
    const spoken = (await espeak.runs()).slice(before).filter((argv) => argv.includes('--stdin'));
    t.equal(spoken.length, 1, `${what}: one espeak-ng run`);
    const argv = spoken[0] ?? [];
    return { voice: argv[argv.indexOf('-v') + 1], rate: argv[argv.indexOf('-s') + 1] };
  };
  // espeak-ng speaks 175 words a minute at speed 1 (src/workers/speech/tts.ts).
  const cases: Array<[Record<string, unknown>, string, string, string]> = [
    [{ model: 'speaker' }, 'de+m3', '175', 'no language, no voice, no speed: German, alloy, the default speed 1'],
    [{ model: 'speaker', language: 'English' }, 'en-us+m3', '175', 'English asked for'],
    [{ model: 'speaker', voice: 'nova' }, 'de+f3', '175', 'the preset nova, in German'],
    [{ model: 'speaker', language: 'French', voice: 'onyx' }, 'fr+m6', '175', 'French with onyx'],
    [{ model: 'whisperer' }, 'de+f1', '175', "the profile's own voice (shimmer) when the request names none"],
    [{ model: 'whisperer', voice: 'echo' }, 'de+m2', '175', "the request's voice over the profile's"],
    [{ model: 'brisk' }, 'de+m3', '263', "no speed in the request: the profile's 1.5 (175 x 1.5)"],
    [{ model: 'brisk', speed: 2 }, 'de+m3', '350', "the request's speed over the profile's"],
    [{ model: 'speaker', speed: 1.5 }, 'de+m3', '263', 'the speed asked for on a profile of speed 1'],
  ];
  for (const [body, voice, rate, what] of cases) {
    const before = (await espeak.runs()).length;
    const response = await b.api('POST', '/v1/audio/speech', { input: 'Guten Morgen', ...body });
    t.equal(response.status, 200, `${what}: spoken`);
    t.ok(readWav(Buffer.from(await response.arrayBuffer())).seconds > 0.2, `${what}: real speech`);
    t.same(await spokenSince(before, what), { voice, rate }, `${what}: espeak-ng -v ${voice} -s ${rate}`);
  }
  // The operator's speech test falls back to the profile's speed the same way.
  for (const [body, rate, what] of [
    [{}, '263', "the speech test without a speed: the profile's 1.5"],
    [{ speed: 0.5 }, '88', "the speech test's own speed (175 x 0.5)"],
  ] as const) {
    const before = (await espeak.runs()).length;
    const response = await b.admin('POST', '/api/v1/speech-tests', { profile_id: ids.brisk, input: 'Guten Morgen', ...body });
    t.equal(response.status, 200, `${what}: spoken`);
    t.same(await spokenSince(before, what), { voice: 'de+m3', rate }, `${what}: espeak-ng -s ${rate}`);
  }
  t.notOk((await espeak.runs()).flat().some((arg) => arg.includes('Guten')), 'the text goes through standard input, never the command line');
});

t.test('every rule of spec 4.5 refuses with a 400', async (t) => {
  const b = await setUp(t);
  type Case = [string, Record<string, unknown>, number, string, string | null];
  const cases: Case[] = [
    ['mp3', { model: 'speaker', input: 'x', response_format: 'mp3' }, 400, 'invalid_value', 'response_format'],
    ['stream_format sse', { model: 'speaker', input: 'x', stream_format: 'sse' }, 400, 'invalid_value', 'stream_format'],
    ['an unknown field', { model: 'speaker', input: 'x', pitch: 2 }, 400, 'unknown_parameter', 'pitch'],
    ['an empty input', { model: 'speaker', input: '' }, 400, 'invalid_value', 'input'],
    ['1001 characters', { model: 'speaker', input: 'a'.repeat(1001) }, 400, 'invalid_value', 'input'],
    ['speed 5', { model: 'speaker', input: 'x', speed: 5 }, 400, 'invalid_value', 'speed'],
    ['speed 0.2', { model: 'speaker', input: 'x', speed: 0.2 }, 400, 'invalid_value', 'speed'],
    ['an unsupported language', { model: 'speaker', input: 'x', language: 'Klingon' }, 400, 'invalid_value', 'language'],
    ['an unknown voice', { model: 'speaker', input: 'x', voice: 'darth' }, 400, 'invalid_value', 'voice'],
    // Names every plain object has: the presets are looked up as own entries only.
    ...['constructor', '__proto__', 'toString', 'hasOwnProperty'].flatMap((name): Case[] => [
      [`the voice ${name}`, { model: 'speaker', input: 'x', voice: name }, 400, 'invalid_value', 'voice'],
      [`the language ${name}`, { model: 'speaker', input: 'x', language: name }, 400, 'invalid_value', 'language'],
    ]),
    ['an unknown model', { model: 'nope', input: 'x' }, 404, 'model_not_found', 'model'],
    ['an STT profile as model', { model: 'listener', input: 'x' }, 404, 'model_not_found', 'model'],
  ];
  for (const [name, body, status, code, param] of cases) {
    const response = await b.api('POST', '/v1/audio/speech', body);
    // A WAV where a refusal was due is a failure of this case, not of the whole table.
    const json = response.headers.get('content-type')?.startsWith('application/json');
    const error = json ? ((await response.json()) as { error?: { code: string; param: string | null } }).error : undefined;
    t.same([response.status, error?.code, error?.param], [status, code, param], name);
  }
  const language = ((await (await b.api('POST', '/v1/audio/speech', { model: 'speaker', input: 'x', language: 'Klingon' })).json()) as { error: { message: string } }).error.message;
  t.match(language, /German.*English/, 'the refusal names the supported languages');
});

interface SpeechStatus {
  workers: Array<{ kind: string; profile_id: string | null; revision: number | null; state: string; pid: number | null; stale: string | null; active_jobs: number }>;
  queue: { running: Array<{ kind: string; profile_id: string }> };
}
const speechStatus = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as SpeechStatus;

t.test('a new revision of a loaded TTS or STT profile restarts that worker with the stored parameters, once its running answer has ended (spec 2.1 revision)', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const pcm = await speech(await tempDir(t), 'good morning how are you');
  const recording = encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000);
  const transcribe = () => {
    const form = new FormData();
    form.set('model', 'listener');
    form.set('language', 'en');
    form.set('file', new Blob([recording]), 'speech.wav');
    return fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  };
  // The TTS worker of a speech server (a process kept running while loaded, as llama-server is for
  // chat) and the pocketsphinx STT engine: each has a process the restart must replace. The
  // speech server's command line is a stored parameter its new process shows; pocketsphinx's
  // engine takes none.
  const server = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));
  const kinds = [
    {
      kind: 'tts',
      profile: { name: 'speaker', category: 'tts', params: { backend: 'openai-server', command: [process.execPath, server, '--port', '{port}'] } },
      edit: { command: [process.execPath, server, '--port', '{port}', '--host', '{host}'] },
      stored: ['--host', '127.0.0.1'],
      ask: () => b.api('POST', '/v1/audio/speech', { model: 'speaker', input: 'Guten Morgen' }),
    },
    { kind: 'stt', profile: { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } }, edit: { defaultLanguage: 'auto' }, stored: null, ask: transcribe },
  ] as const;
  for (const { kind, profile, edit, stored, ask } of kinds) {
    const created = await b.admin('POST', '/api/v1/profiles', profile);
    const id = ((await created.json()) as { id: string }).id;
    t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
    t.equal((await ask()).status, 200, `${kind}: the first request loads the worker`);
    const worker = async () => (await speechStatus(b)).workers.find((w) => w.kind === kind);
    const loaded = (await worker())!;
    t.match(loaded, { profile_id: id, revision: 1, state: 'loaded', stale: null }, `${kind}: loaded at revision 1`);
    t.ok(loaded.pid && alive(loaded.pid), `${kind}: its process ${loaded.pid} runs`);

    // The worker's process is held still, so that the answer is running when the save comes.
    await stopProcess(loaded.pid!);
    const running = ask();
    await until(`the ${kind} answer to run`, async () => ((await speechStatus(b)).queue.running.some((job) => job.kind === kind) ? true : undefined));
    const read = (await (await b.admin('GET', `/api/v1/profiles/${id}`)).json()) as { params: Record<string, unknown> };
    const saved = await b.admin('PUT', `/api/v1/profiles/${id}`, { ...read, params: { ...read.params, ...edit } });
    t.equal(saved.status, 200, `${kind}: revision 2 saved`);
    t.match(await worker(), { revision: 1, pid: loaded.pid, state: 'loaded', active_jobs: 1, stale: /new revision \(2\)/ }, `${kind}: the worker of revision 1 stays while its answer runs, and goes when idle`);
    t.ok(alive(loaded.pid!), `${kind}: the running answer's process was not ended`);
    process.kill(loaded.pid!, 'SIGCONT');
    t.equal((await running).status, 200, `${kind}: the running answer finished with its adopted profile`);

    const restarted = await until(`the ${kind} worker at revision 2, without a request`, async () => {
      const w = await worker();
      return w?.revision === 2 && w.state === 'loaded' ? w : undefined;
    });
    t.not(restarted.pid, loaded.pid, `${kind}: in a new process`);
    t.ok(ended(loaded.pid!), `${kind}: the process of revision 1 was ended first`);
    if (stored) {
      const args = (await readFile(`/proc/${restarted.pid}/cmdline`, 'utf8')).split('\0');
      t.equal(args[args.indexOf(stored[0]) + 1], stored[1], `${kind}: the new process runs with the stored ${stored.join(' ')}`);
    }
    t.equal((await ask()).status, 200);
    t.equal((await worker())?.pid, restarted.pid, `${kind}: the next request is answered by the restarted worker, not another start`);
  }
});
