// The prompt enhancer's run (spec 4.7) through the real service: installed from a local hub
// (test/helpers/hub.ts), run on the real llama-server with a generated tiny model (and a generated
// tiny projector for i2i), before the image worker (sd-cli's stand-in records the prompt it got).
// Checked: the JSON schema makes the tiny model's random weights answer `{ prompt, wh_ratio }`;
// sd-cli gets the rewrite; the enhancer process is gone before sd-cli starts; a loaded chat worker
// is unloaded once and not started again in between; every failure is 502 enhancer_failed with
// the job folder gone and no sd-cli run; the preview and the image test's accept/keep; the prompt
// and its rewrite in no log line. On the stand-in llama-server, an enhancer process that outlives
// SIGKILL: the job goes on once it is lost and chat gets the GPUs after it, and a client that
// leaves while the job waits for it ends the job at once.
import { readFileSync } from 'node:fs';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t, { type Test } from 'tap';
import { pngChunk } from '../../src/adapters/png.js';
import { runImageJob } from '../../src/workers/image/imageJob.js';
import type { ImageProfile } from '../../src/workers/image/image.js';
import { build, tempDir, TOKEN, type BuildOptions, type Built } from '../helpers/build.js';
import { startHub } from '../helpers/hub.js';
import { countSubscriptions } from '../helpers/lifecycle.js';
import { fakeLlamaServerIn, llamaServerPath, tinyModelIn, tinyProjectorIn } from '../helpers/llama.js';
import { alive, until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const REPO = 'test-org/tiny-enhancer';
const PROMPT = 'a lighthouse on a cliff at dusk';

interface Run {
  pid: number;
  args: string[];
}

/** A tiny real PNG for the reference images. */
function png(width = 8, height = 8, fill = 0x80): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;
  const rows = Buffer.alloc((width + 1) * height, fill);
  for (let y = 0; y < height; y++) rows[y * (width + 1)] = 0;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), pngChunk('IHDR', ihdr), pngChunk('IDAT', deflateSync(rows)), pngChunk('IEND', Buffer.alloc(0))]);
}

/** Two simulated GPUs (no nvidia-smi: the probe reads this inventory, which shows no process). */
const TWO_GPUS = JSON.stringify([
  { uuid: 'GPU-aaaaaaaa-0000-0000-0000-000000000001', name: 'sim', memoryTotalMiB: 24576 },
  { uuid: 'GPU-bbbbbbbb-0000-0000-0000-000000000002', name: 'sim', memoryTotalMiB: 24576 },
]);

interface Setup {
  b: Built;
  model: string;
  profile: { id: string; revision: number };
  client: OpenAI;
}

/**
 * A service with the tiny enhancer installed from the local hub for both tasks, and a published
 * image profile with both tasks on (unless `tasks` says otherwise). `enhancerModel` replaces the
 * tiny GGUF (a broken model); `context` the recipes' context.
 */
