// The chat benchmarks' client (bench/chat.ts on the CPU, bench/gpuCheck.ts on a GPU): one side
// per server measured (a direct llama-server, the same again for the A/A floor, the service), the
// requests each measurement sends, one stint of measurements on a side, and the table of figures
// with the service's difference, its ratio and the A/A difference.
//
// - non-streamed latency: sequential requests with max_tokens 1 over a keep-alive connection;
// - time to first token: streamed requests on fresh connections, until the first SSE chunk with a
//   role or content;
// - one stream: sequential streams; tokens per second (completion tokens of the final usage chunk
//   over the stream's time) and the stream's end (its last byte);
// - the slot count: `slots` parallel streams, tokens over the batch's time;
// - concurrent clients: each sends requests one after the other on a connection of its own (the
//   service queues what its slots cannot take, llama-server queues in itself).
import type { ChildProcess } from 'node:child_process';
import http from 'node:http';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { percentile } from './lib.js';

export const MESSAGES = [{ role: 'user', content: 'Say hello.' }];
/** A request that takes longer ends the run: the machine is busy with other work (see `busy`). */
const REQUEST_LIMIT_MS = 60_000;

// llama-server's threads (one per core) spin at their barriers: with other processes on the
// cores, generation slows down many times over, and the ratios say nothing about the service.
export const busy = (what: string) =>
  new Error(`${what}: the machine is busy with other work (load ${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} CPUs); run the benchmark on an idle machine`);

export const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

export interface Side {
  name: string;
  port: number;
  headers: Record<string, string>;
  /** The door its requests take: chat completions, or OpenAI's Responses API (the service only). */
  door: 'chat' | 'responses';
  /** Keep-alive connections for the non-streamed requests. */
  agent: http.Agent;
  /** The keep-alive connections an agent keeps (the slot count). */
  sockets: number;
  latencies: number[];
  ttfts: number[];
  /** One stream at a time: tokens per second, and ms until its last byte. */
  oneRates: number[];
  ends: number[];
  /** Tokens per second of each batch of `slots` parallel streams. */
  rates: number[];
  /** ms of each request of the concurrent clients. */
  concurrent: number[];
}

/** Every keep-alive agent, destroyed by closeAgents(). */
const agents: http.Agent[] = [];
const keepAlive = (sockets: number) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: sockets });
  agents.push(agent);
  return agent;
};

export const side = (name: string, port: number, headers: Record<string, string>, sockets: number, door: Side['door'] = 'chat'): Side => ({
  name,
  port,
  headers,
  door,
  agent: keepAlive(sockets),
  sockets,
  latencies: [],
  ttfts: [],
  oneRates: [],
  ends: [],
  rates: [],
  concurrent: [],
});

/** Drops a side's idle connections (they would hold llama-server's HTTP threads while another side runs). */
export function renewAgent(s: Side): void {
  s.agent.destroy();
  s.agent = keepAlive(s.sockets);
}

export function closeAgents(): void {
  for (const agent of agents) agent.destroy();
}

/**
 * One non-streamed request over the side's keep-alive agent, or on a connection of its own
 * (`fresh`: llama-server serves a kept-alive connection with one of its few HTTP threads for as
 * long as it is used, so more keep-alive clients than threads starve the rest); resolves with its
 * time in ms.
 */
/** A chat completion request as the side's door takes it: the Responses API's for the same request. */
const asked = (s: Side, body: Record<string, unknown>): { path: string; payload: Buffer } =>
  s.door === 'chat'
    ? { path: '/v1/chat/completions', payload: Buffer.from(JSON.stringify(body)) }
    : {
        path: '/v1/responses',
        payload: Buffer.from(
          JSON.stringify({ model: body.model, input: body.messages, max_output_tokens: body.max_tokens, ...(body.stream === true ? { stream: true } : {}) }),
        ),
      };

