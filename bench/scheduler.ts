// bench/scheduler: the supervisor's own service time, measured in one run.
//
// - admissions per second: chat jobs for a loaded profile, each reserved, granted and released;
// - the time from a reservation's release to the next job's grant while 16 jobs wait (p50, p99);
// - the same release-to-dispatch step on the bare queue machine ("direct"), as the ratio's base.
//
// - the swap workload (bench/interleaved.ts): two chat profiles, 3 clients each, strict FIFO
//   against the swap-aware order, on the simulated clock with a load time L of 5 s and 20 s and
//   answers of 1 s; one profile alone as the control (the orders must agree); with `--service`,
//   once against the real service with a stand-in llama-server that loads in 1.5 s.
//
// Run: npm run bench:scheduler [-- ROUNDS] [--service]. The target: a grant under 1 ms of service time.
import { performance } from 'node:perf_hooks';
import { createActor } from 'xstate';
import { queueMachine, type QueuedJob } from '../machines/queue/index.js';
import { supervisorHarness } from '../test/helpers/supervisor.js';
import { againstService, simulate, swapTable, type Workload } from './interleaved.js';
import { percentile } from './lib.js';

const argv = process.argv.slice(2);
const ROUNDS = Number(argv.find((a) => /^\d+$/.test(a)) ?? 20_000);
const SERVICE = argv.includes('--service');
const WAITING = 16;

async function supervisorRun() {
  const h = supervisorHarness({ maxWaiting: WAITING });
  // Load the chat worker once (the start check is a promise; everything after it is synchronous).
  const first = h.spec({ profileId: 'a', slots: 1 });
  h.actor.send({ type: 'gpu.reserve', job: first });
  await h.settle();
  h.actor.send({ type: 'gpu.release', jobId: first.id });

  let grantedAt = 0;
  let lastGranted = '';
  h.actor.on('gpu.granted', (event) => {
    grantedAt = performance.now();
    lastGranted = event.jobId;
  });
  h.emitted.length = 0;

  // Admissions: reserve (granted at once on the loaded worker) and release, one after the other.
  const warm = Math.min(2000, ROUNDS);
  const admit = (n: number) => {
    for (let i = 0; i < n; i++) {
      const job = h.spec({ profileId: 'a', slots: 1 });
      h.actor.send({ type: 'gpu.reserve', job });
      if (lastGranted !== job.id) throw new Error('a job for the loaded profile was not granted at once');
      h.actor.send({ type: 'gpu.release', jobId: job.id });
      h.emitted.length = 0;
    }
  };
  admit(warm);
  let start = performance.now();
  admit(ROUNDS);
  const admissionsPerSecond = ROUNDS / ((performance.now() - start) / 1000);

  // Release to grant with 16 waiting: one runs, 16 wait; each release grants the next, and a new
  // job joins the end so that 16 always wait.
  let running = h.spec({ profileId: 'a', slots: 1 });
  h.actor.send({ type: 'gpu.reserve', job: running });
  for (let i = 0; i < WAITING; i++) h.actor.send({ type: 'gpu.reserve', job: h.spec({ profileId: 'a', slots: 1 }) });
  if (h.waiting().length !== WAITING) throw new Error(`expected ${WAITING} waiting, found ${h.waiting().length}`);
  const latencies: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    start = performance.now();
    h.actor.send({ type: 'gpu.release', jobId: running.id });
    latencies.push(grantedAt - start);
    running = { ...running, id: lastGranted };
    h.actor.send({ type: 'gpu.reserve', job: h.spec({ profileId: 'a', slots: 1 }) });
    h.emitted.length = 0;
  }
  if (h.waiting().length !== WAITING) throw new Error('the queue did not stay at 16 waiting');
  h.actor.stop();
  return { admissionsPerSecond, latencies };
}

function queueRun() {
  const queue = createActor(queueMachine, { input: { maxWaiting: WAITING + 1 } });
  queue.start();
  let n = 0;
  const job = (): QueuedJob => ({ id: `q${++n}`, kind: 'chat', source: 'api', profileId: 'a', revision: 1, at: 0 });
  const ids: string[] = [];
  for (let i = 0; i < WAITING; i++) {
    const j = job();
    ids.push(j.id);
    queue.send({ type: 'job.enqueue', job: j });
  }
  const latencies: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const start = performance.now();
    queue.send({ type: 'job.dispatch', jobId: ids.shift()! });
    latencies.push(performance.now() - start);
    const j = job();
    ids.push(j.id);
    queue.send({ type: 'job.enqueue', job: j });
  }
  queue.stop();
  return latencies;
}

const supervised = await supervisorRun();
const direct = queueRun();
const p50 = percentile(supervised.latencies, 50);
const p99 = percentile(supervised.latencies, 99);
const directP99 = percentile(direct, 99);
console.log(`bench/scheduler: ${ROUNDS} rounds, ${WAITING} waiting, node ${process.version}`);
console.log(`admissions per second (reserve, grant, release on a loaded worker): ${Math.round(supervised.admissionsPerSecond)}`);
console.log(`release -> next grant with ${WAITING} waiting: p50 ${p50.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms (target: under 1 ms)`);
console.log(`bare queue dispatch (direct): p50 ${percentile(direct, 50).toFixed(3)} ms, p99 ${directP99.toFixed(3)} ms`);
console.log(`ratio supervisor/direct at p99: ${(p99 / directP99).toFixed(2)}; p99 / 1 ms budget: ${p99.toFixed(3)}`);
if (p99 >= 1) process.exitCode = 1;

const interleaved: Workload = { profiles: ['a', 'b'], clientsPerProfile: 3, requestsPerClient: 40, loadMs: 5_000, answerMs: 1_000, unloadMs: 200, slots: 1 };
for (const loadMs of [5_000, 20_000]) {
  const w = { ...interleaved, loadMs };
  const title = `\nswap workload (simulated clock): 2 chat profiles x 3 clients x ${w.requestsPerClient} requests, load ${loadMs / 1000} s, answer 1 s, 1 slot, bound 30 s`;
  console.log(swapTable(title, [await simulate('strict', w), await simulate('swap-aware', w)]));
}
const single = { ...interleaved, profiles: ['a'], clientsPerProfile: 6 };
console.log(swapTable('\ncontrol, one profile: 6 clients x 40 requests, load 5 s, answer 1 s', [await simulate('strict', single), await simulate('swap-aware', single)]));
if (SERVICE) {
  const w: Workload = { profiles: ['a', 'b'], clientsPerProfile: 3, requestsPerClient: 5, loadMs: 1_500, answerMs: 100, unloadMs: 0, slots: 1 };
  const title = '\nswap workload against the real service: stand-in llama-server loading in 1.5 s, answering in 0.1 s, 2 profiles x 3 clients x 5 requests';
  console.log(swapTable(title, [await againstService('strict', w), await againstService('swap-aware', w)]));
}
