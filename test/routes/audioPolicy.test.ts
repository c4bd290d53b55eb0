// Spec 2.4, 3.6, 4.7: GET/POST /api/v1/audio-policy on a real service. Every refusal of the route;
// the record in audio-policy.json (0600) across a restart; and each mode on the real workers:
// warm preloads the STT engine (pocketsphinx) and the espeak-ng TTS worker while the endpoint runs,
// reloads after the endpoint stop and start, per_request ends the engine process after each
// transcription, a missing runtime stays saved with its error in `errors` until a retry finds it,
// and no choice changes a model profile.
import { chmod, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { pocketsphinxPath, speech } from '../helpers/speech.js';
import { alive, until } from '../helpers/until.js';

interface View {
  settings: Array<{ kind: string; mode: string; profile_id: string | null }>;
  errors: Array<{ kind: string; profile_id: string | null; code: string; message: string; attempts: number }>;
  states: Record<string, string>;
}

async function profile(b: Built, body: object): Promise<string> {
  const response = await b.admin('POST', '/api/v1/profiles', body);
  if (response.status !== 201) throw new Error(`profile: ${response.status} ${await response.text()}`);
  return ((await response.json()) as { id: string }).id;
}

const policy = async (b: Built) => (await (await b.admin('GET', '/api/v1/audio-policy')).json()) as View;
const workers = async (b: Built) =>
  ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; state: string; pid: number | null; profile_id: string | null; gpus: string[] }> }).workers;
const worker = async (b: Built, kind: string) => (await workers(b)).find((w) => w.kind === kind);

async function expectError(t: Test, response: Response, status: number, code: string, param?: string | null) {
  const body = (await response.json()) as { error: { code: string; param: string | null; message: string } };
  t.equal(response.status, status, `${status} ${code}: ${body.error.message}`);
  t.equal(body.error.code, code);
  if (param !== undefined) t.equal(body.error.param, param);
}

t.test('GET answers the defaults; POST refuses every invalid choice with its reason', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath() } });
  t.same(await policy(b), {
    settings: [
      { kind: 'tts', mode: 'auto', profile_id: null },
      { kind: 'stt', mode: 'auto', profile_id: null },
    ],
    errors: [],
    states: { tts: 'auto', stt: 'auto' },
  });
  const chat = await profile(b, { name: 'words', category: 'chat', params: { model: '/nonexistent.gguf' } });
  const whisper = await profile(b, { name: 'whisper', category: 'stt', params: { backend: 'whisper.cpp', model: '/nonexistent/ggml-base.bin' } });
  const post = (body: unknown) => b.admin('POST', '/api/v1/audio-policy', body);

  await expectError(t, await post({ kind: 'tts', mode: 'auto', profile_id: null, extra: 1 }), 400, 'unknown_parameter', 'extra');
  await expectError(t, await post({ kind: 'video', mode: 'auto', profile_id: null }), 400, 'invalid_value', 'kind');
  await expectError(t, await post({ kind: 'tts', mode: 'always', profile_id: null }), 400, 'invalid_value', 'mode');
  await expectError(t, await post({ kind: 'tts', mode: 'warm', profile_id: 7 }), 400, 'invalid_value', 'profile_id');
  await expectError(t, await post({ mode: 'auto', profile_id: null }), 400, 'invalid_value', 'kind');
  await expectError(t, await post({ kind: 'stt', mode: 'warm', profile_id: null }), 400, 'invalid_value', 'profile_id');
  await expectError(t, await post({ kind: 'stt', mode: 'warm' }), 400, 'invalid_value', 'profile_id');
  await expectError(t, await post({ kind: 'stt', mode: 'warm', profile_id: 'p-none' }), 404, 'profile_not_found');
  await expectError(t, await post({ kind: 'stt', mode: 'per_request', profile_id: 'p-none' }), 404, 'profile_not_found');
  await expectError(t, await post({ kind: 'stt', mode: 'warm', profile_id: chat }), 400, 'invalid_value', 'profile_id');
  const notExecutable = await post({ kind: 'stt', mode: 'warm', profile_id: whisper });
  const body = (await notExecutable.clone().json()) as { error: { message: string } };
  await expectError(t, notExecutable, 400, 'invalid_value', 'profile_id');
  t.match(body.error.message, /requires an executable profile.*model file missing: \/nonexistent\/ggml-base\.bin/);
  await expectError(t, await b.admin('POST', '/api/v1/audio-policy', 'not json', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type');
  t.same((await policy(b)).settings.map((s) => s.mode), ['auto', 'auto'], 'nothing refused was saved');
  await t.rejects(stat(path.join(b.stateDir, 'audio-policy.json')), { code: 'ENOENT' }, 'and no file was written');
});

