// bench/chat: the service's own cost on chat requests, measured in one run against llama-server
// (every figure at p50, p90 and p99, every target printed with met or missed).
//
// The same requests go to a llama-server of our own ("direct", started with the service's exact
// command line less the internal key) and through the service (its own llama-server, started by
// the chat worker), on the same generated model. A third side, "direct again", sends the same
// requests to the same direct server: the difference between the two direct sides is the run's
// noise floor (an A/A difference), printed beside every service difference.
//
// - non-streamed latency: sequential requests with max_tokens 1 over a keep-alive connection;
// - time to first token: streamed requests on fresh connections, until the first SSE chunk with a
//   role or content;
// - one stream: sequential streams of STREAM_TOKENS tokens; tokens per second (completion tokens
//   of the final usage chunk over the stream's time) and the stream's end (its last byte);
// - the slot count: `slots` parallel streams of STREAM_TOKENS each, tokens over the batch's time;
// - 8 clients: 8 concurrent clients, each sending requests of CONCURRENT_TOKENS tokens one after
//   the other (the service queues what its slots cannot take, llama-server queues in itself); the
//   time each request took (each on a connection of its own), and the service's added time per
//   request (mean).
//
// The sides run one phase at a time, in turn (the order rotates every round), so they never
// compete for the CPU and drift hits all alike. Each phase starts with a few unmeasured requests.
// Then the service's own cost against a stand-in worker that answers at once
// (test/fixtures/fake-llama-server.mjs): the same three sides, request by request, and beside them
// three proxies that only forward (bench/proxies.ts: a bare node:http one, a bare Fastify one, and
// the service's own Fastify listener with its hooks and the zod schema), so the report shows the
// floor under the service's own cost on this machine and what the service adds above it.
//
// The own-cost part also streams OWN_STREAM_TOKENS tokens from the stand-in (one write a timer
// tick apart) on each of the three sides and reports this process's CPU time per token: what the
// service's relay costs per token beyond the client's own parsing. A fourth side sends the same
// requests through the service's other door, OpenAI's Responses API (`POST /v1/responses`, which
// translates each request and each answer): its cost over chat completions', request by request
// and token by token, has a target of its own (within 0.1 ms of chat completions per request).
//
// Run: npm run bench:chat [-- ROUNDS] (it measures the code as built: tsc compiles the service and
// the bench into dist/ first; under tsx, esbuild's name helpers cost ~0.05 ms per request more).
// `--own` measures only the own cost against the stand-in (with BENCH_CPU_PROFILE=FILE, a CPU
// profile of its measured non-streamed requests; bench/cpuprofile.ts summarises it).
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import inspector from 'node:inspector/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { serverArgs } from '../machines/chatWorker/args.js';
import { writeTinyModel } from '../src/adapters/tinyModel.js';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/system/observe/log.js';
import { startService, type Service } from '../src/compose.js';
import { freePort } from '../test/helpers/build.js';
import { llamaServerPath } from '../test/helpers/llama.js';
import { busy, chat, closeAgents, healthy, measure, MESSAGES, mean, report, rateSpread, side as makeSide, spread, stream as streamChat, type Figure, type Side } from './chatClient.js';
import { percentile, ROOT, stop } from './lib.js';
import { startReferenceProxies, type ReferenceProxy } from './proxies.js';

const argv = process.argv.slice(2);
const OWN_ONLY = argv.includes('--own');
const ROUNDS = Number(argv.find((a) => /^\d+$/.test(a)) ?? 12);
const LATENCY_REQUESTS = 240; // per side, spread over the rounds
const TTFT_REQUESTS = 60; // per side, spread over the rounds
const ONE_STREAMS = 12; // per side, spread over the rounds
const THROUGHPUT_BATCHES = 12; // per side, spread over the rounds
const CLIENTS = 8;
const CONCURRENT_REQUESTS = 4; // per client and round
const CONCURRENT_TOKENS = 8;
const OWN_REQUESTS = 1000; // per side, against the instant stand-in
const OWN_STREAMS = 12; // per side, against the instant stand-in's paced stream
const OWN_STREAM_TOKENS = 256;
const WARM_UP = 5; // unmeasured requests at the start of every phase
const SLOTS = 2;
const CONTEXT = 2048;
const STREAM_TOKENS = 256;
const TTFT_TOKENS = 4;
const MODEL = { embedding: 512, layers: 6, heads: 8, seed: 7 };
const NAME = 'bench';
const PASSWORD = 'bench password 0123';
const TOKEN = 'sd-bench-token-0123456789abcdefghijklmnop';
/** The whole run's limit (about a minute on an idle 2-core machine). */
const RUN_LIMIT_MS = 8 * 60_000;

