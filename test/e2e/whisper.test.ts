// The whisper.cpp STT backend (spec 3.5, 4.6) with the official openai client, run with the REAL
// whisper-server and whisper-cli that set-up builds (scripts/build-whisper.sh) and a tiny generated
// model (test/helpers/tinyWhisper.ts) whose words are noise: whisper-server is started with the
// profile's model and kept loaded across recordings, on the CPU, and ended at the endpoint stop;
// whisper-cli runs once per recording on a private file that is removed afterwards. A damaged
// model fails both for real. The stand-in (test/fixtures/fake-whisper.mjs) only plays the failures
// the real program cannot be made to show on demand: dying in the middle of a recording, and an
// answer that is not JSON.
import { chmod, readdir, readFile, realpath, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { matchesSchema } from '../helpers/openapi.js';
import { alive, until } from '../helpers/until.js';
import { tinyWhisperIn, whisperPrograms } from '../helpers/whisper.js';

const STAND_IN = fileURLToPath(new URL('../fixtures/fake-whisper.mjs', import.meta.url));

/** `seconds` of a 440 Hz tone, 16 kHz mono PCM16, as a WAV file. */
const tone = (seconds = 1) => encodeWav(Int16Array.from({ length: 16_000 * seconds }, (_, i) => Math.round(6000 * Math.sin((2 * Math.PI * 440 * i) / 16_000))), 16_000);

async function listener(b: Built, model: string, name = 'whisper'): Promise<string> {
  const created = await b.admin('POST', '/api/v1/profiles', { name, category: 'stt', params: { backend: 'whisper.cpp', model, threads: 2 } });
  if (created.status !== 201) throw new Error(`profile: ${created.status} ${await created.text()}`);
  const id = ((await created.json()) as { id: string }).id;
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return id;
}

const sttWorker = async (b: Built) =>
  ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> }).workers.find((w) => w.kind === 'stt');

/** A process's arguments and environment as the kernel has them. */
async function processFacts(pid: number | string): Promise<{ argv: string[]; env: Map<string, string> }> {
  const split = (text: string) => text.split('\0').filter(Boolean);
  const argv = split(await readFile(`/proc/${pid}/cmdline`, 'utf8'));
  const env = new Map(split(await readFile(`/proc/${pid}/environ`, 'utf8')).map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]));
  return { argv, env };
}

/** A multipart transcription request with plain fetch, for the failures (the client throws on them). */
async function transcribeRaw(b: Built, model: string): Promise<{ status: number; error: { code: string; message: string } }> {
  const form = new FormData();
  form.set('model', model);
  form.set('file', new Blob([tone(1)]), 'a.wav');
  const response = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  return { status: response.status, error: ((await response.json()) as { error: { code: string; message: string } }).error };
}

