// The service's part of the GPU check (scripts/gpu-check.sh runs it after the build): the real
// service (`service-deck serve`, the real probe, no SERVICE_DECK_GPUS) against what nvidia-smi
// itself says, on one machine with NVIDIA GPUs. It writes, into the output folder:
//   3-probe.json    the status's `gpus` against nvidia-smi's own figures
//   4-fit.json      a generated model of a few GiB: the memory check's and llama-fit-params' plan
//                   (GPU layers, forecast per GPU) against the memory nvidia-smi shows once loaded
//   5-chat.txt      chat A/B: the chat worker's own command line started by hand ("direct") against
//                   the service, on the same binary and model, in turns: tokens per second of one
//                   stream and of the slot count, time to first token, latency, 8 clients
//   6-foreign.json  the direct llama-server seen as a foreign GPU process (the service unloads its
//                   own chat worker and never signals the foreign one); a TTS worker on the GPU and
//                   the CUDA_VISIBLE_DEVICES it was given, read from /proc
//   service.log     the service's log
// and appends one line per step, then `result: PASS` or `result: FAIL`, to 7-summary.txt. It exits
// 0 only when every step passed.
//
// `--dry-run` runs the same steps on a machine without a GPU: scripts/gpu-check.sh puts the
// nvidia-smi stand-in (test/fixtures/fake-nvidia-smi.mjs) on PATH, the build is the CPU one and
// the model small. Checks that only real hardware can answer (the fit on device memory, memory
// that nvidia-smi attributes to a CUDA process, the speed ratio) are recorded but not required.
//
// Run: node dist/bench/gpuCheck.js --out DIR [--dry-run] [--limit-s N] (scripts/gpu-check.sh
// builds it and sets SERVICE_DECK_CACHE_DIR to where llama-server was built).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { appendFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { writeTinyModel, type TinyModelOptions } from '../src/adapters/tinyModel.js';
import { freePort } from '../test/helpers/build.js';
import { chat, closeAgents, healthy, measure, MESSAGES, mean, rateSpread, side, spread, table, type Figure, type Stint } from './chatClient.js';
import { ROOT, stop } from './lib.js';

const { values } = parseArgs({
  options: { out: { type: 'string' }, 'dry-run': { type: 'boolean', default: false }, 'limit-s': { type: 'string' } },
});
const OUT = path.resolve(values.out ?? 'gpu-out');
const DRY = values['dry-run'] === true;
const LIMIT_MS = Number(values['limit-s'] ?? (DRY ? 240 : 300)) * 1000;
const PASSWORD = 'gpu check password 0123';
const TOKEN = 'sd-gpu-check-token-0123456789abcdefghijklmn';
const NAME = 'gpu-check';
/**
 * The model: on a GPU a few GiB of f32 weights (6 blocks of 3072 x 8192, about 2.6 GiB), so the
 * fit and the forecast handle real sizes; in the dry run the CPU benchmark's small model.
 */
const MODEL: TinyModelOptions = DRY
  ? { embedding: 512, layers: 6, heads: 8, seed: 7 }
  : { embedding: 3072, layers: 6, heads: 24, feedForward: 8192, seed: 11 };
const CONTEXT = 8192;
const SLOTS = DRY ? 2 : 4;
/** One stint per side and turn (two turns each): sized so the A/B takes about a minute on an H100. */
const STINT: Stint = {
  model: NAME,
  slots: SLOTS,
  warmUp: 3,
  latency: DRY ? 10 : 40,
  ttft: DRY ? 5 : 15,
  ttftTokens: 4,
  oneStreams: DRY ? 1 : 3,
  batches: DRY ? 1 : 3,
  streamTokens: DRY ? 64 : 256,
  clients: 8,
  clientRequests: DRY ? 1 : 4,
  clientTokens: 8,
};
/** How long the service has to notice a foreign GPU process and unload its own chat worker. */
const FOREIGN_LIMIT_MS = 30_000;

const began = performance.now();
const elapsed = () => `${((performance.now() - began) / 1000).toFixed(1)} s`;
const say = (line: string) => console.log(`gpu-check: ${line}`);

// ---------------------------------------------------------------------------------------------
// What nvidia-smi and /proc say