type SideName = 'direct' | 'direct again' | 'service' | 'service, Responses API' | ReferenceProxy['name'];
const side = (name: SideName, port: number, headers: Record<string, string>, door: Side['door'] = 'chat'): Side => makeSide(name, port, headers, SLOTS, door);
const stream = (s: Side, maxTokens: number) => streamChat(s, NAME, maxTokens);

const share = (total: number, round: number) => Math.floor((total * (round + 1)) / ROUNDS) - Math.floor((total * round) / ROUNDS);

/** One phase of one side: its share of each measurement in this round. */
async function phase(s: Side, round: number) {
  if (performance.now() - began > RUN_LIMIT_MS) throw busy(`the run took over ${RUN_LIMIT_MS / 60_000} minutes`);
  await measure(s, {
    model: NAME,
    slots: SLOTS,
    warmUp: WARM_UP,
    latency: share(LATENCY_REQUESTS, round),
    ttft: share(TTFT_REQUESTS, round),
    ttftTokens: TTFT_TOKENS,
    oneStreams: share(ONE_STREAMS, round),
    batches: share(THROUGHPUT_BATCHES, round),
    streamTokens: STREAM_TOKENS,
    clients: CLIENTS,
    clientRequests: CONCURRENT_REQUESTS,
    clientTokens: CONCURRENT_TOKENS,
  });
}

/** The order of the sides in a round: each side comes first, second and third in turn. */
const turn = <T>(sides: readonly T[], round: number): T[] => sides.map((_, i) => sides[(i + round) % sides.length]!);

/**
 * With BENCH_CPU_PROFILE=FILE, a V8 CPU profile of the measured requests only (no start-up, no
 * warm-up), written to FILE when `stop` is called (bench/cpuprofile.ts summarises it).
 */
async function startProfile(): Promise<{ stop(): Promise<void> } | undefined> {
  const file = process.env.BENCH_CPU_PROFILE;
  if (!file) return undefined;
  const session = new inspector.Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  return {
    async stop() {
      const { profile } = await session.post('Profiler.stop');
      await writeFile(file, JSON.stringify(profile));
      session.disconnect();
    },
  };
}

/**
 * The service's own cost against a stand-in worker that answers at once: the same keep-alive
 * client, requests in turn to the stand-in itself, to it again (the A/A floor) and to the service.
 */
