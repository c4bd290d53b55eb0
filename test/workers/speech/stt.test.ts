// The STT worker adapter with the real engine (native/pocketsphinx-worker.c): given the
// supervisor's start (the test sends it, as the supervisor does with a grant), the engine loads once, transcribes recording after recording in the
// same process, reports started/loaded to the supervisor, unloads on command and reports it once its
// process has ended,
// and an engine that dies is reported at once as worker.exited with a diagnosis.
import { open, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { NO_SAMPLES, speechFile, stalledEngine } from '../../helpers/speech.js';
import { createLogger } from '../../../src/system/observe/log.js';
import { WorkerHooks } from '../../../src/system/workers.js';
import { wavHeader } from '../../../src/adapters/wav.js';
import { SttWorker, type SttProfile } from '../../../src/workers/speech/stt.js';
import { alive, until } from '../../helpers/until.js';
import { baseStart } from '../../helpers/workerStart.js';

const cacheDir = process.env.SERVICE_DECK_CACHE_DIR ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'service-deck');
const profile = { id: 'stt-1', revision: 1, name: 'listener', category: 'stt', params: { backend: 'pocketsphinx', threads: 2 } } as unknown as SttProfile;
/** The supervisor's start order for start `generation` of the profile. */
const order = (generation: number) => ({ type: 'worker.start' as const, start: baseStart({ generation, profileId: profile.id, revision: profile.revision }, profile) });

function setUp(t: Test, env: NodeJS.ProcessEnv = process.env) {
  const reports: Array<Record<string, unknown>> = [];
  const workers = new WorkerHooks();
  const worker = new SttWorker({ workers, log: createLogger({ level: 'silent' }), lookup: { env, cacheDir }, env });
  // Alone, without a supervisor: its reports come here.
  worker.runAlone((event) => void reports.push(event as Record<string, unknown>));
  t.teardown(async () => {
    const { launch } = worker.actor.getSnapshot().context;
    if (launch) {
      worker.unload(launch.generation, 'test end');
      await worker.gone(launch.generation);
    }
    worker.stop();
  });
  return { worker, workers, reports };
}


t.test('load once, transcribe twice in one process, unload on command', async (t) => {
  const { worker, reports } = setUp(t);
  worker.actor.send(order(1));
  await worker.ready(1);
  const pid = worker.describe()?.pid;
  t.ok(pid && alive(pid), 'the engine runs');
  t.same(reports.map((r) => r.type), ['worker.started', 'worker.loaded'], 'reported to the supervisor');
  t.match(reports[0], { kind: 'stt', generation: 1, pid });
  const dir = t.testdir();
  const first = await worker.transcribe(1, await speechFile(dir, 'hello world this is a test', 'first.wav'), 'en');
  const second = await worker.transcribe(1, await speechFile(dir, 'good morning how are you', 'second.wav'), 'en');
  t.match(first, /hello|world|test/, `the first recording: "${first}"`);
  t.match(second, /morning|how|are|you/, `the second recording: "${second}"`);
  t.equal(worker.describe()?.pid, pid, 'the same process answered both: the model stayed loaded');
  worker.unload(1, 'endpoint stop');
  const unloaded = await until('the worker to report its unload', async () => reports.find((r) => r.type === 'worker.unloaded'));
  t.match(unloaded, { kind: 'stt', generation: 1 }, 'the worker reports its own unload');
  t.notOk(alive(pid!), 'only once its process is gone');
  t.equal(worker.describe(), undefined, 'unloaded');
  t.notOk(reports.some((r) => r.type === 'worker.exited'), 'an unload we asked for is not an exit');
  await t.rejects(worker.transcribe(1, NO_SAMPLES, 'en'), /not running/, 'no transcription without a worker');
});

t.test('an engine that dies is reported at once and the next start loads again', async (t) => {
  const { worker, reports } = setUp(t);
  worker.actor.send(order(1));
  await worker.ready(1);
  const pid = worker.describe()!.pid!;
  process.kill(pid, 'SIGKILL');
  await until('the exit report', async () => reports.find((r) => r.type === 'worker.exited'));
  t.match(reports.find((r) => r.type === 'worker.exited'), { kind: 'stt', generation: 1, message: /SIGKILL/ });
  t.equal(worker.describe(), undefined);
  worker.actor.send(order(2));
  await worker.ready(2);
  t.equal(await worker.transcribe(2, NO_SAMPLES, 'en'), '', 'the new engine answers');
});

t.test('the samples go from the file to the engine as it reads them, never the whole recording in memory', async (t) => {
  const dir = t.testdir();
  const engine = await stalledEngine(dir);
  const { worker } = setUp(t, { ...process.env, SERVICE_DECK_POCKETSPHINX: engine.binary });
  worker.actor.send(order(1));
  await worker.ready(1);
  // An 8 MiB recording, made on disk (sparse) so that this process never holds its bytes.
  const bytes = 8 * 1024 * 1024 - 44;
  const file = path.join(dir, 'recording.wav');
  await writeFile(file, wavHeader(bytes, 16_000));
  const handle = await open(file, 'r+');
  await handle.truncate(44 + bytes);
  await handle.close();
  const before = process.memoryUsage().arrayBuffers;
  const heard = worker.transcribe(1, { file, offset: 44, bytes }, 'en');
  await until('the engine to have the byte count and stop reading', async () => (engine.asked() ? true : undefined));
  const held = process.memoryUsage().arrayBuffers - before;
  t.ok(held < 2 * 1024 * 1024, `while the engine does not read, ${(held / 2 ** 20).toFixed(2)} MiB of buffers are held for it (the recording has 8 MiB; at most 2 MiB)`);
  await engine.go();
  t.equal(await heard, String(bytes), 'the engine got the samples and nothing else');
  // Recording after recording on the same engine: nothing is left listening on its stdin.
  const warnings: string[] = [];
  const onWarning = (warning: Error) => warnings.push(warning.message);
  process.on('warning', onWarning);
  t.teardown(() => process.off('warning', onWarning));
  for (let i = 0; i < 12; i += 1) t.equal(await worker.transcribe(1, { file, offset: 44, bytes: 32_000 }, 'en'), '32000', `recording ${i + 2}`);
  await new Promise((resolve) => setImmediate(resolve));
  t.same(warnings, [], 'no listener leaks: no MaxListenersExceededWarning after 13 recordings');
});