interface SmiGpu {
  uuid: string;
  name: string;
  totalMiB: number;
  freeMiB: number;
  usedMiB: number;
}
interface SmiApp {
  gpu: string;
  pid: number;
  usedMiB: number;
  name: string;
}

function nvidiaSmi(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('nvidia-smi', args, { timeout: 15_000, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error) reject(new Error(`nvidia-smi ${args.join(' ')}: ${error.message.split('\n')[0]} ${stderr.trim()}`));
      else resolve(stdout);
    });
  });
}

const csv = (text: string) =>
  text
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => line.split(',').map((cell) => cell.trim()));

async function smiGpus(): Promise<SmiGpu[]> {
  const text = await nvidiaSmi(['--query-gpu=uuid,name,memory.total,memory.free,memory.used', '--format=csv,noheader,nounits']);
  return csv(text).map(([uuid = '', name = '', total, free, used]) => ({ uuid, name, totalMiB: Number(total), freeMiB: Number(free), usedMiB: Number(used) }));
}

async function smiApps(): Promise<SmiApp[]> {
  const text = await nvidiaSmi(['--query-compute-apps=gpu_uuid,pid,used_memory,process_name', '--format=csv,noheader,nounits']);
  return csv(text).map(([gpu = '', pid, used, name = '']) => ({ gpu, pid: Number(pid), usedMiB: Number(used), name }));
}

async function procArgv(pid: number): Promise<string[]> {
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').filter((arg, i, all) => arg !== '' || i < all.length - 1);
}

async function procEnv(pid: number): Promise<Record<string, string>> {
  const text = await readFile(`/proc/${pid}/environ`, 'utf8');
  return Object.fromEntries(
    text
      .split('\0')
      .filter(Boolean)
      .map((item) => [item.slice(0, item.indexOf('=')), item.slice(item.indexOf('=') + 1)]),
  );
}

const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// The service, as an operator runs it, and its admin API

interface StatusGpu {
  uuid: string;
  name: string;
  memoryTotalMiB: number;
  memoryFreeMiB: number;
  processes: Array<{ pid: number; usedMiB: number; own: boolean }>;
}
interface StatusWorker {
  kind: string;
  state: string;
  pid: number | null;
  gpus: string[];
  profile_id: string | null;
  last?: string | null;
  plan?: {
    gpu_layers: number | null;
    gpu_layer_limit: number | null;
    tensor_split: number[] | null;
    fit: string;
    fit_tool: string | null;
    forecast: { ram_mib: number; gpu_mib: Record<string, number>; basis: string };
    gpu_budget: Array<{ uuid: string; free_mib: number; reserve_mib: number; available_mib: number; forecast_mib: number }>;
  } | null;
}
interface Status {
  gpus: StatusGpu[];
  gpu_probe: { source: string; problem: string | null };
  workers: StatusWorker[];
}

class Admin {
  private cookie = '';
  private csrf = '';
  constructor(readonly base: string) {}