t.test('whisper-server: loaded once with the model on the CPU, de by default, en and auto too, kept for further recordings, ended at the stop', async (t) => {
  const { server } = await whisperPrograms();
  const dir = await tempDir(t);
  const model = await tinyWhisperIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_SERVER: server, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await listener(b, model);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  const first = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(tone(1), 'a.wav') });
  matchesSchema(t, 'CreateTranscriptionResponseJson', first, 'the answer matches CreateTranscriptionResponseJson');
  t.match(first.text, /\w/, `a transcript with words (the tiny model's noise): ${JSON.stringify(first.text)}`);
  const worker = await sttWorker(b);
  const pid = worker?.pid;
  if (typeof pid !== 'number') throw new Error('no whisper-server pid after the first recording');
  t.equal(await realpath(`/proc/${pid}/exe`), await realpath(server), 'the process is the real whisper-server');
  const { argv, env } = await processFacts(pid);
  t.ok(argv.includes('-ng'), 'told not to use a GPU (-ng)');
  t.equal(argv[argv.indexOf('-m') + 1], model, 'with the profile model');
  t.equal(argv[argv.indexOf('-t') + 1], '2', 'with the profile threads');
  t.equal(argv[argv.indexOf('--host') + 1], '127.0.0.1', 'on loopback');
  t.equal(env.get('CUDA_VISIBLE_DEVICES'), '', 'and no GPU visible (CUDA_VISIBLE_DEVICES empty)');
  t.notOk(env.has('SERVICE_DECK_API_TOKEN'), 'no secret of the service in its environment');

  for (const [language, seconds] of [['en', 2], ['auto', 1], ['de', 3]] as const) {
    const heard = await client.audio.transcriptions.create({ model: 'whisper', language, file: await toFile(tone(seconds), `${language}.wav`) });
    t.type(heard.text, 'string', `${language}: 200 with a transcript: ${JSON.stringify(heard.text)}`);
    t.equal((await sttWorker(b))?.pid, pid, `${language}: the same whisper-server answered: it stays loaded`);
  }

  t.ok(alive(pid), 'still running after four recordings');
  t.equal((await b.admin('POST', '/api/v1/endpoint/stop', {})).status, 200, 'the endpoint stops');
  await until('whisper-server to end', async () => (alive(pid) ? undefined : true));
  t.equal(await sttWorker(b), undefined, 'no STT worker after the stop');
});

t.test('whisper-cli: one run per recording on the CPU, with the language asked for, on a private file that is removed afterwards', async (t) => {
  const { cli } = await whisperPrograms();
  const dir = await tempDir(t);
  const model = await tinyWhisperIn(dir);
  // The service runs this script as whisper-cli: it keeps a copy of its own /proc cmdline and
  // environ (what the service gave) and the recording's folder and modes, then becomes the real
  // whisper-cli with exec (same process, same arguments, same environment).
  const runs = path.join(dir, 'runs');
  const wrapper = path.join(dir, 'whisper-cli');
  await writeFile(
    wrapper,
    [
      '#!/bin/sh',
      `runs=${JSON.stringify(runs)}`,
      'mkdir -p "$runs"',
      'cp /proc/$$/cmdline "$runs/$$.cmdline"',
      'cp /proc/$$/environ "$runs/$$.environ"',
      'file=; prev=',
      'for arg in "$@"; do [ "$prev" = -f ] && file=$arg; prev=$arg; done',
      '[ -n "$file" ] && stat -c %a "$(dirname "$file")" "$file" | tr "\\n" " " >"$runs/$$.modes"',
      `exec ${JSON.stringify(cli)} "$@"`,
      '',
    ].join('\n'),
  );
  await chmod(wrapper, 0o755);
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_CLI: wrapper, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  await listener(b, model);
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });

  for (const language of [undefined, 'en', 'auto'] as const) {
    const heard = await client.audio.transcriptions.create({ model: 'whisper', ...(language ? { language } : {}), file: await toFile(tone(1), 'a.wav') });
    t.match(heard.text, /\w/, `${language ?? 'default'}: 200 with a transcript: ${JSON.stringify(heard.text)}`);
  }

  const pids = [...new Set((await readdir(runs)).map((name) => name.split('.')[0]!))];
  const recorded = await Promise.all(
    pids.map(async (pid) => {
      const split = (text: string) => text.split('\0').filter(Boolean);
      const argv = split(await readFile(path.join(runs, `${pid}.cmdline`), 'utf8')).slice(2); // sh and the script
      const env = split(await readFile(path.join(runs, `${pid}.environ`), 'utf8'));
      const modes = await readFile(path.join(runs, `${pid}.modes`), 'utf8').catch(() => '');
      return { argv, env, modes: modes.trim().split(' ') };
    }),
  );
  const transcriptions = recorded.filter((run) => run.argv.includes('-f'));
  t.equal(transcriptions.length, 3, 'one whisper-cli run per recording');
  t.same(
    transcriptions.map((run) => run.argv[run.argv.indexOf('-l') + 1]).sort(),
    ['auto', 'de', 'en'],
    'de by default, then en and auto as asked',
  );
  for (const run of transcriptions) {
    t.ok(run.argv.includes('-ng'), 'told not to use a GPU (-ng)');
    t.equal(run.argv[run.argv.indexOf('-m') + 1], model, 'with the profile model');
    t.equal(run.argv[run.argv.indexOf('-t') + 1], '2', 'with the profile threads');
    t.ok(run.env.includes('CUDA_VISIBLE_DEVICES='), 'no GPU visible (CUDA_VISIBLE_DEVICES empty)');
    t.same(run.modes, ['700', '600'], 'the recording lies in a private folder (0700) as a private file (0600)');
    const file = run.argv[run.argv.indexOf('-f') + 1]!;
    await t.rejects(stat(path.dirname(file)), `the temporary folder ${path.dirname(file)} is gone after the run`);
  }
});