t.test('the choice is saved in audio-policy.json (0600), survives a restart, and a damaged file stops the start', async (t) => {
  const stateDir = await tempDir(t);
  const env = { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath() };
  const first = await build(t, { stateDir, env });
  const listener = await profile(first, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const response = await first.admin('POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'per_request', profile_id: listener });
  t.equal(response.status, 200);
  t.same(((await response.json()) as View).settings[1], { kind: 'stt', mode: 'per_request', profile_id: listener }, 'the answer shows the saved choice');
  const file = path.join(stateDir, 'audio-policy.json');
  t.equal((await stat(file)).mode & 0o777, 0o600);
  t.same(JSON.parse(await readFile(file, 'utf8')), {
    settings: [
      { kind: 'tts', mode: 'auto', profile_id: null },
      { kind: 'stt', mode: 'per_request', profile_id: listener },
    ],
  });
  await first.service.shutdown();

  const second = await build(t, { stateDir, env });
  t.same((await policy(second)).settings[1], { kind: 'stt', mode: 'per_request', profile_id: listener }, 'remembered across the restart');
  t.equal(second.service.supervisor.getSnapshot().context.audio.stt, 'per_request', 'and in force');
  await second.service.shutdown();

  await writeFile(file, '{"settings": [{"kind": "stt", "mo');
  await t.rejects(build(t, { stateDir, env }), new RegExp(`${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}.*not valid JSON`), 'a half-written file is named, never replaced');
});

t.test('warm: the STT engine and the TTS worker load while the endpoint runs, without a request, and reload after a stop and start', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  const listener = await profile(b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const speaker = await profile(b, { name: 'speaker', category: 'tts', params: {} });
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: listener, enabled: true })).status, 200);
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'warm', profile_id: listener })).status, 200);
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'tts', mode: 'warm', profile_id: speaker })).status, 200);
  t.same((await policy(b)).states, { tts: 'warm.dormant', stt: 'warm.dormant' }, 'the endpoint is stopped: nothing is preloaded');
  t.same(await workers(b), []);

  await b.startEndpoint();
  const stt = await until('the warm STT engine', async () => {
    const w = await worker(b, 'stt');
    return w?.state === 'loaded' ? w : undefined;
  });
  t.equal(stt.profile_id, listener);
  t.ok(stt.pid && alive(stt.pid), `the engine process ${stt.pid} runs before any recording`);
  t.equal((await worker(b, 'tts'))?.profile_id, speaker, 'the TTS worker is loaded too, though its profile is not published');
  t.same(await policy(b), {
    settings: [
      { kind: 'tts', mode: 'warm', profile_id: speaker },
      { kind: 'stt', mode: 'warm', profile_id: listener },
    ],
    errors: [],
    states: { tts: 'warm.held', stt: 'warm.held' },
  });

  const dir = await tempDir(t);
  const form = new FormData();
  form.set('model', 'listener');
  form.set('language', 'en');
  const pcm = await speech(dir, 'hello world');
  form.set('file', new Blob([encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000)]), 'hello.wav');
  const heard = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  t.equal(heard.status, 200);
  t.equal((await worker(b, 'stt'))?.pid, stt.pid, 'the first recording found the engine loaded: the same process');

  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  await until('the engine to end', async () => (alive(stt.pid!) ? undefined : true));
  // Dormant is the policy's state that loads nothing until the next start.
  const dormant = await until('both policies to rest while stopped', async () => {
    const view = await policy(b);
    return view.states.tts === 'warm.dormant' && view.states.stt === 'warm.dormant' ? view : undefined;
  });
  t.same(dormant.states, { tts: 'warm.dormant', stt: 'warm.dormant' });
  t.same(await workers(b), [], 'the stop unloads both, and nothing reloads while stopped');

  t.equal((await b.admin('POST', '/api/v1/endpoint/start', {})).status, 200);
  const again = await until('the reload after the start', async () => {
    const w = await worker(b, 'stt');
    return w?.state === 'loaded' ? w : undefined;
  });
  t.not(again.pid, stt.pid, 'a new engine process');

  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'per_request', profile_id: null })).status, 200);
  await until('per_request to unload the idle engine', async () => (alive(again.pid!) ? undefined : true));
  t.equal(await worker(b, 'stt'), undefined);
  t.equal((await worker(b, 'tts'))?.state, 'loaded', 'the TTS policy is independent');
});

