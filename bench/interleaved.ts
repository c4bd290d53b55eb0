// bench/scheduler's swap workload: chat profiles used at once by several clients, each client
// sending its next request as soon as its answer ended (A B A B ... at the queue), run through the
// real supervisor and queue machines under both orders, strict FIFO and swap-aware.
//
// - `simulate()`: on the simulated clock (no process): a worker start takes L ms to load, an
//   answer `answerMs`, an unload `unloadMs`; the supervisor's own timers (the swap bound, the
//   600 s queue limit) run on the same clock.
// - `againstService()`: once against the real service (in this process, with its real workers
//   and HTTP), with the stand-in llama-server taking FAKE_LLAMA_LOAD_MS to become healthy.
//
// Printed per run: swaps (chat worker starts) per 100 requests, the total time, the longest wait
// of a switch until its grant (simulated runs: what the swap bound limits), and
// per profile the wait of each request (from its submission until its answer began: queue,
// switch and load) at p50, p95 and max.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { SchedulingPolicy } from '../machines/supervisor/index.js';
import { writeTinyModel } from '../src/adapters/tinyModel.js';
import { loadConfig } from '../src/config.js';
import { startService } from '../src/compose.js';
import { createLogger } from '../src/system/observe/log.js';
import { supervisorHarness } from '../test/helpers/supervisor.js';
import { percentile, ROOT } from './lib.js';

export interface Workload {
  profiles: string[];
  clientsPerProfile: number;
  requestsPerClient: number;
  loadMs: number;
  answerMs: number;
  unloadMs: number;
  /** Parallel answers of each chat profile. */
  slots: number;
}

export interface Outcome {
  order: SchedulingPolicy['order'];
  requests: number;
  swaps: number;
  totalMs: number;
  /** Per profile: each request's wait until its answer began. */
  waits: Record<string, number[]>;
  /** The longest wait of a switch (a request whose grant starts the worker) until its grant: what the bound limits. Simulated runs only. */
  maxGrantWaitMs: number | null;
  denied: number;
}

/** The workload through the supervisor on the simulated clock. */
export async function simulate(order: SchedulingPolicy['order'], w: Workload, switchMaxWaitMs = 30_000): Promise<Outcome> {
  const h = supervisorHarness({ autoWorkers: false, maxWaiting: 16, scheduling: { order, switchMaxWaitMs } });
  const timeline: Array<{ at: number; seq: number; run: () => void }> = [];
  let seq = 0;
  const later = (ms: number, run: () => void) => {
    timeline.push({ at: h.clock.now() + ms, seq: seq++, run });
    timeline.sort((a, b) => a.at - b.at || a.seq - b.seq);
  };
  /** When each chat worker start is ready (its load ends). */
  const readyAt = new Map<number, number>();
  const submitted = new Map<string, { profile: string; at: number; client: () => void }>();
  const outcome: Outcome = { order, requests: 0, swaps: 0, totalMs: 0, waits: Object.fromEntries(w.profiles.map((p) => [p, []])), maxGrantWaitMs: 0, denied: 0 };

  h.actor.on('*', (event) => {
    if (event.type === 'gpu.granted') {
      const job = submitted.get(event.jobId);
      if (!job) return;
      const now = h.clock.now();
      if (event.start) {
        outcome.swaps += 1;
        readyAt.set(event.generation, now + w.loadMs);
        const { generation } = event;
        later(w.loadMs, () => {
          h.actor.send({ type: 'worker.started', kind: 'chat', generation, pid: 1000 + generation });
          h.actor.send({ type: 'worker.loaded', kind: 'chat', generation, loadMs: w.loadMs });
        });
      }
      if (event.start) outcome.maxGrantWaitMs = Math.max(outcome.maxGrantWaitMs ?? 0, now - job.at);
      const begins = Math.max(now, readyAt.get(event.generation) ?? now);
      outcome.waits[job.profile]!.push(begins - job.at);
      later(begins - now + w.answerMs, () => {
        h.actor.send(h.releaseEvent(event.jobId));
        outcome.requests += 1;
        outcome.totalMs = h.clock.now();
        job.client();
      });
    } else if (event.type === 'gpu.denied') {
      outcome.denied += 1;
      submitted.get(event.jobId)?.client();
    } else if (event.type === 'worker.unload' && event.kind === 'chat') {
      const { generation } = event;
      later(w.unloadMs, () => h.actor.send({ type: 'worker.unloaded', kind: 'chat', generation }));
    }
  });

  // Each client: its next request as soon as its answer ended. Clients of the profiles alternate
  // at the start, so the queue sees A B A B ...
  for (let c = 0; c < w.clientsPerProfile; c++) {
    for (const profile of w.profiles) {
      let left = w.requestsPerClient;
      const next = () => {
        if (left === 0) return;
        left -= 1;
        const spec = h.spec({ profileId: profile, slots: w.slots });
        submitted.set(spec.id, { profile, at: h.clock.now(), client: next });
        h.actor.send({ type: 'gpu.reserve', job: spec });
      };
      next();
      await h.settle();
    }
  }
  while (timeline.length > 0) {
    const event = timeline.shift()!;
    if (event.at > h.clock.now()) h.clock.increment(event.at - h.clock.now());
    event.run();
    await h.settle(6);
  }
  h.actor.stop();
  return outcome;
}

