// bench/flood: connections that hold a listener's places without a credential, and what the
// clients beside them still get. The service runs as its own process (bin/service-deck.js over
// dist/); the attacker and the clients are this process, on loopback.
//
// The attack: CONNECTIONS connections per flooded listener, each of them reconnecting at
// once whenever the service closes it, of three kinds, none ever quiet for 250 ms:
// - `head`: a request head trickled one byte every 150-240 ms;
// - `keep-alive`: a complete `GET /api/v1/session` (no session needed) every 4 s on a kept-alive
//   connection;
// - `body`: a login whose 150-byte body is trickled over 30 s.
// The inference listener gets heads (without the token, any request there is answered 401 and its
// connection closed at once), the admin listener all three kinds in equal parts.
//
// Measured, while the flood is held: ORDINARY requests (`GET /health` with the token, each on a
// connection of its own, 10 at a time) against the flooded inference listener, then LOGINS operator
// logins (`POST /api/v1/session` with the password, one at a time) against the flooded admin
// listener. A client has CLIENT_LIMIT_MS to get its answer. Reported: how many were answered
// normally (200), the rest by outcome, the answer time at p50/p99, and how often the attack's
// connections were closed and came back. Exits 1 when fewer than 95 % answered normally.
//
// Run: npm run bench:flood [-- CONNECTIONS [CAP]] (build the service first: npm run build). CAP sets
// SERVICE_DECK_MAX_CONNECTIONS (default: the service's own, 2048 where the open-file limit allows);
// this process needs about CONNECTIONS + 200 descriptors (`ulimit -n`). About a minute.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import { connect, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { freePort } from '../test/helpers/build.js';
import { BENCH_PASSWORD, BENCH_TOKEN, percentile, serveBench, stop } from './lib.js';

const CONNECTIONS = Number(process.argv[2] ?? 2000);
const CAP = process.argv[3];
const ORDINARY = 200;
const LOGINS = 50;
const CLIENT_LIMIT_MS = 10_000;
/** How long the attack has to open its connections before the clients are measured. */
const RAMP_LIMIT_MS = 20_000;
const TARGET = 0.95;

type Kind = 'head' | 'keep-alive' | 'body';

interface Flood {
  /** Connections open now. */
  open(): number;
  /** Connections the service closed (each came back). */
  closed(): number;
  stop(): void;
}

const between = (low: number, high: number) => low + Math.random() * (high - low);

/** What one attacking connection sends, by kind, until the returned function stops it. */
function behave(socket: Socket, kind: Kind, listener: 'admin' | 'inference'): () => void {
  if (kind === 'head') {
    socket.write(`POST ${listener === 'admin' ? '/api/v1/session' : '/v1/chat/completions'} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: `);
    let timer = setTimeout(function drip() {
      socket.write('a');
      timer = setTimeout(drip, between(150, 240));
    }, between(150, 240));
    return () => clearTimeout(timer);
  }
  if (kind === 'keep-alive') {
    const request = 'GET /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Service-Deck: 1\r\n\r\n';
    socket.write(request);
    const timer = setInterval(() => socket.write(request), 4_000);
    return () => clearInterval(timer);
  }
  socket.write('POST /api/v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Service-Deck: 1\r\nContent-Type: application/json\r\nContent-Length: 150\r\n\r\n{"password":"');
  const timer = setInterval(() => socket.write('a'), 200);
  return () => clearInterval(timer);
}

/** CONNECTIONS attacking connections against `port`, each reconnecting as soon as it is closed. */
function flood(port: number, listener: 'admin' | 'inference', count: number): Flood {
  const kinds: Kind[] = listener === 'admin' ? ['head', 'keep-alive', 'body'] : ['head'];
  let open = 0;
  let closed = 0;
  let stopping = false;
  const sockets = new Set<Socket>();
  const attack = (kind: Kind) => {
    if (stopping) return;
    const socket = connect({ host: '127.0.0.1', port });
    sockets.add(socket);
    let quiet: (() => void) | undefined;
    socket.on('connect', () => {
      open += 1;
      quiet = behave(socket, kind, listener);
    });
    socket.on('data', () => {});
    // A reset shows as an error, then close: the connection comes back either way.
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      if (quiet) {
        quiet();
        open -= 1;
        if (!stopping) closed += 1;
      }
      // A connection refused by the kernel (a full backlog) comes back a moment later.
      setTimeout(() => attack(kind), quiet ? 0 : 50);
    });
  };
  for (let i = 0; i < count; i += 1) attack(kinds[i % kinds.length]!);
  return {
    open: () => open,
    closed: () => closed,
    stop() {
      stopping = true;
      for (const socket of sockets) socket.destroy();
    },
  };
}

interface Outcome {
  outcome: string;
  ms: number;
}

