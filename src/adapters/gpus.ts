// GPU inventory (CONTRACT section 1): real probing through nvidia-smi, GPUs ordered by UUID, with
// their compute processes so that own workers and foreign processes are told apart. The
// environment variable SERVICE_DECK_GPUS replaces the probe: `none` (CPU only), an inline JSON
// array, or the path of a JSON file that is read again at every probe (tests change it at run
// time). Foreign processes are only ever looked at, never signalled. A process started by one of
// our workers (a speech server behind a wrapper script, say) is that worker's: it is reported
// under the worker's pid, so that it is never taken for a foreign process.
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { z } from 'zod';
import { findCommand } from './runtimes.js';

export interface GpuProcess {
  pid: number;
  usedMiB: number;
  /** Started by this service (one of its workers). */
  own: boolean;
}

export interface Gpu {
  uuid: string;
  name: string;
  memoryTotalMiB: number;
  memoryFreeMiB: number;
  processes: GpuProcess[];
}

export interface GpuInventory {
  source: 'nvidia-smi' | 'simulated' | 'none';
  gpus: Gpu[];
  /** Why the probe found nothing although it tried (nvidia-smi failed), if it did. */
  problem?: string;
}

const simulatedSchema = z.array(
  z.strictObject({
    uuid: z.string().min(1),
    name: z.string().default('simulated GPU'),
    memoryTotalMiB: z.number().int().min(0),
    memoryFreeMiB: z.number().int().min(0).optional(),
    processes: z.array(z.strictObject({ pid: z.number().int(), usedMiB: z.number().int().min(0) })).default([]),
  }),
);

const byUuid = (a: Gpu, b: Gpu) => (a.uuid < b.uuid ? -1 : a.uuid > b.uuid ? 1 : 0);

function csvRows(text: string): string[][] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .map((line) => line.split(',').map((cell) => cell.trim()));
}

function mib(cell: string | undefined): number {
  const value = Number(cell);
  return Number.isFinite(value) ? Math.round(value) : 0;
}

/**
 * Builds the inventory from `nvidia-smi --query-gpu=uuid,name,memory.total,memory.free` and
 * `--query-compute-apps=gpu_uuid,pid,used_memory` (both `--format=csv,noheader,nounits`).
 */
export function parseNvidiaSmi(gpuCsv: string, appsCsv: string, ownPids: ReadonlySet<number>): Gpu[] {
  const gpus = csvRows(gpuCsv).flatMap(([uuid, name, total, free]) =>
    uuid ? [{ uuid, name: name ?? '', memoryTotalMiB: mib(total), memoryFreeMiB: mib(free), processes: [] as GpuProcess[] }] : [],
  );
  for (const [uuid, pid, used] of csvRows(appsCsv)) {
    const gpu = gpus.find((g) => g.uuid === uuid);
    const processId = Number(pid);
    if (gpu && Number.isInteger(processId)) gpu.processes.push({ pid: processId, usedMiB: mib(used), own: ownPids.has(processId) });
  }
  return gpus.sort(byUuid);
}

export function simulatedInventory(json: unknown, ownPids: ReadonlySet<number>, origin: string): Gpu[] {
  const parsed = simulatedSchema.safeParse(json);
  if (!parsed.success) throw new Error(`SERVICE_DECK_GPUS (${origin}): ${z.prettifyError(parsed.error)}`);
  return parsed.data
    .map((gpu) => {
      const used = gpu.processes.reduce((sum, p) => sum + p.usedMiB, 0);
      return {
        uuid: gpu.uuid,
        name: gpu.name,
        memoryTotalMiB: gpu.memoryTotalMiB,
        memoryFreeMiB: gpu.memoryFreeMiB ?? Math.max(0, gpu.memoryTotalMiB - used),
        processes: gpu.processes.map((p) => ({ ...p, own: ownPids.has(p.pid) })),
      };
    })
    .sort(byUuid);
}

/** The parent pid of a process, from /proc/<pid>/stat (undefined when it is gone or unreadable). */
async function parentOf(pid: number): Promise<number | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  // The command name (field 2) is in parentheses and may hold spaces: the fields after the last ')'.
  const after = stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
  const parent = Number(after?.[1]);
  return Number.isInteger(parent) && parent > 0 ? parent : undefined;
}

/** The own worker pid a process descends from, if any (up to 16 generations up). */
export async function ownAncestor(pid: number, ownPids: ReadonlySet<number>): Promise<number | undefined> {
  let current: number | undefined = pid;
  for (let depth = 0; depth < 16 && current !== undefined && current > 1; depth++) {
    if (ownPids.has(current)) return current;
    current = await parentOf(current);
  }
  return undefined;
}

/** Processes that descend from one of our workers are reported as that worker. */
async function attributeDescendants(gpus: Gpu[], ownPids: ReadonlySet<number>): Promise<Gpu[]> {
  if (ownPids.size === 0) return gpus;
  return Promise.all(
    gpus.map(async (gpu) => ({
      ...gpu,
      processes: await Promise.all(
        gpu.processes.map(async (p) => {
          if (p.own) return p;
          const ancestor = await ownAncestor(p.pid, ownPids);
          return ancestor === undefined ? p : { pid: ancestor, usedMiB: p.usedMiB, own: true };
        }),
      ),
    })),
  );
}

export async function probeGpus(env: NodeJS.ProcessEnv, ownPids: ReadonlySet<number> = new Set()): Promise<GpuInventory> {
  const inventory = await probeRaw(env, ownPids);
  return { ...inventory, gpus: await attributeDescendants(inventory.gpus, ownPids) };
}

async function probeRaw(env: NodeJS.ProcessEnv, ownPids: ReadonlySet<number>): Promise<GpuInventory> {
  const override = env.SERVICE_DECK_GPUS?.trim();
  if (override === 'none') return { source: 'none', gpus: [] };
  if (override) {
    const inline = override.startsWith('[');
    const text = inline ? override : await readFile(override, 'utf8');
    return { source: 'simulated', gpus: simulatedInventory(JSON.parse(text) as unknown, ownPids, inline ? 'inline' : override) };
  }
  const smi = await findCommand('nvidia-smi', env);
  if (!smi) return { source: 'none', gpus: [] };
  try {
    const options = { timeout: 10_000, env, extendEnv: false } as const;
    const gpus = await execa(smi, ['--query-gpu=uuid,name,memory.total,memory.free', '--format=csv,noheader,nounits'], options);
    const apps = await execa(smi, ['--query-compute-apps=gpu_uuid,pid,used_memory', '--format=csv,noheader,nounits'], options);
    return { source: 'nvidia-smi', gpus: parseNvidiaSmi(gpus.stdout, apps.stdout, ownPids) };
  } catch (error) {
    return { source: 'nvidia-smi', gpus: [], problem: `nvidia-smi failed: ${(error as Error).message.split('\n')[0] ?? ''}` };
  }
}
