// What every engine process actor shares (llama-server, sd-cli, the STT engines, espeak-ng and a
// speech server): the environment a worker is given, how it is spawned, a free loopback port, the
// tail of its output kept for the diagnosis, and the report of how it ended.
import net from 'node:net';
import { readOomKills } from '../adapters/memory.js';
import { diagnoseExit, type WorkerKind } from '../system/diagnose.js';
import type { ExitReport } from '../../machines/worker.types.js';

/**
 * The environment a worker gets: what finding libraries and devices needs, never the service's
 * own secrets (SERVICE_DECK_*), and no LLAMA_ARG_* variable that could change the fixed command
 * line (an extra API key, another host).
 */
export function workerEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const keep = /^(PATH|HOME|TMPDIR|LANG|LC_\w+|TZ|LD_LIBRARY_PATH|CUDA_\w+|NVIDIA_\w+|GGML_\w+|HIP_\w+|ROCR_\w+|HSA_\w+|VK_\w+|OMP_\w+)$/;
  return Object.fromEntries(Object.entries(env).filter(([name]) => keep.test(name)));
}

/**
 * How a long-running worker process is spawned: only the environment it is given, no stdin, its
 * output piped unbuffered (the adapter keeps a tail), no rejection on a failed exit, ended with
 * the service, and no forced kill by execa (the machine times SIGKILL after its own grace).
 */
export const WORKER_PROCESS = {
  extendEnv: false,
  stdin: 'ignore',
  stdout: 'pipe',
  stderr: 'pipe',
  buffer: false,
  reject: false,
  cleanup: true,
  forceKillAfterDelay: false,
} as const;

/** A free loopback port: bind port 0, read it, close. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.unref();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => (port > 0 ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}

/** Keeps the last `max` bytes of a stream's output. */
export class Tail {
  #chunks: Buffer[] = [];
  #bytes = 0;
  constructor(readonly max: number) {}
  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes > this.max && this.#chunks.length > 1) this.#bytes -= this.#chunks.shift()!.length;
  }
  text(): string {
    const all = Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.max)).toString('utf8');
  }
}

/**
 * How a worker process ended, as its machine's `engine.exited` report: diagnosed from its exit,
 * its output tail and the cgroup's OOM kill count before its start and now.
 */
export async function endReport(
  worker: WorkerKind,
  result: { exitCode?: number | undefined; signal?: string | undefined },
  facts: { oomKillsBefore: number | null; outputTail: string; expected: boolean },
): Promise<{ report: ExitReport; evidence: string | null }> {
  const after = await readOomKills().catch(() => null);
  const exitCode = result.exitCode ?? null;
  const signal = result.signal ?? null;
  const diagnosis = diagnoseExit({ worker, exitCode, signal, oomKillsBefore: facts.oomKillsBefore, oomKillsAfter: after, outputTail: facts.outputTail, expected: facts.expected });
  return { report: { exitCode, signal, cause: diagnosis.cause, message: diagnosis.message }, evidence: diagnosis.evidence };
}