export function chat(s: Side, body: Record<string, unknown>, fresh = false): Promise<number> {
  const { path, payload } = asked(s, body);
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
        path,
        method: 'POST',
        agent: fresh ? false : s.agent,
        headers: { ...s.headers, 'content-type': 'application/json', 'content-length': payload.length, ...(fresh ? { connection: 'close' } : {}) },
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

export interface Streamed {
  /** ms until the first chunk with a role or content. */
  firstMs: number;
  /** ms until the stream ended. */
  totalMs: number;
  /** completion_tokens of the final usage chunk. */
  tokens: number;
}

/** One streamed request for `model` on a fresh connection, read to its end. */
export function stream(s: Side, model: string, maxTokens: number): Promise<Streamed> {
  const { path, payload } = asked(s, { model, messages: MESSAGES, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true } });
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
      // A Responses event has its `event:` line first; its data is the line after.
      const data = s.door === 'responses' ? text.slice(text.indexOf('\n') + 1) : text;
      if (!data.startsWith('data: ') || data === 'data: [DONE]') return;
      const chunk = JSON.parse(data.slice(6)) as {
        choices?: Array<{ delta?: { role?: string; content?: string | null } }>;
        usage?: { completion_tokens?: number };
        error?: unknown;
        type?: string;
        response?: { usage?: { output_tokens?: number }; error?: unknown };
      };
      if (chunk.error || chunk.type === 'response.failed') throw new Error(`${s.name}: stream error ${JSON.stringify(chunk.error ?? chunk.response?.error)}`);
      const delta = chunk.choices?.[0]?.delta;
      if (Number.isNaN(firstMs) && ((delta && (delta.role || delta.content)) || chunk.type === 'response.output_text.delta')) firstMs = performance.now() - start;
      if (chunk.usage?.completion_tokens !== undefined) tokens = chunk.usage.completion_tokens;
      if (chunk.response?.usage?.output_tokens !== undefined) tokens = chunk.response.usage.output_tokens;
    };
    const request = http.request(
      {
        host: '127.0.0.1',
        port: s.port,
        path,
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

/** Waits until a llama-server answers GET /health with 200; fails when it ends or `limitMs` pass. */
export async function healthy(port: number, child: ChildProcess, limitMs: number, what = 'the direct llama-server'): Promise<void> {
  const until = Date.now() + limitMs;
  while (Date.now() < until) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what} ended (${child.exitCode ?? child.signalCode})`);
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
  throw new Error(`${what} did not become healthy within ${limitMs / 1000} s`);
}

/** How many of each measurement one stint on a side makes, and their sizes. */
export interface Stint {
  model: string;
  slots: number;
  warmUp: number;
  latency: number;
  ttft: number;
  ttftTokens: number;
  oneStreams: number;
  batches: number;
  streamTokens: number;
  clients: number;
  clientRequests: number;
  clientTokens: number;
}

/** One stint of measurements on a side, after a few unmeasured requests. */
export async function measure(s: Side, n: Stint): Promise<void> {
  const small = { model: n.model, messages: MESSAGES, max_tokens: 1 };
  for (let i = 0; i < n.warmUp; i++) await chat(s, small);
  await stream(s, n.model, n.ttftTokens);
  for (let i = 0; i < n.latency; i++) s.latencies.push(await chat(s, small));
  for (let i = 0; i < n.ttft; i++) s.ttfts.push((await stream(s, n.model, n.ttftTokens)).firstMs);
  for (let i = 0; i < n.oneStreams; i++) {
    const one = await stream(s, n.model, n.streamTokens);
    s.oneRates.push(one.tokens / (one.totalMs / 1000));
    s.ends.push(one.totalMs);
  }
  for (let i = 0; i < n.batches; i++) {
    const start = performance.now();
    const batch = await Promise.all(Array.from({ length: n.slots }, () => stream(s, n.model, n.streamTokens)));
    s.rates.push(batch.reduce((sum, b) => sum + b.tokens, 0) / ((performance.now() - start) / 1000));
  }
  const asked = { model: n.model, messages: MESSAGES, max_tokens: n.clientTokens };
  await Promise.all(
    Array.from({ length: n.clients }, async () => {
      for (let i = 0; i < n.clientRequests; i++) s.concurrent.push(await chat(s, asked, true));
    }),
  );
  renewAgent(s);
}

export interface Figure {
  label: string;
  /** What the three sides measured (ms or tokens per second). */
  direct: number;
  again: number;
  service: number;
  digits: number;
  /** A target, on the difference (ms) or the ratio (tokens per second); none when the figure is only reported. */
  target?: { kind: 'added' | 'ratio'; limit: number };
}

const targetText = (f: Figure) => {
  if (!f.target) return '';
  const { kind, limit } = f.target;
  const met = kind === 'added' ? f.service - f.direct <= limit : f.service / f.direct >= limit;
  return `${kind === 'added' ? `added <= ${limit} ms` : `ratio >= ${limit}`}: ${met ? 'met' : 'MISSED'}`;
};

/**
 * The table, as lines: each figure with the service's difference and ratio, the A/A difference,
 * and its target; `met` is false when a target was missed.
 */
export function table(figures: Figure[]): { lines: string[]; met: boolean } {
  const signed = (n: number, digits: number) => `${n >= 0 ? '+' : ''}${n.toFixed(digits)}`;
  const lines = [`${''.padEnd(34)}${'direct'.padStart(10)}${'service'.padStart(10)}${'added'.padStart(10)}${'ratio'.padStart(8)}${'A/A'.padStart(10)}  target`];
  let met = true;
  for (const f of figures) {
    const target = targetText(f);
    if (target.endsWith('MISSED')) met = false;
    lines.push(
      `${f.label.padEnd(34)}${f.direct.toFixed(f.digits).padStart(10)}${f.service.toFixed(f.digits).padStart(10)}` +
        `${signed(f.service - f.direct, f.digits).padStart(10)}${(f.service / f.direct).toFixed(3).padStart(8)}` +
        `${signed(f.again - f.direct, f.digits).padStart(10)}  ${target}`,
    );
  }
  return { lines, met };
}

/** Prints the table; false when a target was missed. */
export function report(figures: Figure[]): boolean {
  const { lines, met } = table(figures);
  console.log(lines.join('\n'));
  return met;
}

/** p50, p90 and p99 of one measurement on the three sides. */
export const spread = (label: string, pick: (s: Side) => number[], [d, a, v]: readonly Side[], digits: number, targets: Partial<Record<50 | 90 | 99, Figure['target']>> = {}): Figure[] =>
  ([50, 90, 99] as const).map((p) => ({
    label: `${label} p${p}`,
    direct: percentile(pick(d!), p),
    again: percentile(pick(a!), p),
    service: percentile(pick(v!), p),
    digits,
    ...(targets[p] ? { target: targets[p] } : {}),
  }));

/** Throughput: higher is better, so its low percentiles are the tail. */
export const rateSpread = (label: string, pick: (s: Side) => number[], [d, a, v]: readonly Side[], limit?: number): Figure[] =>
  ([50, 10, 1] as const).map((p) => ({
    label: `${label} p${p}`,
    direct: percentile(pick(d!), p),
    again: percentile(pick(a!), p),
    service: percentile(pick(v!), p),
    digits: 1,
    ...(p === 50 && limit !== undefined ? { target: { kind: 'ratio' as const, limit } } : {}),
  }));