  async call<T>(method: 'GET' | 'POST', url: string, body?: unknown): Promise<T> {
    const response = await fetch(`${this.base}${url}`, {
      method,
      headers: {
        'x-service-deck': '1',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(this.cookie ? { cookie: this.cookie, 'x-csrf-token': this.csrf } : {}),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    if (response.status >= 300) throw new Error(`${method} ${url}: ${response.status} ${text}`);
    if (url === '/api/v1/session') this.cookie = (response.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    return (text ? JSON.parse(text) : {}) as T;
  }

  async login(): Promise<void> {
    this.csrf = (await this.call<{ csrfToken: string }>('POST', '/api/v1/session', { password: PASSWORD })).csrfToken;
  }

  status(): Promise<Status> {
    return this.call<Status>('GET', '/api/v1/endpoint');
  }

  async publish(profile: { name: string; category: string; params: Record<string, unknown> }): Promise<string> {
    const { id } = await this.call<{ id: string }>('POST', '/api/v1/profiles', profile);
    await this.call('POST', '/api/v1/endpoint/profile', { id, enabled: true });
    return id;
  }
}

async function waitFor<T>(what: string, limitMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const until = Date.now() + limitMs;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await sleep(200);
  }
  throw new Error(`${what}: not within ${limitMs / 1000} s${last ? ` (last error: ${(last as Error).message})` : ''}`);
}

// ---------------------------------------------------------------------------------------------
// Steps: each records what it measured and what failed

interface Step {
  name: string;
  failures: string[];
  notes: string[];
}
const steps: Step[] = [];
function begin(name: string): Step {
  const step = { name, failures: [], notes: [] };
  steps.push(step);
  say(`${name} (${elapsed()})`);
  return step;
}
/** A check: recorded as a failure of the step when `ok` is false. */
function check(step: Step, ok: boolean, what: string): boolean {
  if (!ok) {
    step.failures.push(what);
    say(`  FAILED: ${what}`);
  }
  return ok;
}
const writeJson = (name: string, value: unknown) => writeFile(path.join(OUT, name), `${JSON.stringify(value, null, 2)}\n`);

const work = await mkdtemp(path.join(os.tmpdir(), 'sd-gpu-check-'));
let service: ChildProcess | undefined;
let direct: ChildProcess | undefined;
let serviceExit: Promise<number | null> | undefined;

async function startService(): Promise<Admin> {
  const uiPort = await freePort();
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (/^(PATH|HOME|TMPDIR|LANG|LD_LIBRARY_PATH|CUDA_\w+|NVIDIA_\w+|SERVICE_DECK_CACHE_DIR|SERVICE_DECK_SETPRIV|FAKE_NVIDIA_SMI_STATE)$/.test(name)) env[name] = value;
  }
  Object.assign(env, { SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN });
  const log = createWriteStream(path.join(OUT, 'service.log'));
  service = spawn(process.execPath, [path.join(ROOT, 'bin/service-deck.js'), 'serve', '--state-dir', path.join(work, 'state'), '--ui-port', String(uiPort)], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  service.stdout?.pipe(log, { end: false });
  service.stderr?.pipe(log, { end: false });
  const child = service;
  serviceExit = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  const admin = new Admin(`http://127.0.0.1:${uiPort}`);
  await waitFor('the service answers on its admin listener', 60_000, async () => {
    if (!alive(child)) throw new Error(`the service ended (${child.exitCode ?? child.signalCode}); see service.log`);
    await admin.login();
    return true;
  });
  return admin;
}

const apiPort = await freePort();
const bearer = { authorization: `Bearer ${TOKEN}` };

/** Step 3: the probe's inventory against nvidia-smi's own figures. */
async function probeStep(admin: Admin): Promise<SmiGpu[]> {
  const step = begin('3 probe: the status gpus against nvidia-smi');
  const status = await admin.status();
  const smi = await smiGpus();
  const matches = smi.map((g) => {
    const seen = status.gpus.find((s) => s.uuid === g.uuid);
    const freeTolerance = Math.max(256, g.totalMiB * 0.02);
    return {
      uuid: g.uuid,
      name: { nvidia_smi: g.name, service: seen?.name ?? null },
      total_mib: { nvidia_smi: g.totalMiB, service: seen?.memoryTotalMiB ?? null },
      free_mib: { nvidia_smi: g.freeMiB, service: seen?.memoryFreeMiB ?? null },
      ok: seen !== undefined && seen.name === g.name && seen.memoryTotalMiB === g.totalMiB && Math.abs(seen.memoryFreeMiB - g.freeMiB) <= freeTolerance,
    };
  });
  check(step, status.gpu_probe.source === 'nvidia-smi', `the probe's source is nvidia-smi (it is ${status.gpu_probe.source}${status.gpu_probe.problem ? `: ${status.gpu_probe.problem}` : ''})`);
  check(step, smi.length > 0, 'nvidia-smi lists at least one GPU');
  check(step, status.gpus.length === smi.length, `the status lists every GPU nvidia-smi lists (${status.gpus.length} against ${smi.length})`);
  const sorted = [...smi.map((g) => g.uuid)].sort();
  check(step, status.gpus.map((g) => g.uuid).join(',') === sorted.join(','), 'the status orders the GPUs by UUID');
  for (const m of matches) check(step, m.ok, `GPU ${m.uuid}: name, total and free memory as nvidia-smi says (${JSON.stringify(m)})`);
  for (const m of matches) step.notes.push(`${m.uuid} ${m.name.nvidia_smi}: total ${m.total_mib.nvidia_smi} MiB, free ${m.free_mib.nvidia_smi} MiB (service ${m.free_mib.service} MiB)`);
  await writeJson('3-probe.json', { gpu_probe: status.gpu_probe, service: status.gpus, nvidia_smi: smi, matches });
  return smi;
}

interface Loaded {
  argv: string[];
  env: Record<string, string>;
}

const chatWorker = (status: Status) => status.workers.find((w) => w.kind === 'chat' && w.state === 'loaded' && w.pid !== null);

/** Step 4: a model of a few GiB; the plan of the memory check and llama-fit-params against nvidia-smi once loaded. */
async function fitStep(admin: Admin, gpus: SmiGpu[]): Promise<Loaded> {
  const step = begin('4 fit: the memory check and llama-fit-params against the memory in use');
  const made = performance.now();
  const model = await writeTinyModel(path.join(work, 'model.gguf'), MODEL);
  const modelMiB = (await stat(model)).size / 2 ** 20;
  const generateMs = performance.now() - made;
  step.notes.push(`model ${MODEL.embedding}x${MODEL.layers} blocks, ${modelMiB.toFixed(0)} MiB of f32 weights, generated in ${(generateMs / 1000).toFixed(1)} s`);
  await admin.publish({ name: NAME, category: 'chat', params: { model, context: CONTEXT, slots: SLOTS, gpuSplit: null, gpuLayers: null } });
  const asked = performance.now();
  const probe = side('service', apiPort, bearer, SLOTS);
  await chat(probe, { model: NAME, messages: MESSAGES, max_tokens: 1 }, true);
  const firstAnswerMs = performance.now() - asked;
  const status = await admin.status();
  const worker = chatWorker(status);
  if (!worker || worker.pid === null) throw new Error('no loaded chat worker after the first answer');
  const pid = worker.pid;
  const [argv, env, apps] = await Promise.all([procArgv(pid), procEnv(pid), smiApps()]);
  const plan = worker.plan ?? null;
  const measured = apps.filter((a) => a.pid === pid);
  const forecast = plan?.forecast.gpu_mib ?? {};
  const ngl = argv[argv.indexOf('-ngl') + 1];
  const perGpu = gpus.map((g) => {
    const used = measured.find((a) => a.gpu === g.uuid)?.usedMiB ?? null;
    const predicted = forecast[g.uuid] ?? null;
    return { uuid: g.uuid, forecast_mib: predicted, measured_mib: used, forecast_over_measured: predicted !== null && used ? Number((predicted / used).toFixed(3)) : null };
  });
  check(step, plan !== null, 'the status shows the memory check plan of the chat worker');
  check(step, worker.gpus.length > 0, `the chat worker was placed on a GPU (gpus: ${JSON.stringify(worker.gpus)})`);
  check(step, env.CUDA_VISIBLE_DEVICES === worker.gpus.join(','), `its CUDA_VISIBLE_DEVICES is its GPUs in UUID order (${env.CUDA_VISIBLE_DEVICES} against ${worker.gpus.join(',')})`);
  check(step, ngl !== undefined && Number(ngl) > 0, `llama-server was given GPU layers (-ngl ${ngl})`);
  check(step, measured.length > 0, `nvidia-smi shows the chat worker (pid ${pid}) on a GPU`);
  const seenOwn = status.gpus.some((g) => g.processes.some((p) => p.pid === pid && p.own));
  check(step, seenOwn, 'the status shows the chat worker as the service\'s own GPU process');
  if (!DRY) {
    check(step, plan?.fit_tool === 'used', `the build's llama-fit-params chose the layers (fit_tool ${plan?.fit_tool})`);
    check(step, measured.every((a) => a.usedMiB > 0), 'the chat worker holds GPU memory');
  }
  step.notes.push(`first answer ${firstAnswerMs.toFixed(0)} ms (worker start and load included); -ngl ${ngl}, fit_tool ${plan?.fit_tool ?? '-'}; ${plan?.fit ?? ''}`);
  for (const g of perGpu) step.notes.push(`${g.uuid}: forecast ${g.forecast_mib ?? '-'} MiB, nvidia-smi ${g.measured_mib ?? '-'} MiB (forecast/measured ${g.forecast_over_measured ?? '-'})`);
  await writeJson('4-fit.json', {
    model: { options: MODEL, mib: Math.round(modelMiB), generate_ms: Math.round(generateMs) },
    profile: { context: CONTEXT, slots: SLOTS, gpuSplit: null, gpuLayers: null },
    first_answer_ms: Math.round(firstAnswerMs),
    worker: { pid, gpus: worker.gpus, argv, cuda_visible_devices: env.CUDA_VISIBLE_DEVICES ?? null },
    plan,
    nvidia_smi_apps: apps,
    per_gpu: perGpu,
  });
  return { argv, env };
}

/** The chat worker's own command line, less its key file, on another port. */
function directArgs(argv: string[], port: number): { binary: string; args: string[] } {
  const start = argv.findIndex((arg) => path.basename(arg) === 'llama-server');
  const [binary, ...rest] = argv.slice(Math.max(0, start));
  const args: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i] as string;
    if (arg === '--api-key-file') i++;
    else if (arg === '--port') {
      args.push('--port', String(port));
      i++;
    } else args.push(arg);
  }
  return { binary: binary ?? 'llama-server', args };
}

interface Foreign {
  pid: number;
  noticed_ms: number;
  seen_as_foreign: boolean;
  own_worker_unloaded: boolean;
  alive_after: boolean;
}

/**
 * Starts the direct llama-server and waits until it answers and the service has noticed it as a
 * foreign GPU process (its own chat worker unloaded), so the two never hold the GPU's work at once.
 */
async function startDirect(loaded: Loaded, port: number, admin: Admin): Promise<Foreign> {
  const { binary, args } = directArgs(loaded.argv, port);
  const env: NodeJS.ProcessEnv = { ...loaded.env };
  const started = performance.now();
  const child = spawn(binary, args, { env, stdio: ['ignore', 'ignore', 'ignore'] });
  direct = child;
  await healthy(port, child, 120_000);
  const pid = child.pid ?? -1;
  const seen = (status: Status) => ({
    foreign: status.gpus.some((g) => g.processes.some((p) => p.pid === pid && !p.own)),
    unloaded: chatWorker(status) === undefined,
  });
  // Both, or whatever the service had done when the limit passed.
  const last = await waitFor('the service sees the direct llama-server as foreign and unloads its chat worker', FOREIGN_LIMIT_MS, async () => {
    const now = seen(await admin.status());
    return now.foreign && now.unloaded ? now : undefined;
  }).catch(async () => seen(await admin.status()));
  return {
    pid,
    noticed_ms: Math.round(performance.now() - started),
    seen_as_foreign: last.foreign,
    own_worker_unloaded: last.unloaded,
    alive_after: alive(child),
  };
}

/** Waits until the service answers chat again (its worker loads once the foreign process is gone). */
async function serviceAnswers(): Promise<void> {
  const probe = side('service', apiPort, bearer, 1);
  await waitFor('the service answers chat again after the foreign process ended', 120_000, async () => {
    await chat(probe, { model: NAME, messages: MESSAGES, max_tokens: 1 }, true);
    return true;
  });
}

/** Step 5 (and the foreign half of step 6): direct and service in turns, S D S D. */
async function chatStep(admin: Admin, loaded: Loaded): Promise<Foreign[]> {
  const step = begin('5 chat: direct llama-server against the service, same binary, model and command line');
  const directPort = await freePort();
  const sides = [side('direct', directPort, {}, SLOTS), side('direct again', directPort, {}, SLOTS), side('service', apiPort, bearer, SLOTS)] as const;
  const [d, again, v] = sides;
  const foreign: Foreign[] = [];
  await measure(v, STINT);
  for (const [turn, target] of [[0, d], [1, again]] as const) {
    foreign.push(await startDirect(loaded, directPort, admin));
    await measure(target, STINT);
    foreign[turn]!.alive_after = direct !== undefined && alive(direct);
    if (direct) await stop(direct);
    direct = undefined;
    if (turn === 0) {
      await serviceAnswers();
      await measure(v, STINT);
    }
  }
  const figures: Figure[] = [
    ...spread('latency (ms)', (s) => s.latencies, sides, 3),
    ...spread('first token (ms)', (s) => s.ttfts, sides, 3),
    ...spread(`stream end, ${STINT.streamTokens} tokens (ms)`, (s) => s.ends, sides, 3),
    ...rateSpread('one stream (tokens/s)', (s) => s.oneRates, sides),
    ...rateSpread(`${SLOTS} slots (tokens/s)`, (s) => s.rates, sides),
    ...spread(`${STINT.clients} clients: per request (ms)`, (s) => s.concurrent, sides, 3),
    { label: `${STINT.clients} clients: mean (ms)`, direct: mean(d.concurrent), again: mean(again.concurrent), service: mean(v.concurrent), digits: 3 },
  ];
  const figure = (label: string) => figures.find((f) => f.label === label)!;
  const one = figure('one stream (tokens/s) p50');
  const slots = figure(`${SLOTS} slots (tokens/s) p50`);
  const ttft = figure('first token (ms) p50');
  const latency = figure('latency (ms) p50');
  const lines = [
    `chat A/B: the service against its own worker's command line run by hand (direct), in turns S D S D; ${elapsed()} into the check`,
    `model ${MODEL.embedding}x${MODEL.layers} blocks, context ${CONTEXT}, ${SLOTS} slots; per side and turn: ${STINT.latency} non-streamed, ${STINT.ttft} first-token, ` +
      `${STINT.oneStreams} single streams and ${STINT.batches} x ${SLOTS} streams of ${STINT.streamTokens} tokens, ${STINT.clients} clients x ${STINT.clientRequests} requests of ${STINT.clientTokens} tokens`,
    `A/A: "direct again" is a second start of the same command line`,
    ...table(figures).lines,
  ];
  await writeFile(path.join(OUT, '5-chat.txt'), `${lines.join('\n')}\n`);
  console.log(lines.join('\n'));
  step.notes.push(
    `one stream ${one.direct.toFixed(1)} tokens/s direct, ${one.service.toFixed(1)} through the service (ratio ${(one.service / one.direct).toFixed(3)})`,
    `${SLOTS} slots ${slots.direct.toFixed(1)} tokens/s direct, ${slots.service.toFixed(1)} through the service (ratio ${(slots.service / slots.direct).toFixed(3)})`,
    `first token p50 ${ttft.direct.toFixed(1)} ms direct, ${ttft.service.toFixed(1)} ms through the service; latency p50 ${latency.direct.toFixed(1)} / ${latency.service.toFixed(1)} ms`,
  );
  // A service that ran its worker elsewhere than the direct start (the CPU, another GPU) shows as a
  // gross difference; the 2-core dry run shares its cores with other work, so only a GPU asks it.
  if (!DRY) check(step, one.service / one.direct >= 0.5, `the service streams at least half as fast as direct (ratio ${(one.service / one.direct).toFixed(3)})`);
  return foreign;
}

/** Step 6: the foreign process, and a TTS worker on the GPU with its CUDA_VISIBLE_DEVICES from /proc. */
async function foreignAndSpeechStep(admin: Admin, foreign: Foreign[], gpu: string): Promise<void> {
  const step = begin('6 foreign GPU process and a TTS worker on the GPU');
  for (const [i, f] of foreign.entries()) {
    check(step, f.seen_as_foreign, `direct start ${i + 1} (pid ${f.pid}) is shown as a foreign GPU process within ${FOREIGN_LIMIT_MS / 1000} s`);
    check(step, f.own_worker_unloaded, `the own chat worker is unloaded for direct start ${i + 1} within ${FOREIGN_LIMIT_MS / 1000} s`);
    check(step, f.alive_after, `direct start ${i + 1} (pid ${f.pid}) was never signalled: alive until the check stopped it`);
    step.notes.push(`foreign pid ${f.pid}: noticed ${f.noticed_ms} ms after its start (load included), alive until stopped: ${f.alive_after}`);
  }
  const record = path.join(work, 'tts-record.jsonl');
  const id = await admin.publish({
    name: 'gpu-check-speaker',
    category: 'tts',
    params: {
      backend: 'openai-server',
      command: [process.execPath, path.join(ROOT, 'test/fixtures/fake-speech-server.mjs'), '--port', '{port}', '--record', record],
      device: gpu,
      memoryMiB: 7168,
    },
  });
  const response = await fetch(`http://127.0.0.1:${apiPort}/v1/audio/speech`, {
    method: 'POST',
    headers: { ...bearer, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpu-check-speaker', input: 'The GPU check speaks.', voice: 'alloy', response_format: 'wav' }),
  });
  const body = Buffer.from(await response.arrayBuffer());
  check(step, response.status === 200 && body.subarray(0, 4).toString('latin1') === 'RIFF', `speech answered 200 with a WAV (${response.status}, ${body.length} bytes)`);
  const worker = (await admin.status()).workers.find((w) => w.kind === 'tts' && w.pid !== null);
  const env = worker?.pid ? await procEnv(worker.pid).catch(() => undefined) : undefined;
  const seen = (await readFile(record, 'utf8').catch(() => ''))
    .split('\n')
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as { env?: { CUDA_VISIBLE_DEVICES?: string | null } }).env?.CUDA_VISIBLE_DEVICES ?? null);
  check(step, worker !== undefined, 'the status shows the TTS worker with its pid');
  check(step, env?.CUDA_VISIBLE_DEVICES === gpu, `the TTS worker's CUDA_VISIBLE_DEVICES in /proc is its GPU (${env?.CUDA_VISIBLE_DEVICES} against ${gpu})`);
  check(step, seen.length > 0 && seen.every((v) => v === gpu), `the speech server saw only its GPU (${JSON.stringify(seen)})`);
  step.notes.push(`TTS worker pid ${worker?.pid ?? '-'} on ${gpu}: CUDA_VISIBLE_DEVICES=${env?.CUDA_VISIBLE_DEVICES ?? '-'}`);
  await writeJson('6-foreign.json', { foreign, tts: { profile: id, worker: worker ?? null, cuda_visible_devices: env?.CUDA_VISIBLE_DEVICES ?? null, server_saw: seen } });
}