async function ownCost(root: string): Promise<{ figures: Figure[]; doors: Figure[]; floor: string[] }> {
  const fake = path.join(ROOT, 'test/fixtures/fake-llama-server.mjs');
  const model = await writeTinyModel(path.join(root, 'own.gguf'));
  // The worker's environment is an allowlist: the stand-in's mode travels in a wrapper script.
  const wrapper = path.join(root, 'instant-llama-server');
  await writeFile(wrapper, `#!/bin/sh\nFAKE_LLAMA_MODE=instant exec "${process.execPath}" "${fake}" "$@"\n`, { mode: 0o755 });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
    SERVICE_DECK_API_TOKEN: TOKEN,
    SERVICE_DECK_CACHE_DIR: path.join(root, 'own-cache'),
    SERVICE_DECK_LLAMA_SERVER: wrapper,
    SERVICE_DECK_GPUS: 'none',
  };
  const log = createLogger({ level: 'warn', destination: { write: (line: string) => void process.stderr.write(line) } });
  const own = (await startService(loadConfig({ stateDir: path.join(root, 'own-state') }, env), { log, adminPort: 0 })).service;
  const standPort = await freePort();
  const stand = spawn(wrapper, ['--port', String(standPort)], { env, stdio: 'ignore' });
  const references = await startReferenceProxies(standPort, log);
  try {
    const profile = await own.profiles.create({ name: NAME, category: 'chat', params: { model, context: CONTEXT, slots: SLOTS, gpuSplit: null, gpuLayers: null, sampling: {} } });
    await own.profiles.setPublished(profile.id, true);
    // The Responses door is an extension, off by default (CONTRACT section 9): on for its figures.
    await own.extensions.set({ responses: true });
    own.listener().send({ type: 'endpoint.start' });
    const until = Date.now() + 10_000;
    while (!own.inferenceAddress() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
    await healthy(standPort, stand, 10_000);
    const servicePort = own.inferenceAddress()?.port ?? 0;
    const sides = [side('direct', standPort, {}), side('direct again', standPort, {}), side('service', servicePort, { authorization: `Bearer ${TOKEN}` })] as const;
    // The same requests through the Responses API, translated there and back.
    const responses = side('service, Responses API', servicePort, { authorization: `Bearer ${TOKEN}` }, 'responses');
    const doors = [...sides, responses];
    // The floor: the same requests through three proxies that only forward (bench/proxies.ts).
    const floors = references.proxies.map((proxy) => side(proxy.name, proxy.port, {}));
    const measured = [...doors, ...floors];
    const body = { model: NAME, messages: MESSAGES, max_tokens: 1 };
    for (let i = 0; i < 100; i++) for (const s of measured) await chat(s, body);
    // This process's CPU time around each request: the client's share is the same on every side,
    // so the service's difference is its own CPU work per request, which other processes on the
    // machine do not stretch as they stretch latencies.
    const cpu = new Map(doors.map((s) => [s, 0]));
    const profiler = await startProfile();
    for (let i = 0; i < OWN_REQUESTS; i++) {
      for (const s of turn(measured, i)) {
        const before = process.cpuUsage();
        s.latencies.push(await chat(s, body));
        const used = process.cpuUsage(before);
        cpu.set(s, (cpu.get(s) ?? 0) + used.user + used.system);
      }
    }
    await profiler?.stop();
    // The relay's cost per token: streams of OWN_STREAM_TOKENS tokens, one write a tick apart, this
    // process's CPU time per token (the client's parsing is the same on every side).
    const tokenCpu = new Map(doors.map((s) => [s, [] as number[]]));
    for (let i = 0; i < OWN_STREAMS; i++) {
      for (const s of turn(doors, i)) {
        const before = process.cpuUsage();
        const streamed = await stream(s, OWN_STREAM_TOKENS);
        const used = process.cpuUsage(before);
        if (streamed.tokens !== OWN_STREAM_TOKENS) throw new Error(`${s.name}: ${streamed.tokens} tokens instead of ${OWN_STREAM_TOKENS}`);
        tokenCpu.get(s)?.push((used.user + used.system) / OWN_STREAM_TOKENS);
      }
    }
    const perToken = (s: Side) => percentile(tokenCpu.get(s) ?? [], 50);
    const perRequest = (s: Side) => (cpu.get(s) ?? 0) / 1000 / OWN_REQUESTS;
    const added = (s: Side, p: number) => percentile(s.latencies, p) - percentile(sides[0].latencies, p);
    const signed = (n: number) => `${n >= 0 ? '+' : ''}${n.toFixed(3)}`;
    const line = (s: Side, what: string) =>
      `  ${what.padEnd(62)}${signed(added(s, 50)).padStart(9)}${signed(added(s, 99)).padStart(9)}${signed(perRequest(s) - perRequest(sides[0])).padStart(9)}`;
    const [bare, framework, listener] = floors as [Side, Side, Side];
    const floor = [
      `the floor: added over direct by proxies that only forward (bench/proxies.ts), same client, same stand-in, same run`,
      `  ${''.padEnd(62)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'CPU'.padStart(9)}`,
      line(bare, 'node proxy (node:http server and keep-alive agent)'),
      line(framework, 'fastify proxy (bare Fastify: no logger, hooks or schema)'),
      line(listener, "listener proxy (the service's Fastify listener, hooks and zod)"),
      line(sides[2], 'the service'),
      `  the service beyond the listener proxy: ${signed(added(sides[2], 50) - added(listener, 50))} ms at p50, ${signed(perRequest(sides[2]) - perRequest(listener))} ms CPU per request`,
    ];
    // The Responses door against chat completions, both through the service: `direct` is chat
    // completions, `service` the Responses API, and A/A the run's own noise floor (direct again
    // over direct, on top of chat completions).
    const noise = (pick: (s: Side) => number) => pick(sides[2]) + pick(sides[1]) - pick(sides[0]);
    const door = (label: string, pick: (s: Side) => number, digits: number, limit?: number): Figure => ({
      label,
      direct: pick(sides[2]),
      again: noise(pick),
      service: pick(responses),
      digits,
      ...(limit === undefined ? {} : { target: { kind: 'added' as const, limit } }),
    });
    return {
      figures: [
        ...spread('own cost: latency (ms)', (s) => s.latencies, sides, 3, { 50: { kind: 'added', limit: 0.3 }, 99: { kind: 'added', limit: 0.6 } }),
        { label: 'own cost: CPU per request (ms)', direct: perRequest(sides[0]), again: perRequest(sides[1]), service: perRequest(sides[2]), digits: 3 },
        { label: `own cost: CPU per streamed token (µs)`, direct: perToken(sides[0]), again: perToken(sides[1]), service: perToken(sides[2]), digits: 1 },
      ],
      doors: [
        door('Responses: latency p50 (ms)', (s) => percentile(s.latencies, 50), 3, 0.1),
        door('Responses: latency p99 (ms)', (s) => percentile(s.latencies, 99), 3),
        door('Responses: CPU per request (ms)', perRequest, 3, 0.1),
        door('Responses: CPU per token (µs)', perToken, 1),
      ],
      floor,
    };
  } finally {
    await references.close();
    await stop(stand);
    await own.shutdown();
  }
}