t.test('a policy change changes no model profile: params, revision and publication stay as they were, in the API and on disk (spec 3.6)', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const chat = await profile(b, { name: 'words', category: 'chat', params: { model: '/nonexistent.gguf', context: 4096 } });
  const image = await profile(b, { name: 'pictures', category: 'image', params: { model: '/nonexistent/flux.gguf', steps: 8 } });
  const speaker = await profile(b, { name: 'speaker', category: 'tts', params: { speed: 1.25 } });
  const quiet = await profile(b, { name: 'quiet', category: 'tts', params: { voice: 'nova' } });
  const listener = await profile(b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  // One profile at a later revision; quiet stays unpublished.
  const read = (await (await b.admin('GET', `/api/v1/profiles/${speaker}`)).json()) as { params: Record<string, unknown> };
  t.equal((await b.admin('PUT', `/api/v1/profiles/${speaker}`, { ...read, params: { ...read.params, voice: 'echo' } })).status, 200);
  for (const id of [chat, image, speaker, listener]) t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  const names: Record<string, string> = { [speaker]: 'speaker', [quiet]: 'quiet', [listener]: 'listener' };

  /** Every profile as the API shows it, the bytes of every profile file, and the saved publication. */
  const profilesNow = async () => {
    const dir = path.join(b.stateDir, 'profiles');
    const files: Record<string, string> = {};
    for (const name of (await readdir(dir)).sort()) files[name] = await readFile(path.join(dir, name), 'utf8');
    const endpoint = JSON.parse(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8')) as { published: string[] };
    return { api: ((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: unknown[] }).profiles, files, published: endpoint.published };
  };
  const before = await profilesNow();
  t.equal(Object.keys(before.files).length, 5, 'five profile files');
  t.match(before.api, [{ id: chat }, { id: image }, { id: speaker, revision: 2, published: true }, { id: quiet, revision: 1, published: false }, { id: listener }]);
  t.same([...before.published].sort(), [chat, image, speaker, listener].sort());

  // Each choice is given time to act (a preload loads its worker, per_request unloads the idle
  // engine) before the profiles are compared.
  const changes: Array<[{ kind: string; mode: string; profile_id: string | null }, (view: View, w: Awaited<ReturnType<typeof worker>>) => boolean]> = [
    [{ kind: 'tts', mode: 'warm', profile_id: speaker }, (view, w) => view.states.tts === 'warm.held' && w?.profile_id === speaker],
    [{ kind: 'stt', mode: 'warm', profile_id: listener }, (view, w) => view.states.stt === 'warm.held' && w?.profile_id === listener],
    [{ kind: 'tts', mode: 'warm', profile_id: quiet }, (view, w) => view.states.tts === 'warm.held' && w?.profile_id === quiet],
    [{ kind: 'stt', mode: 'per_request', profile_id: listener }, (view, w) => view.states.stt === 'per_request' && w === undefined],
    [{ kind: 'tts', mode: 'per_request', profile_id: null }, (view, w) => view.states.tts === 'per_request' && w === undefined],
    [{ kind: 'tts', mode: 'auto', profile_id: null }, (view) => view.states.tts === 'auto'],
    [{ kind: 'stt', mode: 'auto', profile_id: null }, (view) => view.states.stt === 'auto'],
  ];
  for (const [choice, settled] of changes) {
    const what = `${choice.kind} ${choice.mode}${choice.profile_id ? ` ${names[choice.profile_id]}` : ''}`;
    t.equal((await b.admin('POST', '/api/v1/audio-policy', choice)).status, 200, `${what}: saved`);
    await until(`${what} to take effect`, async () => (settled(await policy(b), await worker(b, choice.kind)) ? true : undefined));
    t.strictSame(await profilesNow(), before, `${what}: every profile as it was`);
  }
});

t.test('per_request: the STT engine process ends after each transcription; the next one starts another', async (t) => {
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const listener = await profile(b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: listener, enabled: true })).status, 200);
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'stt', mode: 'per_request', profile_id: null })).status, 200);
  const pcm = await speech(await tempDir(t), 'good morning');
  const wav = encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000);
  const pids: number[] = [];
  for (let i = 0; i < 2; i++) {
    const form = new FormData();
    form.set('model', 'listener');
    form.set('language', 'en');
    form.set('file', new Blob([wav]), 'a.wav');
    const seen = new Set<number>();
    const watch = setInterval(() => {
      const pid = b.service.supervisor.getSnapshot().context.workers.stt.pid;
      if (pid) seen.add(pid);
    }, 5);
    const response = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
    clearInterval(watch);
    t.equal(response.status, 200);
    t.match(((await response.json()) as { text: string }).text, /\w/);
    await until('the engine to be unloaded after the request', async () => ((await worker(b, 'stt')) === undefined ? true : undefined));
    for (const pid of seen) {
      t.notOk(alive(pid), `engine ${pid} ended after its request`);
      pids.push(pid);
    }
  }
  t.equal(new Set(pids).size, 2, `two requests, two engine processes (${pids.join(', ')})`);
});

