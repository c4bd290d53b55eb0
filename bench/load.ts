// bench/load: 1000 concurrent chat clients against the tiny model on 2 slots. The
// service runs as its own process, as an operator runs it (bin/service-deck.js over
// dist/), so that its resident memory and open file descriptors are its own; the clients are this
// process, each on a connection of its own, all started at once.
//
// Checked (the run exits 1 when one fails):
// - every client gets 200 (a complete SSE stream ending in [DONE]) or 429 `queue_full` (or 503
//   `too_many_connections` past the connection cap) with a `Retry-After` of whole seconds, at the
//   default limits; none gets a 5xx, another status, a broken connection, or waits
//   past CLIENT_LIMIT_MS;
// - the admin status never shows more than 2 jobs running or 16 waiting (spec 8);
// - afterwards the service's open file descriptors return to their idle count and its resident
//   memory to within RSS_SLACK_MIB of its size before the run (the idle size for the first run).
// Reported: the answers by status; the queue wait of the accepted jobs at p50/p99 as the service's
// scheduler measured it (`waited_ms` of each job the admin status showed running, sampled every
// 50 ms; a job's wait is fixed once it runs); the time to the response headers of the accepted
// streams and the time of the refusals as the clients saw them (both include the time the service
// took to accept and parse 1000 requests at once); and the peaks under load.
//
// Run: npm run bench:load [-- CLIENTS [RUNS]] (build the service first: npm run build). Loopback
// only; about half a minute, and a few seconds more for each further run. A broken connection
// (a reset) fails the run: a client at the cap gets 503, never a reset.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { writeTinyModel } from '../src/adapters/tinyModel.js';
import { freePort } from '../test/helpers/build.js';
import { llamaServerPath } from '../test/helpers/llama.js';
import { BENCH_TOKEN, percentile, serveBench, stop, until } from './lib.js';

const CLIENTS = Number(process.argv[2] ?? 1000);
/** Loads in a row against the same service, each checked on its own. */
const RUNS = Number(process.argv[3] ?? 1);
const SLOTS = 2;
const QUEUE_LIMIT = 16;
/** Long enough that each job runs through at least one status sample. */
const MAX_TOKENS = 64;
/** A client that has no complete answer after this long counts as hung. */
const CLIENT_LIMIT_MS = 120_000;
/** How long the service has to come back to its idle descriptor count and memory. */
const SETTLE_LIMIT_MS = 30_000;
const RSS_SLACK_MIB = 48;
const NAME = 'tiny';

const ms = (value: number) => `${value.toFixed(0)} ms`;

interface Outcome {
  status: number | 'hung' | 'error';
  /** ms from the request's start to its response headers. */
  headersMs: number;
  /** ms to the end of the answer. */
  totalMs: number;
  retryAfter: string | null;
  code: string | null;
  /** A stream that ended in [DONE] without an error event. */
  complete: boolean;
  detail?: string;
}

/** The service process's resident memory (MiB) and open file descriptors, from /proc. */
async function footprint(pid: number): Promise<{ rssMiB: number; fds: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? NaN);
  return { rssMiB: rssKiB / 1024, fds: (await readdir(`/proc/${pid}/fd`)).length };
}

