// Host facts for the console's hardware view (`GET /api/v1/host`): the OS, the CPU, the RAM, the
// graphics controllers and the free space where the state directory lives, read through
// systeminformation and kept for a minute. A part that cannot be read is null (graphics: empty)
// and named in `unavailable`; the others are still shown. The GPUs the scheduler uses are probed
// elsewhere (src/adapters/gpus.ts, nvidia-smi): these are host facts only.
import { realpath, statfs } from 'node:fs/promises';
import path from 'node:path';
import si from 'systeminformation';
import type { HostView } from './observe/console.types.js';

/** What is read of systeminformation (tests give a stand-in). */
export type HostReader = Pick<typeof si, 'osInfo' | 'cpu' | 'mem' | 'graphics' | 'fsSize'>;

export const HOST_CACHE_MS = 60_000;

/** Free bytes for an unprivileged writer on the filesystem holding `dir`, as statfs gives them. */
export type StatfsReader = (dir: string) => Promise<{ bavail: number; bsize: number }>;

/** The mount that holds `dir`: the longest mount point that is `dir` or one of its parents. */
export function mountOf<M extends { mount: string }>(mounts: readonly M[], dir: string): M | undefined {
  const holds = (mount: string) => mount === dir || mount === path.parse(dir).root || dir.startsWith(`${mount.replace(/\/+$/, '')}/`);
  return mounts.filter((m) => m.mount !== '' && holds(m.mount)).sort((a, b) => b.mount.length - a.mount.length)[0];
}

/** Runs one read; a failure (thrown or rejected) becomes undefined. */
const attempt = async <T>(read: () => Promise<T>): Promise<T | undefined> => {
  try {
    return await read();
  } catch {
    return undefined;
  }
};

export class HostFacts {
  #cached: { at: number; view: Promise<HostView> } | undefined;

  constructor(
    readonly stateDir: string,
    readonly reader: HostReader = si,
    readonly now: () => number = Date.now,
    readonly statfsReader: StatfsReader = statfs,
  ) {}

  /**
   * Free bytes on the filesystem holding `dir`, by one statfs call on `dir` itself: the kernel
   * answers for the mount the folder is on, whatever it is (a state directory on its own tmpfs,
   * which systeminformation's list of mounts leaves out, or reached through a symlink), and it is
   * cheap enough to ask again and again while a download or an upload is written. Null when
   * unknown. (The console's disk view reads df's list: see `read()`.)
   */
  async freeBytes(dir: string): Promise<number | null> {
    try {
      const s = await this.statfsReader(dir);
      return s.bavail * s.bsize;
    } catch {
      return null;
    }
  }

  /** The host facts, read at most once a minute. */
  read(): Promise<HostView> {
    if (!this.#cached || this.now() - this.#cached.at >= HOST_CACHE_MS) this.#cached = { at: this.now(), view: this.#read() };
    return this.#cached.view;
  }

  async #read(): Promise<HostView> {
    const { reader } = this;
    const [os, cpu, mem, graphics, mounts, dir] = await Promise.all([
      attempt(() => reader.osInfo()),
      attempt(() => reader.cpu()),
      attempt(() => reader.mem()),
      attempt(() => reader.graphics()),
      attempt(() => reader.fsSize()),
      realpath(this.stateDir).catch(() => path.resolve(this.stateDir)),
    ]);
    const disk = mounts && mountOf(mounts, dir);
    const view: HostView = {
      os: os ? { platform: os.platform, distro: os.distro, release: os.release, kernel: os.kernel, arch: os.arch, hostname: os.hostname } : null,
      cpu: cpu ? { manufacturer: cpu.manufacturer, brand: cpu.brand, cores: cpu.cores, physicalCores: cpu.physicalCores, speedGHz: cpu.speed } : null,
      memory: mem ? { totalBytes: mem.total, availableBytes: mem.available } : null,
      graphics: (graphics?.controllers ?? []).map((c) => ({
        vendor: c.vendor,
        model: c.model,
        driverVersion: c.driverVersion || null,
        // systeminformation gives VRAM in MiB (null when unknown).
        vramMiB: typeof c.vram === 'number' ? c.vram : null,
      })),
      disk: disk ? { mount: disk.mount, sizeBytes: disk.size, availableBytes: disk.available } : null,
      node: process.version,
      read_at: new Date(this.now()).toISOString(),
      unavailable: [],
    };
    for (const [part, value] of Object.entries({ os, cpu, memory: mem, graphics, disk })) if (value === undefined) view.unavailable.push(part);
    return view;
  }
}