t.test('warm with a missing runtime: saved, the error appears in errors, retried later until the runtime is there', async (t) => {
  const dir = await tempDir(t);
  const espeak = path.join(dir, 'espeak-ng');
  const b = await build(t, { env: { SERVICE_DECK_ESPEAK_NG: espeak, SERVICE_DECK_GPUS: 'none' }, audioRetryMs: 300 });
  await b.startEndpoint();
  const speaker = await profile(b, { name: 'speaker', category: 'tts', params: {} });
  const response = await b.admin('POST', '/api/v1/audio-policy', { kind: 'tts', mode: 'warm', profile_id: speaker });
  t.equal(response.status, 200, 'a missing runtime does not refuse the choice');
  const answered = (await response.json()) as View;
  t.same(answered.settings[0], { kind: 'tts', mode: 'warm', profile_id: speaker }, 'the selection is saved');
  t.match(answered.errors, [{ kind: 'tts', profile_id: speaker, code: 'runtime_missing', message: /runtime missing: espeak-ng/ }]);
  const failing = await until('two failed preloads', async () => {
    const view = await policy(b);
    return (view.errors[0]?.attempts ?? 0) >= 2 ? view : undefined;
  });
  t.equal(failing.states.tts, 'warm.failed', 'retried, and still failing');
  t.same(await workers(b), [], 'nothing is loaded, nothing else touched');

  await writeFile(espeak, `#!/bin/sh\nexec espeak-ng "$@"\n`);
  await chmod(espeak, 0o755);
  const loaded = await until('the retry to find the runtime', async () => {
    const w = await worker(b, 'tts');
    return w?.state === 'loaded' ? w : undefined;
  });
  t.equal(loaded.profile_id, speaker);
  t.same((await policy(b)).errors, [], 'the error is gone once the preload succeeded');
});