/** One streamed chat request on a connection of its own, read to its end. */
function client(port: number): Promise<Outcome> {
  const payload = Buffer.from(JSON.stringify({ model: NAME, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: MAX_TOKENS, stream: true }));
  return new Promise((resolve) => {
    const start = performance.now();
    let headersMs = NaN;
    let settled = false;
    const done = (outcome: Omit<Outcome, 'totalMs' | 'headersMs'>) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...outcome, headersMs, totalMs: performance.now() - start });
    };
    const timer = setTimeout(() => {
      done({ status: 'hung', retryAfter: null, code: null, complete: false });
      request.destroy();
    }, CLIENT_LIMIT_MS);
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/chat/completions',
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${BENCH_TOKEN}`, 'content-type': 'application/json', 'content-length': payload.length },
      },
      (response) => {
        headersMs = performance.now() - start;
        const status = response.statusCode ?? 0;
        const retryAfter = (response.headers['retry-after'] as string | undefined) ?? null;
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('error', (error) => done({ status: 'error', retryAfter, code: null, complete: false, detail: error.message }));
        response.on('end', () => {
          if (status === 200) {
            const complete = text.includes('data: [DONE]') && !/^data: \{"error"/m.test(text);
            done({ status, retryAfter, code: null, complete, ...(complete ? {} : { detail: text.slice(-300) }) });
            return;
          }
          let code: string | null = null;
          try {
            code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
          } catch {
            code = null;
          }
          done({ status, retryAfter, code, complete: false, detail: text.slice(0, 300) });
        });
      },
    );
    request.on('error', (error) => done({ status: 'error', retryAfter: null, code: null, complete: false, detail: error.message }));
    request.end(payload);
  });
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-load-'));
let service: ChildProcess | undefined;
const failures: string[] = [];
const check = (ok: boolean, what: string) => {
  if (!ok) failures.push(what);
};
try {
  const model = await writeTinyModel(path.join(dir, 'tiny.gguf'));
  const apiPort = await freePort();
  const served = await serveBench(dir, {
    uiPort: await freePort(),
    apiPort,
    // The default limits: the connection cap (2048) holds every client at once; past it a client would get 503, not a reset.
    env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none', SERVICE_DECK_LOG_LEVEL: 'warn' },
  });
  service = served.child;
  const { admin } = served;
  const pid = service.pid!;
  const created = await admin('POST', '/api/v1/profiles', { name: NAME, category: 'chat', params: { model, context: 2048, slots: SLOTS } });
  const id = ((await created.json()) as { id: string }).id;
  await admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });

  // Idle: the worker loaded by a first request, then the same request one at a time.
  const first = await client(apiPort);
  if (first.status !== 200) throw new Error(`the first request answered ${first.status}: ${first.detail ?? ''}`);
  const idleHeaders: number[] = [];
  for (let i = 0; i < 20; i++) idleHeaders.push((await client(apiPort)).headersMs);
  // Keep-alive connections of the admin calls close after 5 s; the descriptors then settle.
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  const idle = await footprint(pid);

  const resetsPerRun: number[] = [];
  for (let run = 1; run <= RUNS; run += 1) {
    const checkRun = (ok: boolean, what: string) => check(ok, RUNS > 1 ? `run ${run}: ${what}` : what);
    // The load: every client at once, the admin status and /proc sampled while it runs.
    // The resident memory a run starts from: the idle size, or what the run before left (the heap does not shrink at once).
    const before = run === 1 ? idle : await footprint(pid);
    let peak = { ...before };
    let maxRunning = 0;
    let maxWaiting = 0;
    /** The scheduler's wait of each job seen running, by job id. */
    const queueWaits = new Map<string, number>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const now = await footprint(pid);
        peak = { rssMiB: Math.max(peak.rssMiB, now.rssMiB), fds: Math.max(peak.fds, now.fds) };
        const status = (await (await admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: Array<{ job_id: string; waited_ms: number }>; waiting: unknown[] } };
        for (const job of status.queue.running) queueWaits.set(job.job_id, job.waited_ms);
        maxRunning = Math.max(maxRunning, status.queue.running.length);
        maxWaiting = Math.max(maxWaiting, status.queue.waiting.length);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    const began = performance.now();
    const outcomes = await Promise.all(Array.from({ length: CLIENTS }, () => client(apiPort)));
    const wallMs = performance.now() - began;
    sampling = false;
    await sampler;

    // Afterwards: descriptors back to idle, memory near it.
    const settleStart = performance.now();
    const settled = await until('the descriptors to settle', async () => {
      const now = await footprint(pid);
      return now.fds <= idle.fds ? now : undefined;
    }, SETTLE_LIMIT_MS).catch(() => undefined);
    const settleMs = performance.now() - settleStart;
    const after = settled ?? (await footprint(pid));

    const accepted = outcomes.filter((o) => o.status === 200);
    // 429 queue_full, or 503 too_many_connections past the connection cap: both with Retry-After.
    const refused = outcomes.filter((o) => o.status === 429 || (o.status === 503 && o.code === 'too_many_connections'));
    const byStatus = new Map<string, number>();
    for (const o of outcomes) byStatus.set(String(o.status), (byStatus.get(String(o.status)) ?? 0) + 1);
    const idleP50 = percentile(idleHeaders, 50);
    const headers = accepted.map((o) => o.headersMs);
    const waits = [...queueWaits.values()];

    const resets = outcomes.filter((o) => o.status === 'error');
    resetsPerRun.push(resets.length);
    checkRun(accepted.length + refused.length === CLIENTS, `every client got 200, 429 or 503 too_many_connections, no reset (${[...byStatus].map(([s, n]) => `${s}: ${n}`).join(', ')})`);
    checkRun(accepted.every((o) => o.complete), `every accepted stream ended in [DONE] without an error event (${accepted.filter((o) => !o.complete).length} did not)`);
    checkRun(refused.every((o) => o.status === 503 || o.code === 'queue_full'), 'every 429 is queue_full');
    checkRun(refused.every((o) => o.retryAfter !== null && /^\d+$/.test(o.retryAfter) && Number(o.retryAfter) > 0), 'every refusal has Retry-After in whole seconds');
    checkRun(!outcomes.some((o) => typeof o.status === 'number' && o.status >= 500 && o.code !== 'too_many_connections'), 'no 5xx but the connection cap');
    checkRun(!outcomes.some((o) => o.status === 'hung'), `no client waited past ${CLIENT_LIMIT_MS / 1000} s`);
    checkRun(maxRunning <= SLOTS, `at most ${SLOTS} jobs running (seen ${maxRunning})`);
    checkRun(maxWaiting <= QUEUE_LIMIT, `at most ${QUEUE_LIMIT} jobs waiting (seen ${maxWaiting})`);
    checkRun(after.fds <= idle.fds, `descriptors back to idle within ${SETTLE_LIMIT_MS / 1000} s (${after.fds} against ${idle.fds})`);
    checkRun(after.rssMiB <= before.rssMiB + RSS_SLACK_MIB, `resident memory within ${RSS_SLACK_MIB} MiB of its size before the run (${after.rssMiB.toFixed(0)} against ${before.rssMiB.toFixed(0)} MiB)`);

    const odd = outcomes.filter((o) => o.status !== 200 && !refused.includes(o)).slice(0, 3);
    console.log(`bench/load run ${run} of ${RUNS}: ${CLIENTS} clients at once, tiny model, ${SLOTS} slots, max_tokens ${MAX_TOKENS}, ${os.cpus().length} CPUs, node ${process.version}`);
    console.log(`answers: ${[...byStatus].map(([s, n]) => `${s} x${n}`).join(', ')} in ${ms(wallMs)}; ${resets.length} broken connections (resets); peak ${maxRunning} running, ${maxWaiting} waiting`);
    console.log(`queue wait (the scheduler's, ${waits.length} of the ${accepted.length} accepted jobs seen running): p50 ${ms(percentile(waits, 50))}, p99 ${ms(percentile(waits, 99))}, max ${ms(Math.max(...waits))}`);
    console.log(`accepted, time to headers at the client: p50 ${ms(percentile(headers, 50))}, p99 ${ms(percentile(headers, 99))} (one at a time when idle: p50 ${ms(idleP50)})`);
    console.log(`refused (429), answer time: p50 ${ms(percentile(refused.map((o) => o.totalMs), 50))}, p99 ${ms(percentile(refused.map((o) => o.totalMs), 99))}; Retry-After ${[...new Set(refused.map((o) => o.retryAfter))].join(', ')} s`);
    console.log(`service process: before ${before.rssMiB.toFixed(0)} MiB RSS, ${before.fds} fds; peak ${peak.rssMiB.toFixed(0)} MiB, ${peak.fds} fds; after ${after.rssMiB.toFixed(0)} MiB, ${after.fds} fds (settled in ${ms(settleMs)})`);
    for (const o of odd) console.log(`  e.g. ${o.status}: ${o.detail ?? ''}`);
  }
  console.log(`broken connections (resets) per run: ${resetsPerRun.join(', ')}; runs without any: ${resetsPerRun.filter((n) => n === 0).length} of ${RUNS}`);
} finally {
  // SIGTERM drains for up to 30 s (the default drain limit) before the service exits.
  if (service) await stop(service, 60_000);
  await rm(dir, { recursive: true, force: true });
}
if (failures.length > 0) {
  for (const failure of failures) console.log(`FAILED: ${failure}`);
  process.exit(1);
}
console.log('all checks passed');