const began = performance.now();
const loadBefore = os.loadavg()[0] ?? 0;
const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-chat-'));
const conditions = () =>
  `${os.cpus().length} CPUs (load ${loadBefore.toFixed(2)} before, ${(os.loadavg()[0] ?? 0).toFixed(2)} after), node ${process.version}, ${((performance.now() - began) / 1000).toFixed(1)} s`;

let direct: ChildProcess | undefined;
let service: Service | undefined;
const tail: string[] = [];
// Interrupted: the direct server is killed and the folder removed here; the service's own
// llama-server goes with this process (execa's cleanup).
const interrupted = () => {
  direct?.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  process.exit(130);
};
process.once('SIGINT', interrupted);
process.once('SIGTERM', interrupted);
try {
  let met = true;
  if (!OWN_ONLY) {
    const binary = await llamaServerPath();
    const model = await writeTinyModel(path.join(dir, 'model.gguf'), MODEL);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
      SERVICE_DECK_API_TOKEN: TOKEN,
      SERVICE_DECK_CACHE_DIR: path.join(dir, 'cache'),
      SERVICE_DECK_LLAMA_SERVER: binary,
      SERVICE_DECK_GPUS: 'none',
    };

    // Direct: the chat worker's own command line (machines/chatWorker/args.ts) for this profile on
    // the CPU, less `--api-key-file`; output piped and drained as the service's chat worker does.
    const directPort = await freePort();
    const launch = { generation: 0, profileId: 'direct', revision: 1, name: NAME, model, context: CONTEXT, slots: SLOTS };
    const args = serverArgs({ ...launch, gpuLayers: null, tensorSplit: null, overrides: [], gpus: [] }, { port: directPort, keyFile: '' });
    args.splice(args.indexOf('--api-key-file'), 2);
    direct = spawn(binary, args, { env: { ...env, CUDA_VISIBLE_DEVICES: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (chunk: Buffer) => {
      tail.push(chunk.toString('utf8'));
      if (tail.length > 50) tail.shift();
    };
    direct.stdout?.on('data', keep);
    direct.stderr?.on('data', keep);

    // The service, in this process, logging warnings only (to stderr).
    const config = loadConfig({ stateDir: path.join(dir, 'state') }, env);
    const log = createLogger({ level: 'warn', destination: { write: (line: string) => void process.stderr.write(line) } });
    service = (await startService(config, { log, adminPort: 0 })).service;
    const adminUrl = `http://127.0.0.1:${service.adminAddress()?.port}`;
    let cookie = '';
    let csrf = '';
    const admin = async (url: string, body: unknown) => {
      const response = await fetch(`${adminUrl}${url}`, {
        method: 'POST',
        headers: { 'x-service-deck': '1', 'content-type': 'application/json', ...(cookie ? { cookie, 'x-csrf-token': csrf } : {}) },
        body: JSON.stringify(body),
      });
      if (response.status !== 200 && response.status !== 201) throw new Error(`${url}: ${response.status} ${await response.text()}`);
      return response;
    };
    const session = await admin('/api/v1/session', { password: PASSWORD });
    cookie = (session.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
    csrf = ((await session.json()) as { csrfToken: string }).csrfToken;
    const apiPort = await freePort();
    await admin('/api/v1/endpoint/config', { port: apiPort });
    await admin('/api/v1/endpoint/start', {});
    const created = await admin('/api/v1/profiles', { name: NAME, category: 'chat', params: { model, context: CONTEXT, slots: SLOTS } });
    const id = ((await created.json()) as { id: string }).id;
    await admin('/api/v1/endpoint/profile', { id, enabled: true });

    const sides = [
      side('direct', directPort, {}),
      side('direct again', directPort, {}),
      side('service', service.inferenceAddress()?.port ?? apiPort, { authorization: `Bearer ${TOKEN}` }),
    ] as const;
    // Warm-up: the direct server loads, the service's first request starts its chat worker.
    await healthy(directPort, direct, 60_000);
    const ready = performance.now();
    await chat(sides[2], { model: NAME, messages: MESSAGES, max_tokens: 1 });
    const workerStartMs = performance.now() - ready;
    for (const s of sides) {
      for (let i = 0; i < 20; i++) await chat(s, { model: NAME, messages: MESSAGES, max_tokens: 1 });
      await Promise.all(Array.from({ length: SLOTS }, () => stream(s, 32)));
    }
    for (let round = 0; round < ROUNDS; round++) for (const s of turn(sides, round)) await phase(s, round);

    const [d] = sides;
    console.log(`bench/chat: ${ROUNDS} rounds, model ${MODEL.embedding}x${MODEL.layers} layers, ${SLOTS} slots, context ${CONTEXT}; ${conditions()}`);
    console.log(
      `per side: ${d.latencies.length} non-streamed, ${d.ttfts.length} first-token, ${d.ends.length} single streams and ${THROUGHPUT_BATCHES} x ${SLOTS} streams of ${STREAM_TOKENS} tokens, ` +
        `${d.concurrent.length} requests of ${CONCURRENT_TOKENS} tokens from ${CLIENTS} concurrent clients; worker start ${workerStartMs.toFixed(0)} ms`,
    );
    const concurrentMean: Figure = {
      label: `${CLIENTS} clients: per request mean (ms)`,
      direct: mean(sides[0].concurrent),
      again: mean(sides[1].concurrent),
      service: mean(sides[2].concurrent),
      digits: 3,
    };
    met = report([
      ...spread('latency (ms)', (s) => s.latencies, sides, 3, { 50: { kind: 'added', limit: 1 }, 90: { kind: 'added', limit: 2 } }),
      ...spread('first token (ms)', (s) => s.ttfts, sides, 3, { 50: { kind: 'added', limit: 1 } }),
      ...spread(`stream end, ${STREAM_TOKENS} tokens (ms)`, (s) => s.ends, sides, 3, { 50: { kind: 'added', limit: 1 } }),
      ...rateSpread('one stream (tokens/s)', (s) => s.oneRates, sides, 0.99),
      ...rateSpread(`${SLOTS} slots (tokens/s)`, (s) => s.rates, sides, 0.99),
      ...spread(`${CLIENTS} clients: per request (ms)`, (s) => s.concurrent, sides, 3),
      concurrentMean,
    ]);
    console.log(`${CLIENTS} concurrent clients: the service adds ${(concurrentMean.service - concurrentMean.direct).toFixed(3)} ms per request (mean; A/A ${(concurrentMean.again - concurrentMean.direct).toFixed(3)} ms)`);

    // The service's own cost, without the CPU contention: on this 2-core machine llama-server's
    // threads spin on both cores and the service's Node process competes with them; against a
    // stand-in worker that answers at once, only the service's work is left.
    await service.shutdown();
    service = undefined;
    await stop(direct);
    direct = undefined;
  }
  const own = await ownCost(dir);
  console.log(`\nservice's own cost against an instant stand-in worker (test/fixtures/fake-llama-server.mjs, ${OWN_REQUESTS} requests per side); ${conditions()}`);
  if (!report(own.figures)) met = false;
  console.log(own.floor.join('\n'));
  console.log(`\nthe Responses API over chat completions, both through the service (direct: chat completions; service: /v1/responses; A/A: the run's noise floor)`);
  if (!report(own.doors)) met = false;
  if (!met) process.exitCode = 1;
} catch (error) {
  if (tail.length > 0) console.error(`direct llama-server output (tail):\n${tail.join('').slice(-4000)}`);
  throw error;
} finally {
  process.off('SIGINT', interrupted);
  process.off('SIGTERM', interrupted);
  closeAgents();
  if (direct) await stop(direct);
  if (service) await service.shutdown();
  await rm(dir, { recursive: true, force: true });
}
