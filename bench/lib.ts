// What the benchmarks share: the repository's root, percentiles of a sample, and stopping a child
// process.
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The repository's root: the first folder up from this file with a package.json. The benchmarks
 * run as built (`npm run bench:*` compiles them with tsconfig.bench.json into dist/bench, next to
 * the service's own dist/src), or from source under tsx (bench/).
 */
export const ROOT = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('bench: no package.json above the benchmark');
    dir = up;
  }
  return dir;
})();

/** The p-th percentile (0–100) of `values`, nearest rank; NaN for none. */
export const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has ended. */
export async function stop(child: ChildProcess, graceMs = 3000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const ended = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await ended;
  clearTimeout(timer);
}