/** The service ends on SIGTERM with exit 0 and leaves no worker behind. */
async function shutdownStep(workerPids: number[]): Promise<void> {
  const step = begin('service stop: SIGTERM, exit 0, no worker left');
  if (!service || !serviceExit) return;
  service.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([serviceExit, new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), 60_000)))]);
  clearTimeout(timer);
  check(step, code === 0, `the service exited with 0 on SIGTERM (${code})`);
  service = undefined;
  await sleep(500);
  const left = [];
  for (const pid of workerPids) if (await readFile(`/proc/${pid}/cmdline`).then(() => true, () => false)) left.push(pid);
  check(step, left.length === 0, `no worker process is left (${left.join(', ') || 'none'})`);
}

async function summary(error?: Error): Promise<boolean> {
  const lines = steps.map((s) => `${s.name}: ${s.failures.length === 0 ? 'ok' : `FAILED (${s.failures.join('; ')})`}${s.notes.map((n) => `\n  ${n}`).join('')}`);
  if (error) lines.push(`stopped early: ${error.message}`);
  const ok = !error && steps.every((s) => s.failures.length === 0);
  lines.push(`service steps took ${elapsed()}`, `result: ${ok ? 'PASS' : 'FAIL'}`);
  await appendFile(path.join(OUT, '7-summary.txt'), `${lines.join('\n')}\n`);
  console.log(lines.join('\n'));
  return ok;
}