async function setUp(
  t: Test,
  options: {
    enhancerModel?: (tiny: Buffer) => Buffer;
    projectorOutput?: number;
    context?: number;
    tasks?: { t2i: boolean; i2i: boolean };
    gpus?: string;
    device?: string;
    /** Another llama-server (a stand-in) for the enhancer and chat. */
    llamaServer?: string;
    enhancerLimits?: BuildOptions['enhancerLimits'];
    env?: NodeJS.ProcessEnv;
  } = {},
): Promise<Setup> {
  const server = await llamaServerPath();
  const dir = await tempDir(t);
  // The tiny model with the closing quote favoured: its random rewrites end within a few dozen characters.
  const tiny = await readFile(await tinyModelIn(dir, 'tiny.gguf', { charBias: { '"': 3 } }));
  const projector = await readFile(await tinyProjectorIn(dir, 'tiny-mmproj.gguf', { output: options.projectorOutput ?? 64 }));
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'tiny.gguf', options.enhancerModel?.(tiny) ?? tiny);
  hub.put(REPO, 'main', 'tiny-mmproj.gguf', projector);
  const recipes = path.join(dir, 'recipes.json');
  const context = options.context ?? 8192;
  await writeFile(
    recipes,
    JSON.stringify({
      t2i: { repo: REPO, revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }], context },
      i2i: { repo: REPO, revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }, { path: 'tiny-mmproj.gguf', role: 'mmproj' }], context },
    }),
  );
  const b = await build(t, {
    env: { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_GPUS: options.gpus ?? 'none', SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_LLAMA_SERVER: options.llamaServer ?? server, ...options.env },
    ...(options.enhancerLimits ? { enhancerLimits: options.enhancerLimits } : {}),
  });
  for (const task of ['t2i', 'i2i'] as const) {
    t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/install', { task })).status, 202, `install ${task}`);
    await until(`${task} installed`, async () => (b.service.enhancers.view()[task].state === 'installed' ? true : undefined), 30_000);
    await b.service.enhancers.settled();
  }
  const model = path.join(dir, 'painter.gguf');
  await writeFile(model, 'ok');
  const created = await b.admin('POST', '/api/v1/profiles', {
    name: 'painter',
    category: 'image',
    params: { model, width: 64, height: 64, steps: 2, seed: 7, referenceImages: 2 },
  });
  const { id } = (await created.json()) as { id: string };
  const tasks = options.tasks ?? { t2i: true, i2i: true };
  const chosen = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', {
    id,
    revision: 1,
    prompt_enhancer: { t2i: tasks.t2i ? null : false, i2i: tasks.i2i ? null : false, device: options.device ?? 'auto' },
  });
  const profile = (await chosen.json()) as { id: string; revision: number; executable: boolean; blockers: string[] };
  t.same(profile.blockers, [], 'installed: no blocker');
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  await b.startEndpoint();
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0 });
  return { b, model, profile, client };
}

const runs = async (model: string): Promise<Run[]> =>
  (await readFile(`${model}.runs.jsonl`, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Run);
/** The API error a request ended with (it must end with one). */
async function apiError(request: Promise<unknown>) {
  const error = await request.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof OpenAI.APIError)) throw new Error(`expected an API error, got ${String(error)}`);
  return error;
}
const promptOf = (run: Run) => run.args[run.args.indexOf('-p') + 1];