t.test('warm on a GPU without 7 GiB free, then busy with a foreign process: errors, retried, loaded once the GPU is free', async (t) => {
  const dir = await tempDir(t);
  const gpus = path.join(dir, 'gpus.json');
  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 4_000 }]));
  const b = await build(t, { env: { SERVICE_DECK_GPUS: gpus }, audioRetryMs: 300 });
  await b.startEndpoint();
  const server = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));
  const voice = await profile(b, { name: 'gpu-voice', category: 'tts', params: { backend: 'openai-server', device: 'GPU-a', command: [process.execPath, server, '--port', '{port}'] } });
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'tts', mode: 'warm', profile_id: voice })).status, 200);
  const failing = await until('the refused preload', async () => {
    const view = await policy(b);
    return view.errors.length > 0 ? view : undefined;
  });
  t.match(failing.errors, [{ kind: 'tts', profile_id: voice, code: 'insufficient_memory', message: /forecast/ }]);
  t.same(await workers(b), [], 'nothing started');

  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 16_000, processes: [{ pid: 424242, usedMiB: 2_000 }] }]));
  const busy = await until('the retry to meet the foreign process', async () => {
    const view = await policy(b);
    return view.errors[0]?.code === 'resources_busy' ? view : undefined;
  });
  t.match(busy.errors[0]!.message, /pid 424242.*left alone/);
  t.ok(busy.errors[0]!.attempts >= 2, 'retried later');

  await writeFile(gpus, JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24_576, memoryFreeMiB: 16_000 }]));
  const loaded = await until('the retry once 16 GiB are free', async () => {
    const w = await worker(b, 'tts');
    return w?.state === 'loaded' ? w : undefined;
  });
  t.same(loaded.gpus, ['GPU-a']);
  t.same((await policy(b)).errors, []);
});

t.test('warm with a speech server that dies at its start: worker_failed in errors, retried at the retry pace, never in a hot loop', async (t) => {
  const RETRY_MS = 1_500;
  const b = await build(t, { env: { SERVICE_DECK_GPUS: 'none' }, audioRetryMs: RETRY_MS });
  await b.startEndpoint();
  const server = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));
  // Each attempt's start, in ms, written by the shell before the server runs.
  const starts = path.join(await tempDir(t), 'starts');
  const script = `date +%s%3N >> '${starts}'; exec '${process.execPath}' '${server}' --port "$1" --mode no-model`;
  const voice = await profile(b, { name: 'dying', category: 'tts', params: { backend: 'openai-server', command: ['/bin/sh', '-c', script, 'sh', '{port}'] } });
  t.equal((await b.admin('POST', '/api/v1/audio-policy', { kind: 'tts', mode: 'warm', profile_id: voice })).status, 200);
  const first = await until('the failed preload', async () => {
    const view = await policy(b);
    return view.errors[0] ? view.errors[0] : undefined;
  });
  t.match(first, { code: 'worker_failed', message: /could not load its model/ });
  const times = await until('four attempts', async () => {
    const lines = (await readFile(starts, 'utf8').catch(() => '')).split('\n').filter(Boolean).map(Number);
    return lines.length >= 4 ? lines : undefined;
  });
  // Between two starts lie the failed attempt and the retry pause: a slow machine only widens the
  // gaps, a hot loop (or a shortened pause) narrows them below the pace.
  const gaps = times.slice(1).map((time, i) => time - times[i]!);
  t.ok(gaps.every((gap) => gap >= RETRY_MS), `the gaps between attempts (${gaps.join(', ')} ms) keep the ${RETRY_MS} ms retry pace`);
  const later = (await policy(b)).errors[0];
  t.match(later, { code: 'worker_failed' }, 'it keeps failing');
  t.ok((later?.attempts ?? 0) >= times.length - 1, 'every finished attempt is counted');
});
