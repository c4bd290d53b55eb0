// bench/enhancerInstall: what an enhancer install costs beyond the download itself, in one run
// against the same local hub (test/helpers/hub.ts, laid out like huggingface.co, on loopback).
//
// - Direct: one fetch of the file through the hub's redirect, written to disk as it comes.
// - Service: EnhancerInstalls installing a recipe of that one file: the HEAD probe, the free-space
//   check, the download with sha256, progress and fsync, the install records.
//
// The sides alternate round by round after a warm-up; prints MiB/s per side and the median ratio
// of the service's time over the direct time. Run: npm run bench:enhancer [-- MiB ROUNDS]
import { createWriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { performance } from 'node:perf_hooks';
import type { Test } from 'tap';
import { EnhancerInstalls } from '../src/system/enhancers/enhancerInstalls.js';
import { HostFacts } from '../src/system/host.js';
import { createLogger } from '../src/system/observe/log.js';
import { startHub } from '../test/helpers/hub.js';

const MIB = Number(process.argv[2] ?? 256);
const ROUNDS = Number(process.argv[3] ?? 5);
const WARM_UP = 1;
const REPO = 'bench-org/enhancer';

const teardowns: Array<() => unknown> = [];
const hub = await startHub({ teardown: (fn: () => unknown) => void teardowns.push(fn) } as unknown as Test);
const bytes = Buffer.alloc(MIB * 2 ** 20);
for (let i = 0; i < bytes.length; i += 4096) bytes[i] = i % 251;
const entry = hub.put(REPO, 'main', 'model.gguf', bytes);
hub.options.chunkBytes = 1024 * 1024;
const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-enhancer-'));
const recipe = { repo: REPO, revision: 'main', files: [{ path: 'model.gguf', role: 'model' as const }], context: 2048 };
const host = new HostFacts(dir);
const log = createLogger({ level: 'silent' });

async function direct(round: number): Promise<number> {
  const file = path.join(dir, `direct-${round}.gguf`);
  const started = performance.now();
  const response = await fetch(entry.url);
  if (!response.ok || !response.body) throw new Error(`hub answered ${response.status}`);
  await pipeline(Readable.fromWeb(response.body as WebReadableStream), createWriteStream(file));
  const ms = performance.now() - started;
  await rm(file);
  return ms;
}

async function service(round: number): Promise<number> {
  const folder = path.join(dir, `service-${round}`);
  const installs = await EnhancerInstalls.open({ dir: folder, recipes: { t2i: recipe, i2i: recipe }, hub: hub.url, room: (d) => host.freeBytes(d), log });
  const started = performance.now();
  installs.install('t2i');
  await installs.settled();
  const ms = performance.now() - started;
  const state = installs.view().t2i;
  if (state.state !== 'installed') throw new Error(`install ended ${state.state}: ${state.error}`);
  await rm(folder, { recursive: true, force: true });
  return ms;
}

const pairs: Array<{ direct: number; service: number }> = [];
for (let round = 0; round < WARM_UP + ROUNDS; round += 1) {
  const d = await direct(round);
  const s = await service(round);
  if (round >= WARM_UP) pairs.push({ direct: d, service: s });
}
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const rate = (ms: number) => (MIB / (ms / 1000)).toFixed(0);
const d = median(pairs.map((p) => p.direct));
const s = median(pairs.map((p) => p.service));
console.log(`file ${MIB} MiB, ${ROUNDS} rounds after ${WARM_UP} warm-up, local hub on loopback`);
console.log(`direct fetch to disk:      p50 ${d.toFixed(0)} ms (${rate(d)} MiB/s)`);
console.log(`service install (checked): p50 ${s.toFixed(0)} ms (${rate(s)} MiB/s)`);
console.log(`ratio service/direct (median of pairs): ${median(pairs.map((p) => p.service / p.direct)).toFixed(2)}`);
await rm(dir, { recursive: true, force: true });
for (const fn of teardowns.reverse()) await fn();