/** A published chat profile `talker` on the tiny model, its worker loaded by one answer. */
async function loadChat(t: Test, b: Built, client: OpenAI): Promise<void> {
  const dir = await tempDir(t);
  const chatModel = await tinyModelIn(dir, 'chat.gguf');
  const chat = (await (await b.admin('POST', '/api/v1/profiles', { name: 'talker', category: 'chat', params: { model: chatModel, context: 512 } })).json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id: chat.id, enabled: true });
  await client.chat.completions.create({ model: 'talker', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
}

/** The pids the enhancer started, and whether any was still alive when the image process appeared. */
function watchOrder(b: Built) {
  const enhancerPids: number[] = [];
  const overlaps: number[] = [];
  const enhancer = b.service.enhancer.actor.subscribe((s) => {
    const pid = s.context.pid;
    if (pid !== null && !enhancerPids.includes(pid)) enhancerPids.push(pid);
  });
  const image = b.service.image.actor.subscribe((s) => {
    if (s.context.pid === null) return;
    for (const pid of enhancerPids) if (alive(pid) && !overlaps.includes(pid)) overlaps.push(pid);
  });
  return {
    enhancerPids,
    overlaps,
    stop: () => {
      enhancer.unsubscribe();
      image.unsubscribe();
    },
  };
}

t.test('t2i: the rewrite reaches sd-cli, the enhancer ends first, chat is unloaded once', async (t) => {
  const { b, model, client } = await setUp(t);
  await loadChat(t, b, client);
  const unloads: string[] = [];
  const starts: string[] = [];
  b.service.supervisor.on('worker.unload', (e) => unloads.push(e.kind));
  // The job's grant starts the enhancer; its image step's grant (after the answer) the image worker.
  b.service.supervisor.on('gpu.granted', (e) => {
    if (e.enhancer) starts.push('enhancer');
    else if (e.start) starts.push(e.step ? `${e.worker} step` : e.worker);
  });
  const chatLaunches = new Set<number>();
  const chatWatch = b.service.chat.actor.subscribe((s) => {
    if (s.context.launch) chatLaunches.add(s.context.launch.generation);
  });
  const order = watchOrder(b);
  const began = Date.now();
  const image = await client.images.generate({ model: 'painter', prompt: PROMPT });
  const took = Date.now() - began;
  order.stop();
  chatWatch.unsubscribe();
  const revised = image.data?.[0]?.revised_prompt;
  t.type(revised, 'string');
  t.ok(revised && revised.length > 0 && revised.length <= 1000, `a rewrite of ${revised?.length} characters`);
  const body = image as unknown as { service_deck: { enhancer: { wh_ratio: number | null }; size: string } };
  t.equal(body.service_deck.size, '64x64', 'the profile resolution stays, whatever wh_ratio says');
  t.ok(body.service_deck.enhancer !== null, `wh_ratio ${body.service_deck.enhancer.wh_ratio}`);
  const [run] = await runs(model);
  t.equal(promptOf(run!), revised, 'sd-cli received the rewritten prompt');
  t.equal(order.enhancerPids.length, 1, 'one enhancer process');
  t.same(order.overlaps, [], 'the enhancer process had ended before sd-cli started');
  t.same(unloads.filter((k) => k === 'chat'), ['chat'], 'chat was unloaded once');
  t.same(starts, ['enhancer', 'image step'], 'nothing else started between the enhancer and the image');
  t.equal(chatLaunches.size, 1, 'the chat worker was not started again in between');
  t.equal(b.service.enhancer.describe(), undefined, 'no enhancer left loaded');
  t.same(await readdir(path.join(b.stateDir, 'jobs')), [], 'the job folder is gone');
  t.same((await readdir(path.join(b.stateDir, 'runtime'))).filter((n) => n.startsWith('enhancer-')), [], 'its key and pid files are gone');
  const log = b.logLines.join('\n');
  t.notOk(log.includes(PROMPT), 'the prompt is in no log line');
  t.notOk(revised && log.includes(revised), 'the rewrite is in no log line');
  t.comment(`image with the enhancer on the tiny model: ${took} ms`);
});

/**
 * The enhancer's command line and environment, read from /proc once its process has exec'd
 * llama-server (between fork and exec the child still shows the service's own), and whether the
 * chat worker's process was alive then.
 */
function watchEnhancerProcess(b: Built) {
  const seen: Array<{ args: string[]; cudaVisible: string | undefined; chatAlive: boolean }> = [];
  let pids = new Set<number>();
  const read = (pid: number) => {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (!args.includes('--api-key-file')) return false;
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
      // In the instant of an exec the environment may read empty: read again.
      if (environ === '') return false;
      const env = environ.split('\0');
      const cuda = env.find((line) => line.startsWith('CUDA_VISIBLE_DEVICES='));
      const chat = b.service.chat.actor.getSnapshot().context.pid;
      seen.push({ args, cudaVisible: cuda?.slice('CUDA_VISIBLE_DEVICES='.length), chatAlive: chat !== null && alive(chat) });
      return true;
    } catch {
      return true;
    }
  };
  const watch = b.service.enhancer.actor.subscribe((s) => {
    const pid = s.context.pid;
    if (pid === null || pids.has(pid)) return;
    pids = new Set([...pids, pid]);
    const poll = setInterval(() => {
      if (read(pid)) clearInterval(poll);
    }, 2);
  });
  return { seen, stop: () => watch.unsubscribe() };
}