/** One request on a connection of its own; its status, or how it failed. */
function ask(port: number, method: string, url: string, headers: Record<string, string>, body?: string): Promise<Outcome> {
  const start = performance.now();
  return new Promise((resolve) => {
    let settled = false;
    const done = (outcome: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ outcome, ms: performance.now() - start });
    };
    const request = http.request({ host: '127.0.0.1', port, path: url, method, agent: false, headers: { connection: 'close', ...headers } }, (response) => {
      response.resume();
      response.on('end', () => done(String(response.statusCode)));
      response.on('error', (error) => done((error as NodeJS.ErrnoException).code ?? error.message));
    });
    const timer = setTimeout(() => {
      done('no answer');
      request.destroy();
    }, CLIENT_LIMIT_MS);
    request.on('error', (error) => done((error as NodeJS.ErrnoException).code ?? error.message));
    request.end(body);
  });
}

/** Holds a flood against one listener while `measure` runs; prints and returns the share answered 200. */
async function under(port: number, listener: 'admin' | 'inference', what: string, measure: () => Promise<Outcome[]>): Promise<number> {
  const attack = flood(port, listener, CONNECTIONS);
  const rampEnd = Date.now() + RAMP_LIMIT_MS;
  while (attack.open() < CONNECTIONS * 0.95 && Date.now() < rampEnd) await new Promise((resolve) => setTimeout(resolve, 100));
  // Let the heads grow old and the keep-alive connections fall idle.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const heldBefore = attack.open();
  const closedBefore = attack.closed();
  const began = performance.now();
  const outcomes = await measure();
  const seconds = (performance.now() - began) / 1000;
  const heldAfter = attack.open();
  const churn = (attack.closed() - closedBefore) / seconds;
  attack.stop();
  const byOutcome = new Map<string, number>();
  for (const o of outcomes) byOutcome.set(o.outcome, (byOutcome.get(o.outcome) ?? 0) + 1);
  const normal = outcomes.filter((o) => o.outcome === '200').length / outcomes.length;
  const times = outcomes.map((o) => o.ms);
  console.log(
    `${listener} listener flooded by ${CONNECTIONS} connections (${heldBefore} open when measuring began, ${heldAfter} at its end; ${churn.toFixed(0)} closed and back per second): ` +
      `${what}: ${(normal * 100).toFixed(1)} % answered normally (${[...byOutcome].map(([o, n]) => `${o} x${n}`).join(', ')}) in ${seconds.toFixed(1)} s; ` +
      `answer time p50 ${percentile(times, 50).toFixed(0)} ms, p99 ${percentile(times, 99).toFixed(0)} ms`,
  );
  // The attack's connections close; the next measurement starts from a quiet listener.
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  return normal;
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-flood-'));
let service: ChildProcess | undefined;
let failed = false;
try {
  const apiPort = await freePort();
  const uiPort = await freePort();
  const served = await serveBench(dir, {
    uiPort,
    apiPort,
    env: { SERVICE_DECK_GPUS: 'none', SERVICE_DECK_LOG_LEVEL: 'warn', ...(CAP ? { SERVICE_DECK_MAX_CONNECTIONS: CAP } : {}) },
  });
  service = served.child;
  console.log(`bench/flood: ${CONNECTIONS} attacking connections per listener, connection cap ${CAP ?? 'the default'}, ${os.cpus().length} CPUs, node ${process.version}`);

  const ordinary = await under(apiPort, 'inference', `${ORDINARY} ordinary requests (GET /health with the token, 10 at a time)`, async () => {
    const outcomes: Outcome[] = [];
    while (outcomes.length < ORDINARY) {
      outcomes.push(...(await Promise.all(Array.from({ length: 10 }, () => ask(apiPort, 'GET', '/health', { authorization: `Bearer ${BENCH_TOKEN}` })))));
    }
    return outcomes;
  });
  const login = JSON.stringify({ password: BENCH_PASSWORD });
  const logins = await under(uiPort, 'admin', `${LOGINS} operator logins (one at a time)`, async () => {
    const outcomes: Outcome[] = [];
    while (outcomes.length < LOGINS) {
      outcomes.push(await ask(uiPort, 'POST', '/api/v1/session', { 'x-service-deck': '1', 'content-type': 'application/json', 'content-length': String(login.length) }, login));
    }
    return outcomes;
  });
  if (ordinary < TARGET) console.log(`FAILED: ${(ordinary * 100).toFixed(1)} % of the ordinary requests answered normally, under ${TARGET * 100} %`);
  if (logins < TARGET) console.log(`FAILED: ${(logins * 100).toFixed(1)} % of the logins answered normally, under ${TARGET * 100} %`);
  failed = ordinary < TARGET || logins < TARGET;
} finally {
  if (service) await stop(service, 60_000);
  await rm(dir, { recursive: true, force: true });
}
if (failed) process.exit(1);
console.log('all checks passed');
