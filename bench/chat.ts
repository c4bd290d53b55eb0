// bench/chat: the service's own cost on chat requests, measured in one run against llama-server.
//
// The same requests go to a llama-server of our own ("direct", started with the service's exact
// command line less the internal key) and through the service (its own llama-server, started by
// the chat worker), on the same generated model:
//
// - non-streamed latency: sequential requests with max_tokens 1 over a keep-alive connection
//   (p50, p90; the added p50 in ms);
// - time to first token: streamed requests on fresh connections, until the first SSE chunk with a
//   role or content (p50);
// - streamed throughput at the slot count: `slots` parallel streams of max_tokens each, completion
//   tokens (the final usage chunk) over the wall time of the batch; the median batch per side (one
//   stalled batch on a shared machine would otherwise decide a pooled rate).
//
// The two sides run one phase at a time, alternately (direct, service, service, direct, ...), so
// they never compete for the CPU and drift hits both alike. Each phase starts with a few unmeasured
// requests (the keep-alive connections may have closed while the other side ran).
//
// Run: npm run bench:chat [-- ROUNDS]. The targets: added latency under 2 ms per request at
// p50, streamed throughput within 3% of direct.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { serverArgs } from '../machines/chatWorker/args.js';
import { writeTinyModel } from '../src/adapters/tinyModel.js';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/system/log.js';
import { startService, type Service } from '../src/compose.js';
import { freePort } from '../test/helpers/build.js';
import { llamaServerPath } from '../test/helpers/llama.js';
import { percentile, stop } from './lib.js';

const ROUNDS = Number(process.argv[2] ?? 12);
const LATENCY_REQUESTS = 240; // per side, spread over the rounds
const TTFT_REQUESTS = 60; // per side, spread over the rounds
const THROUGHPUT_BATCHES = 12; // per side, spread over the rounds
const WARM_UP = 5; // unmeasured requests at the start of every phase
const SLOTS = 2;
const CONTEXT = 2048;
const STREAM_TOKENS = 256;
const TTFT_TOKENS = 4;
const MODEL = { embedding: 512, layers: 6, heads: 8, seed: 7 };
const NAME = 'bench';
const PASSWORD = 'bench password 0123';
const TOKEN = 'sd-bench-token-0123456789abcdefghijklmnop';
const MESSAGES = [{ role: 'user', content: 'Say hello.' }];
/** A request that takes longer ends the run: the machine is busy with other work (see `busy`). */
const REQUEST_LIMIT_MS = 60_000;
/** The whole run's limit (about 30 s on an idle 2-core machine). */
const RUN_LIMIT_MS = 5 * 60_000;
// llama-server's threads (one per core) spin at their barriers: with other processes on the
// cores, generation slows down many times over, and the ratios say nothing about the service.
const busy = (what: string) =>
  new Error(`${what}: the machine is busy with other work (load ${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} CPUs); run the benchmark on an idle machine`);

interface Side {
  name: 'direct' | 'service';
  port: number;
  headers: Record<string, string>;
  /** Keep-alive connections for the non-streamed requests. */
  agent: http.Agent;
  latencies: number[];
  ttfts: number[];
  /** Tokens per second of each batch of `slots` parallel streams. */
  rates: number[];
}

/** Every keep-alive agent, destroyed at the end. */
const agents: http.Agent[] = [];
const side = (name: Side['name'], port: number, headers: Record<string, string>): Side => ({
  name,
  port,
  headers,
  agent: (() => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: SLOTS });
    agents.push(agent);
    return agent;
  })(),
  latencies: [],
  ttfts: [],
  rates: [],
});