t.test('what keeps whisper.cpp from running is a blocker, or a 502 that names the cause', async (t) => {
  const { server, cli } = await whisperPrograms();
  const dir = await tempDir(t);
  const model = await tinyWhisperIn(dir);
  const none = await build(t, { env: { SERVICE_DECK_GPUS: 'none' } });
  const id = await listener(none, model);
  const missing = (await (await none.admin('GET', `/api/v1/profiles/${id}`)).json()) as { blockers: string[] };
  t.same(missing.blockers, ['runtime missing: whisper-server or whisper-cli'], 'no whisper.cpp program where the service looks');
  const noModel = await listener(none, path.join(dir, 'absent.bin'), 'absent');
  t.match(((await (await none.admin('GET', `/api/v1/profiles/${noModel}`)).json()) as { blockers: string[] }).blockers, [/runtime missing/, /model file missing: .*absent\.bin/], 'and a model that is not there');

  // A model cut off in its tensors (a broken download): the real programs refuse it.
  const bytes = await readFile(model);
  const damaged = path.join(dir, 'damaged.bin');
  await writeFile(damaged, bytes.subarray(0, bytes.length - 200_000));
  const withServer = await build(t, { env: { SERVICE_DECK_WHISPER_SERVER: server, SERVICE_DECK_GPUS: 'none' } });
  await withServer.startEndpoint();
  await listener(withServer, damaged, 'damaged');
  const serverFailed = await transcribeRaw(withServer, 'damaged');
  t.equal(serverFailed.status, 502, serverFailed.error.message);
  t.equal(serverFailed.error.code, 'worker_failed', 'whisper-server: worker_failed');
  t.match(serverFailed.error.message, /could not load its model/, 'whisper-server ended at its start, and its output named the model');

  const withCli = await build(t, { env: { SERVICE_DECK_WHISPER_CLI: cli, SERVICE_DECK_GPUS: 'none' } });
  await withCli.startEndpoint();
  await listener(withCli, damaged, 'damaged');
  const cliFailed = await transcribeRaw(withCli, 'damaged');
  t.equal(cliFailed.status, 502, cliFailed.error.message);
  t.equal(cliFailed.error.code, 'worker_failed', 'whisper-cli: worker_failed');
  t.match(cliFailed.error.message, /whisper-cli failed: exit \d+: error: failed to initialize whisper context/, 'its last line of output names the failure');
});

t.test('a whisper-server that dies during a recording, or answers something that is not JSON, is a 502 worker_failed (stand-in)', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, { env: { SERVICE_DECK_WHISPER_SERVER: STAND_IN, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  for (const failure of ['crash', 'garbage']) {
    const model = path.join(dir, `${failure}.bin`);
    await writeFile(model, failure);
    await listener(b, model, failure);
    const failed = await transcribeRaw(b, failure);
    t.equal(failed.status, 502, `${failure}: ${failed.error.message}`);
    t.equal(failed.error.code, 'worker_failed', `${failure}: worker_failed`);
    t.match(failed.error.message, failure === 'crash' ? /ended by SIGKILL|did not answer/ : /answer that is not JSON/, `${failure}: the message names what happened`);
  }
});