t.test('the enhancer device on a simulated inventory: "cpu" sees no GPU and leaves chat loaded until the image; a GPU UUID sees that GPU alone', async (t) => {
  const { b, model, profile, client } = await setUp(t, { gpus: TWO_GPUS, device: 'cpu', tasks: { t2i: true, i2i: false } });
  await loadChat(t, b, client);
  const events: string[] = [];
  b.service.supervisor.on('worker.unload', (e) => events.push(`unload ${e.kind}`));
  b.service.supervisor.on('gpu.granted', (e) => events.push(`grant ${e.worker}${e.step ? ' image step' : ''} gpus=${e.gpus.length}`));
  const cpu = watchEnhancerProcess(b);
  const image = await client.images.generate({ model: 'painter', prompt: PROMPT });
  cpu.stop();
  t.ok(image.data?.[0]?.revised_prompt, 'the image was made from a rewrite');
  const [onCpu] = cpu.seen;
  t.equal(onCpu?.args[onCpu.args.indexOf('-ngl') + 1], '0', 'cpu: -ngl 0');
  t.equal(onCpu?.cudaVisible, '', 'cpu: no CUDA device visible');
  t.equal(onCpu?.chatAlive, true, 'the chat worker was still loaded when the enhancer started');
  t.same(events, ['grant image gpus=0', 'unload enhancer', 'unload chat', 'grant image image step gpus=2', 'unload image'], 'chat was unloaded for the image, not for the enhancer');
  t.equal(promptOf((await runs(model))[0]!), image.data?.[0]?.revised_prompt);

  const saved = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', {
    id: profile.id,
    revision: profile.revision,
    prompt_enhancer: { t2i: null, i2i: false, device: 'GPU-bbbbbbbb-0000-0000-0000-000000000002' },
  });
  t.equal(saved.status, 200);
  const onGpu = watchEnhancerProcess(b);
  await client.images.generate({ model: 'painter', prompt: PROMPT });
  onGpu.stop();
  const [one] = onGpu.seen;
  t.equal(one?.cudaVisible, 'GPU-bbbbbbbb-0000-0000-0000-000000000002', 'a GPU UUID: that GPU alone is visible');
  t.ok(Number(one?.args[one.args.indexOf('-ngl') + 1]) > 0, `its layers on that GPU (-ngl ${one?.args[one.args.indexOf('-ngl') + 1]})`);
});

t.test('i2i: the projector reads the reference images; the rewrite reaches sd-cli with them', async (t) => {
  const { b, model, client } = await setUp(t);
  const order = watchOrder(b);
  const edit = await client.images.edit({
    model: 'painter',
    prompt: 'make the sky green',
    image: [await toFile(png(8, 8, 0x20), 'a.png', { type: 'image/png' }), await toFile(png(8, 8, 0xe0), 'b.png', { type: 'image/png' })],
  });
  order.stop();
  const revised = edit.data?.[0]?.revised_prompt;
  t.ok(revised, 'a rewrite came back');
  const [run] = await runs(model);
  t.equal(promptOf(run!), revised);
  t.equal(run!.args.filter((a) => a === '-r').length, 2, 'both references went on to sd-cli');
  t.same(order.overlaps, [], 'the enhancer had ended before sd-cli started');
  t.same(await readdir(path.join(b.stateDir, 'jobs')), []);
});

/**
 * A service on two simulated GPUs whose enhancer (on the stand-in llama-server, which answers its
 * JSON schema) leaves a process behind that holds the start's output open: the enhancer's process
 * never ends for the service, as one that outlives SIGKILL. `killLimitMs`: how long after SIGKILL
 * it is reported lost. The processes left behind are ended when the test ends.
 */
async function setUpOutliving(t: Test, killLimitMs: number, tasks: { t2i: boolean; i2i: boolean }) {
  const dir = await tempDir(t);
  const outliving = path.join(dir, 'outliving.pids');
  t.teardown(async () => {
    const pids = (await readFile(outliving, 'utf8').catch(() => '')).split('\n').filter(Boolean).map(Number);
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
  });
  const llamaServer = await fakeLlamaServerIn(dir, 'instant', undefined, outliving);
  const setup = await setUp(t, { gpus: TWO_GPUS, llamaServer, tasks, enhancerLimits: { terminationGraceMs: 100, killLimitMs }, env: { SERVICE_DECK_GPU_POLL_MS: '100' } });
  return { ...setup, outliving };
}

t.test('an enhancer process that outlives SIGKILL: the job goes on once it is lost, and the GPUs go to the next chat job', async (t) => {
  const { b, model, client, outliving } = await setUpOutliving(t, 300, { t2i: true, i2i: false });
  const chatModel = await tinyModelIn(await tempDir(t), 'chat.gguf');
  const chat = (await (await b.admin('POST', '/api/v1/profiles', { name: 'talker', category: 'chat', params: { model: chatModel, context: 512 } })).json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id: chat.id, enabled: true });
  const subscriptions = countSubscriptions(b.service.enhancer.actor);
  // Before the fix the job waited for the lost process for ever: the client gives up long before.
  const image = await client.images.generate({ model: 'painter', prompt: PROMPT }, { timeout: 30_000 });
  t.equal(image.data?.[0]?.revised_prompt, 'a rewritten prompt', "the image was made from the enhancer's rewrite");
  t.equal(promptOf((await runs(model))[0]!), 'a rewritten prompt', 'sd-cli ran once the enhancer was lost');
  t.ok((await readFile(outliving, 'utf8')).trim().length > 0, "the enhancer's process outlived SIGKILL");
  t.ok(b.service.enhancer.actor.getSnapshot().matches({ running: 'lost' }), 'the enhancer is lost');
  await until('the job folder gone', async () => ((await readdir(path.join(b.stateDir, 'jobs'))).length === 0 ? true : undefined), 15_000);
  // The lost enhancer's memory stays reserved until the GPU probe no longer shows its process on
  // its GPUs (the simulated inventory shows none): then chat gets the GPUs.
  const answer = await client.chat.completions.create({ model: 'talker', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }, { timeout: 30_000 });
  t.equal(answer.choices.length, 1, 'the next chat job was granted and answered');
  t.equal(subscriptions(), 0, "nothing is left listening on the enhancer's machine");
});