/** One non-streamed request over the side's keep-alive agent; resolves with its time in ms. */
function chat(s: Side, body: Record<string, unknown>): Promise<number> {
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, fail) => {
    const start = performance.now();
    const timer = setTimeout(() => {
      fail(busy(`${s.name}: a request took over ${REQUEST_LIMIT_MS / 1000} s`));
      request.destroy();
    }, REQUEST_LIMIT_MS);
    const reject = (error: Error) => {
      clearTimeout(timer);
      fail(error);
    };
    const request = http.request(
      {
        host: '127.0.0.1',
        port: s.port,
        path: '/v1/chat/completions',
        method: 'POST',
        agent: s.agent,
        headers: { ...s.headers, 'content-type': 'application/json', 'content-length': payload.length },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', reject);
        response.on('end', () => {
          const elapsed = performance.now() - start;
          clearTimeout(timer);
          if (response.statusCode !== 200) reject(new Error(`${s.name}: ${response.statusCode} ${Buffer.concat(chunks).toString('utf8')}`));
          else resolve(elapsed);
        });
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

interface Streamed {
  /** ms until the first chunk with a role or content. */
  firstMs: number;
  /** ms until the stream ended. */
  totalMs: number;
  /** completion_tokens of the final usage chunk. */
  tokens: number;
}

/** One streamed request on a fresh connection, read to its end. */
function stream(s: Side, maxTokens: number): Promise<Streamed> {
  const payload = Buffer.from(
    JSON.stringify({ model: NAME, messages: MESSAGES, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true } }),
  );
  return new Promise((resolve, fail) => {
    const start = performance.now();
    let firstMs = NaN;
    let tokens = NaN;
    let pending = '';
    const timer = setTimeout(() => {
      fail(busy(`${s.name}: a stream took over ${REQUEST_LIMIT_MS / 1000} s`));
      request.destroy();
    }, REQUEST_LIMIT_MS);
    const reject = (error: Error) => {
      clearTimeout(timer);
      fail(error);
    };
    const event = (text: string) => {
      if (!text.startsWith('data: ') || text === 'data: [DONE]') return;
      const chunk = JSON.parse(text.slice(6)) as { choices?: Array<{ delta?: { role?: string; content?: string | null } }>; usage?: { completion_tokens?: number }; error?: unknown };
      if (chunk.error) throw new Error(`${s.name}: stream error ${JSON.stringify(chunk.error)}`);
      const delta = chunk.choices?.[0]?.delta;
      if (Number.isNaN(firstMs) && delta && (delta.role || delta.content)) firstMs = performance.now() - start;
      if (chunk.usage?.completion_tokens !== undefined) tokens = chunk.usage.completion_tokens;
    };
    const request = http.request(
      {
        host: '127.0.0.1',
        port: s.port,
        path: '/v1/chat/completions',
        method: 'POST',
        agent: false,
        headers: { ...s.headers, 'content-type': 'application/json', 'content-length': payload.length, accept: 'text/event-stream' },
      },
      (response) => {
        if (response.statusCode !== 200) {
          response.resume();
          reject(new Error(`${s.name}: stream answered ${response.statusCode}`));
          return;
        }
        response.setEncoding('utf8');
        response.on('data', (text: string) => {
          pending += text;
          let end: number;
          try {
            while ((end = pending.indexOf('\n\n')) >= 0) {
              event(pending.slice(0, end).trim());
              pending = pending.slice(end + 2);
            }
          } catch (error) {
            response.destroy();
            reject(error as Error);
          }
        });
        response.on('error', reject);
        response.on('end', () => {
          clearTimeout(timer);
          if (Number.isNaN(firstMs) || Number.isNaN(tokens)) reject(new Error(`${s.name}: the stream had no content or no usage`));
          else resolve({ firstMs, totalMs: performance.now() - start, tokens });
        });
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

const share = (total: number, round: number) => Math.floor((total * (round + 1)) / ROUNDS) - Math.floor((total * round) / ROUNDS);

/** One phase of one side: its share of each measurement in this round. */
async function phase(s: Side, round: number) {
  if (performance.now() - began > RUN_LIMIT_MS) throw busy(`the run took over ${RUN_LIMIT_MS / 60_000} minutes`);
  const small = { model: NAME, messages: MESSAGES, max_tokens: 1 };
  for (let i = 0; i < WARM_UP; i++) await chat(s, small);
  await stream(s, TTFT_TOKENS);
  for (let i = 0; i < share(LATENCY_REQUESTS, round); i++) s.latencies.push(await chat(s, small));
  for (let i = 0; i < share(TTFT_REQUESTS, round); i++) s.ttfts.push((await stream(s, TTFT_TOKENS)).firstMs);
  for (let i = 0; i < share(THROUGHPUT_BATCHES, round); i++) {
    const start = performance.now();
    const batch = await Promise.all(Array.from({ length: SLOTS }, () => stream(s, STREAM_TOKENS)));
    s.rates.push(batch.reduce((sum, b) => sum + b.tokens, 0) / ((performance.now() - start) / 1000));
  }
}

async function healthy(port: number, child: ChildProcess, limitMs: number) {
  const until = Date.now() + limitMs;
  while (Date.now() < until) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the direct llama-server ended (${child.exitCode ?? child.signalCode})`);
    const status = await new Promise<number>((resolve) => {
      const request = http.get({ host: '127.0.0.1', port, path: '/health', agent: false, timeout: 2000 }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      request.on('timeout', () => request.destroy());
      request.on('error', () => resolve(0));
    });
    if (status === 200) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('the direct llama-server did not become healthy');
}

const began = performance.now();
const loadBefore = os.loadavg()[0] ?? 0;
const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-chat-'));
/**
 * Added latency at p50 of the service against a stand-in worker that answers at once: the
 * same keep-alive client, requests alternating between the stand-in itself and the service.
 */
async function ownCost(root: string): Promise<{ requests: number; direct: number; service: number; added: number }> {
  const fake = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../test/fixtures/fake-llama-server.mjs');
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
  const stand = spawn(wrapper, ['--port', String(await freePort())], { env, stdio: 'ignore' });
  try {
    const profile = await own.profiles.create({ name: NAME, category: 'chat', params: { model, context: CONTEXT, slots: SLOTS, gpuSplit: null, gpuLayers: null, sampling: {} } });
    await own.profiles.setPublished(profile.id, true);
    own.listener.send({ type: 'endpoint.start' });
    const until = Date.now() + 10_000;
    while (!own.inferenceAddress() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
    const standPort = Number(stand.spawnargs[stand.spawnargs.indexOf('--port') + 1]);
    await healthy(standPort, stand, 10_000);
    const sides = [side('direct', standPort, {}), side('service', own.inferenceAddress()?.port ?? 0, { authorization: `Bearer ${TOKEN}` })] as const;
    const body = { model: NAME, messages: MESSAGES, max_tokens: 1 };
    const requests = 1000;
    for (let i = 0; i < 100; i++) for (const s of sides) await chat(s, body);
    for (let i = 0; i < requests; i++) for (const s of sides) s.latencies.push(await chat(s, body));
    const [d, v] = [percentile(sides[0].latencies, 50), percentile(sides[1].latencies, 50)];
    return { requests, direct: d, service: v, added: v - d };
  } finally {
    await stop(stand);
    await own.shutdown();
  }
}

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

  const sides = {
    direct: side('direct', directPort, {}),
    service: side('service', service.inferenceAddress()?.port ?? apiPort, { authorization: `Bearer ${TOKEN}` }),
  };
  // Warm-up: the direct server loads, the service's first request starts its chat worker.
  await healthy(directPort, direct, 60_000);
  const ready = performance.now();
  await chat(sides.service, { model: NAME, messages: MESSAGES, max_tokens: 1 });
  const workerStartMs = performance.now() - ready;
  for (const s of [sides.direct, sides.service]) {
    for (let i = 0; i < 20; i++) await chat(s, { model: NAME, messages: MESSAGES, max_tokens: 1 });
    await Promise.all(Array.from({ length: SLOTS }, () => stream(s, 32)));
  }

  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [sides.direct, sides.service] : [sides.service, sides.direct];
    for (const s of order) await phase(s, round);
  }

  const d = sides.direct;
  const v = sides.service;
  const row = (label: string, a: number, b: number, digits: number, sign = true) =>
    `${label.padEnd(28)}${a.toFixed(digits).padStart(10)}${b.toFixed(digits).padStart(10)}${((sign && b - a >= 0 ? '+' : '') + (b - a).toFixed(digits)).padStart(12)}${(b / a).toFixed(3).padStart(8)}`;
  const latencyP50 = [percentile(d.latencies, 50), percentile(v.latencies, 50)] as const;
  const ttftP50 = [percentile(d.ttfts, 50), percentile(v.ttfts, 50)] as const;
  const throughput = [percentile(d.rates, 50), percentile(v.rates, 50)] as const;
  const added = latencyP50[1] - latencyP50[0];
  const ratio = throughput[1] / throughput[0];
  console.log(
    `bench/chat: ${ROUNDS} rounds, model ${MODEL.embedding}x${MODEL.layers} layers, ${SLOTS} slots, context ${CONTEXT}, ${os.cpus().length} CPUs ` +
      `(load ${loadBefore.toFixed(2)} before, ${(os.loadavg()[0] ?? 0).toFixed(2)} after), node ${process.version}`,
  );
  console.log(`per side: ${d.latencies.length} non-streamed, ${d.ttfts.length} first-token, ${THROUGHPUT_BATCHES} x ${SLOTS} streams of ${STREAM_TOKENS} tokens; worker start ${workerStartMs.toFixed(0)} ms`);
  console.log(`${''.padEnd(28)}${'direct'.padStart(10)}${'service'.padStart(10)}${'difference'.padStart(12)}${'ratio'.padStart(8)}`);
  console.log(row('latency p50 (ms)', latencyP50[0], latencyP50[1], 3));
  console.log(row('latency p90 (ms)', percentile(d.latencies, 90), percentile(v.latencies, 90), 3));
  console.log(row('first token p50 (ms)', ttftP50[0], ttftP50[1], 3));
  console.log(row(`stream tokens/s (${SLOTS} slots) p50`, throughput[0], throughput[1], 1));
  console.log(row(`stream tokens/s (${SLOTS} slots) min`, Math.min(...d.rates), Math.min(...v.rates), 1));
  console.log(
    `ratios service/direct: latency p50 ${(latencyP50[1] / latencyP50[0]).toFixed(3)}, first token p50 ${(ttftP50[1] / ttftP50[0]).toFixed(3)}, ` +
      `throughput ${ratio.toFixed(3)}; added p50 ${added.toFixed(3)} ms (target < 2 ms: ${added < 2 ? 'met' : 'MISSED'}), ` +
      `throughput within 3% (target >= 0.97: ${ratio >= 0.97 ? 'met' : 'MISSED'}); ${((performance.now() - began) / 1000).toFixed(1)} s`,
  );

  // The service's own cost, without the CPU contention: on this 2-core machine llama-server's
  // threads spin on both cores and the service's Node process competes with them; against a
  // stand-in worker that answers at once, only the service's work is left.
  await service.shutdown();
  service = undefined;
  await stop(direct);
  direct = undefined;
  const own = await ownCost(dir);
  console.log(
    `service's own cost against an instant stand-in worker (test/fixtures/fake-llama-server.mjs, ${own.requests} requests per side): ` +
      `p50 direct ${own.direct.toFixed(3)} ms, service ${own.service.toFixed(3)} ms, added ${own.added.toFixed(3)} ms (target < 2 ms: ${own.added < 2 ? 'met' : 'MISSED'})`,
  );
  if (added >= 2 || ratio < 0.97) process.exitCode = 1;
} catch (error) {
  if (tail.length > 0) console.error(`direct llama-server output (tail):\n${tail.join('').slice(-4000)}`);
  throw error;
} finally {
  process.off('SIGINT', interrupted);
  process.off('SIGTERM', interrupted);
  for (const agent of agents) agent.destroy();
  if (direct) await stop(direct);
  if (service) await service.shutdown();
  await rm(dir, { recursive: true, force: true });
}