const TOKEN = 'sk-bench-interleaved-0123456789abcdef';

/**
 * The workload against the real service: the stand-in llama-server loads for `loadMs` and answers
 * after `answerMs`; `requestsPerClient` requests per client, in turn, over HTTP.
 */
export async function againstService(order: SchedulingPolicy['order'], w: Workload): Promise<Outcome> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'bench-interleaved-'));
  const wrapper = path.join(root, 'llama-server');
  const fake = path.join(ROOT, 'test/fixtures/fake-llama-server.mjs');
  // The worker's environment is an allowlist: the stand-in's settings travel in a wrapper script.
  await writeFile(wrapper, `#!/bin/sh\nFAKE_LLAMA_MODE=instant FAKE_LLAMA_LOAD_MS=${w.loadMs} FAKE_LLAMA_ANSWER_MS=${w.answerMs} exec "${process.execPath}" "${fake}" "$@"\n`, { mode: 0o755 });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    SERVICE_DECK_ADMIN_PASSWORD: 'bench-password',
    SERVICE_DECK_API_TOKEN: TOKEN,
    SERVICE_DECK_CACHE_DIR: path.join(root, 'cache'),
    SERVICE_DECK_LLAMA_SERVER: wrapper,
    SERVICE_DECK_GPUS: 'none',
    SERVICE_DECK_QUEUE_ORDER: order,
  };
  const log = createLogger({ level: 'warn', destination: { write: (line: string) => void process.stderr.write(line) } });
  const { service } = await startService(loadConfig({ stateDir: path.join(root, 'state') }, env), { log, adminPort: 0 });
  const outcome: Outcome = { order, requests: 0, swaps: 0, totalMs: 0, waits: Object.fromEntries(w.profiles.map((p) => [p, []])), maxGrantWaitMs: null, denied: 0 };
  try {
    const model = await writeTinyModel(path.join(root, 'tiny.gguf'));
    for (const name of w.profiles) {
      const profile = await service.profiles.create({ name, category: 'chat', params: { model, context: 512, slots: w.slots, gpuSplit: null, gpuLayers: null, sampling: {} } });
      await service.profiles.setPublished(profile.id, true);
    }
    service.listener().send({ type: 'endpoint.start' });
    const until = Date.now() + 10_000;
    while (!service.inferenceAddress() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
    const port = service.inferenceAddress()?.port;
    if (!port) throw new Error('the inference listener did not start');
    service.supervisor.on('gpu.granted', (event) => {
      if (event.start && event.worker === 'chat') outcome.swaps += 1;
    });
    const began = performance.now();
    const client = async (profile: string) => {
      for (let i = 0; i < w.requestsPerClient; i++) {
        const sent = performance.now();
        const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: profile, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
        });
        await response.arrayBuffer();
        if (!response.ok) {
          outcome.denied += 1;
          continue;
        }
        outcome.requests += 1;
        // The answer itself takes answerMs: the rest of the round trip was waiting.
        outcome.waits[profile]!.push(Math.max(0, performance.now() - sent - w.answerMs));
      }
    };
    // The clients start 50 ms apart, A B A B ..., so that the queue sees the profiles interleaved.
    const clients: Array<Promise<void>> = [];
    for (let c = 0; c < w.clientsPerProfile; c++) {
      for (const profile of w.profiles) {
        clients.push(client(profile));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    await Promise.all(clients);
    outcome.totalMs = performance.now() - began;
  } finally {
    await service.shutdown();
    await rm(root, { recursive: true, force: true });
  }
  return outcome;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** One table row per outcome: swaps per 100 requests, total time, and the waits per profile. */
export function swapTable(title: string, outcomes: Outcome[]): string {
  const lines = [title, '  order        requests  swaps/100  total     switch, max to grant  per profile: wait p50 / p95 / max'];
  for (const o of outcomes) {
    const per = Object.entries(o.waits)
      .map(([profile, waits]) => `${profile} ${seconds(percentile(waits, 50))} / ${seconds(percentile(waits, 95))} / ${seconds(Math.max(0, ...waits))}`)
      .join('   ');
    const swaps = o.requests > 0 ? ((o.swaps * 100) / o.requests).toFixed(1) : '-';
    const grant = o.maxGrantWaitMs === null ? '-' : seconds(o.maxGrantWaitMs);
    lines.push(`  ${o.order.padEnd(11)}  ${String(o.requests).padStart(8)}  ${swaps.padStart(9)}  ${seconds(o.totalMs).padStart(8)}  ${grant.padStart(20)}  ${per}${o.denied > 0 ? `  (${o.denied} refused)` : ''}`);
  }
  const [strict, aware] = outcomes;
  if (strict && aware && aware.swaps > 0) lines.push(`  swaps fall by ${(strict.swaps / aware.swaps).toFixed(1)}x; total time ${(strict.totalMs / aware.totalMs).toFixed(2)}x shorter`);
  return lines.join('\n');
}