t.test('a client that leaves while its job waits for the enhancer to end: the job ends at once, its folder and upload room go once the enhancer is lost', async (t) => {
  const { b, model } = await setUpOutliving(t, 5_000, { t2i: false, i2i: true });
  const subscriptions = countSubscriptions(b.service.enhancer.actor);
  const order: string[] = [];
  b.service.enhancer.actor.on('*', (event) => {
    if (event.type === 'worker.lost') order.push('enhancer lost');
  });
  const jobs = () => Object.keys(b.service.supervisor.getSnapshot().context.jobs).length;
  const given = b.service.supervisor.subscribe(() => {
    if (order.includes('enhancer unloading') && !order.includes('reservation given back') && jobs() === 0) order.push('reservation given back');
  });
  t.teardown(() => given.unsubscribe());
  const form = new FormData();
  form.append('model', 'painter');
  form.append('prompt', 'make the sky green');
  form.append('image[]', new Blob([png()], { type: 'image/png' }), 'a.png');
  const abort = new AbortController();
  const request = fetch(`${b.apiUrl()}/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form, signal: abort.signal });
  // The enhancer answered and is being ended: the job waits for it.
  await until('the enhancer unloading', async () => (b.service.enhancer.actor.getSnapshot().matches({ running: 'unloading' }) ? true : undefined), 30_000);
  order.push('enhancer unloading');
  // Read whole, the upload's file is on disk and its reservation holds no more bytes, but is kept until its folder goes.
  t.equal(b.service.uploads.count, 1, 'the upload holds its reservation');
  t.equal((await readdir(path.join(b.stateDir, 'jobs'))).length, 1, 'and its job folder');
  abort.abort();
  t.equal(await request.then(() => 'answered', (error: unknown) => (error as Error).name), 'AbortError');
  await until('the reservation given back', async () => (order.includes('reservation given back') ? true : undefined), 15_000);
  await until('the job folder gone', async () => ((await readdir(path.join(b.stateDir, 'jobs'))).length === 0 ? true : undefined), 20_000);
  t.same(order, ['enhancer unloading', 'reservation given back', 'enhancer lost'], 'the job ended while the enhancer was still being ended; its folder went once it was lost');
  t.same([b.service.uploads.count, b.service.uploads.reserved], [0, 0], 'the upload room is released');
  t.same(await runs(model), [], 'sd-cli never ran');
  t.equal(subscriptions(), 0, "nothing is left listening on the enhancer's machine");
});

t.test('a profile with the task off makes its image without the enhancer', async (t) => {
  const { b, model, client } = await setUp(t, { tasks: { t2i: false, i2i: true } });
  const order = watchOrder(b);
  const image = await client.images.generate({ model: 'painter', prompt: PROMPT });
  order.stop();
  t.equal(image.data?.[0]?.revised_prompt, undefined);
  t.equal(promptOf((await runs(model))[0]!), PROMPT);
  t.same(order.enhancerPids, [], 'no enhancer ran');
});

t.test('a broken enhancer model (no GGUF): refused by the memory check with 502 enhancer_failed, no image', async (t) => {
  const { b, model, client } = await setUp(t, { enhancerModel: () => Buffer.from('GGUF but not really a model') });
  const failed = await apiError(client.images.generate({ model: 'painter', prompt: PROMPT }));
  t.equal(failed.status, 502);
  t.equal((failed.error as { code?: string }).code, 'enhancer_failed');
  t.match(failed.message, /prompt enhancer cannot start: its model .* cannot be read/);
  t.same(await runs(model), [], 'sd-cli never ran: the original prompt was not used instead');
  t.same(await readdir(path.join(b.stateDir, 'jobs')), []);
  t.notOk(b.logLines.join('\n').includes(PROMPT));
});

t.test('the enhancer process dies loading (a projector that does not fit the model): 502 enhancer_failed', async (t) => {
  const { b, model, client } = await setUp(t, { projectorOutput: 32 });
  const order = watchOrder(b);
  const failed = await apiError(client.images.edit({ model: 'painter', prompt: 'make the sky green', image: await toFile(png(), 'a.png', { type: 'image/png' }) }));
  order.stop();
  t.equal(failed.status, 502);
  t.equal((failed.error as { code?: string }).code, 'enhancer_failed');
  t.match(failed.message, /^502 The prompt enhancer failed: The prompt enhancer could not load its model/);
  t.equal(order.enhancerPids.length, 1, 'the enhancer process had started');
  t.notOk(alive(order.enhancerPids[0]!), 'and is gone');
  t.same(await runs(model), [], 'sd-cli never ran');
  t.same(await readdir(path.join(b.stateDir, 'jobs')), [], 'the job folder is gone');
  t.equal(b.service.enhancer.describe(), undefined);
  t.comment(failed.message);
});

t.test('an answer that cannot be had (context too small for the request): 502 enhancer_failed', async (t) => {
  const { b, model, client } = await setUp(t, { context: 256 });
  const failed = await apiError(client.images.generate({ model: 'painter', prompt: PROMPT }));
  t.equal(failed.status, 502);
  t.equal((failed.error as { code?: string }).code, 'enhancer_failed');
  t.match(failed.message, /The prompt enhancer failed: the enhancer answered HTTP 400$/, "the client reads the status, not the worker's words");
  // The operator reads llama-server's own words in the log, without the prompt.
  const said = b.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'the prompt enhancer answered with an error');
  t.match(said, [{ level: 40, component: 'enhancer', worker_status: 400, worker_error: /exceeds the available context size/ }], "llama-server's message is logged at warn");
  t.notOk(b.logLines.join('\n').includes(PROMPT), 'the prompt is in no log line');
  t.same(await runs(model), []);
  t.same(await readdir(path.join(b.stateDir, 'jobs')), []);
  await until('enhancer unloaded', async () => (b.service.enhancer.describe() === undefined ? true : undefined), 15_000);
});

t.test('files gone after the blocker check: 502 enhancer_failed before any process', async (t) => {
  const { b, model, profile } = await setUp(t);
  const snapshot = b.service.profiles.get(profile.id) as ImageProfile;
  // The model both tasks share, in the store.
  await rm((await b.service.enhancers.installed('t2i'))!.model);
  const failed = (await runImageJob(b.service, snapshot, { prompt: PROMPT }, { source: 'api', whenBusy: 'wait', signal: new AbortController().signal }).then(
    () => ({ statusCode: 200, code: 'none', message: 'an image was made' }),
    (error: unknown) => error,
  )) as { statusCode: number; code: string; message: string };
  t.equal(failed.statusCode, 502);
  t.equal(failed.code, 'enhancer_failed');
  t.match(failed.message, /not installed/);
  t.same(await runs(model), []);
  t.same(await readdir(path.join(b.stateDir, 'jobs')), []);
});

t.test('preview: original and suggestion; the image test accepts or keeps it, exactly that job', async (t) => {
  const { b, model, profile } = await setUp(t);
  const previewed = await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: profile.id, prompt: PROMPT });
  t.equal(previewed.status, 200);
  const preview = (await previewed.json()) as { original: string; suggestion: string; wh_ratio: number | null; task: string };
  t.equal(preview.original, PROMPT);
  t.ok(preview.suggestion.length > 0);
  t.equal(preview.task, 't2i');
  t.ok(preview.wh_ratio === null || preview.wh_ratio > 0);
  const shown = (await (await b.admin('GET', '/api/v1/prompt-enhancers')).json()) as { preview: { original: string; suggestion: string; profile_id: string } };
  t.same([shown.preview.original, shown.preview.suggestion, shown.preview.profile_id], [PROMPT, preview.suggestion, profile.id], 'GET shows the last preview');
  t.same(await runs(model), [], 'a preview makes no image');

  const testWith = async (body: Record<string, unknown>) => {
    const started = await b.admin('POST', '/api/v1/image-tests', { profile_id: profile.id, prompt: PROMPT, ...body });
    t.equal(started.status, 202, JSON.stringify(body));
    await until('image test done', async () => {
      const job = b.service.imageTests.current();
      return job && job.phase !== 'waiting' && job.phase !== 'running' ? job : undefined;
    });
    return b.service.imageTests.current()!;
  };
  const order = watchOrder(b);
  const accepted = await testWith({ preview: 'accept' });
  t.same([accepted.phase, accepted.enhancer], ['done', 'preview']);
  const kept = await testWith({ preview: 'keep' });
  t.same([kept.phase, kept.enhancer], ['done', 'preview']);
  t.same(order.enhancerPids, [], 'neither job was enhanced again');
  const enhanced = await testWith({});
  order.stop();
  t.same([enhanced.phase, enhanced.enhancer], ['done', 'ran'], 'the next job without a choice is enhanced again');
  t.equal(order.enhancerPids.length, 1);
  const prompts = (await runs(model)).map(promptOf);
  t.same(prompts.slice(0, 2), [preview.suggestion, PROMPT], 'accept used the suggestion, keep the original');
  t.equal(prompts[2], enhanced.enhanced?.prompt, 'the third got its own rewrite');
});

t.test('preview with reference images (multipart) is i2i', async (t) => {
  const { b, profile } = await setUp(t);
  const form = new FormData();
  form.append('profile_id', profile.id);
  form.append('prompt', 'make the sky green');
  form.append('image[]', new Blob([png()], { type: 'image/png' }), 'a.png');
  const response = await fetch(`${b.adminUrl}/api/v1/prompt-enhancers/preview`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', cookie: b.session().cookie, 'x-csrf-token': b.session().csrf },
    body: form,
  });
  t.equal(response.status, 200);
  const preview = (await response.json()) as { task: string; suggestion: string };
  t.equal(preview.task, 'i2i');
  t.ok(preview.suggestion.length > 0);
});

t.test('the preview and the choice in the image test refuse what they cannot do', async (t) => {
  const { b, profile } = await setUp(t);
  const code = async (response: Response) => [response.status, ((await response.json()) as { error: { code: string } }).error.code];
  t.same(await code(await b.admin('POST', '/api/v1/image-tests', { profile_id: profile.id, prompt: PROMPT, preview: 'accept' })), [409, 'preview_mismatch'], 'no preview yet');
  t.same(await code(await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: profile.id })), [400, 'invalid_value'], 'no prompt');
  t.same(await code(await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: profile.id, prompt: 'x', extra: 1 })), [400, 'unknown_parameter']);
  t.same(await code(await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: 'p-none', prompt: 'x' })), [404, 'profile_not_found']);
  t.same(await code(await b.admin('POST', '/api/v1/image-tests', { profile_id: profile.id, prompt: PROMPT, preview: 'maybe' })), [400, 'invalid_value']);
  t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: profile.id, prompt: PROMPT })).status, 200);
  t.same(await code(await b.admin('POST', '/api/v1/image-tests', { profile_id: profile.id, prompt: 'another prompt', preview: 'accept' })), [409, 'preview_mismatch'], 'another prompt');
  const form = new FormData();
  form.append('profile_id', profile.id);
  form.append('prompt', 'x');
  form.append('mask', new Blob([png()], { type: 'image/png' }), 'm.png');
  const masked = await fetch(`${b.adminUrl}/api/v1/prompt-enhancers/preview`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', cookie: b.session().cookie, 'x-csrf-token': b.session().csrf },
    body: form,
  });
  t.same(await code(masked), [400, 'invalid_value'], 'a mask');
  // While an image test holds the reservation, the preview is a conflict at once.
  const hold = b.service.enhancerPreviews.run(b.service.profiles.get(profile.id) as ImageProfile, { prompt: PROMPT }, new AbortController().signal);
  const busy = await b.admin('POST', '/api/v1/prompt-enhancers/preview', { profile_id: profile.id, prompt: PROMPT });
  t.same(await code(busy), [409, 'image_busy']);
  await hold;
});