async function cleanUp(): Promise<void> {
  closeAgents();
  if (direct) await stop(direct);
  if (service) await stop(service, 20_000);
  await rm(work, { recursive: true, force: true });
}

await mkdir(OUT, { recursive: true });
const limit = setTimeout(() => {
  void summary(new Error(`the service steps took over ${LIMIT_MS / 1000} s`)).finally(() => {
    direct?.kill('SIGKILL');
    service?.kill('SIGKILL');
    process.exit(1);
  });
}, LIMIT_MS);
let failure: Error | undefined;
try {
  const admin = await startService();
  await admin.call('POST', '/api/v1/endpoint/config', { port: apiPort });
  await admin.call('POST', '/api/v1/endpoint/start', {});
  const gpus = await probeStep(admin);
  const loaded = await fitStep(admin, gpus);
  const foreign = await chatStep(admin, loaded);
  await foreignAndSpeechStep(admin, foreign, loaded.env.CUDA_VISIBLE_DEVICES?.split(',')[0] ?? gpus[0]?.uuid ?? '');
  const workers = (await admin.status()).workers.flatMap((w) => (w.pid === null ? [] : [w.pid]));
  await shutdownStep(workers);
} catch (error) {
  failure = error as Error;
  say(`stopped: ${failure.stack ?? failure.message}`);
}
clearTimeout(limit);
const passed = await summary(failure);
await cleanUp();
process.exitCode = passed ? 0 : 1;
