// RAM facts for the memory check before every worker start: the host's /proc/meminfo and the
// memory cgroup this process lives in (v2 unified or v1, as systemd and containers set it up).
// What a new worker may use is the smaller of the host's available memory and the cgroup's
// headroom, limit - (usage - inactive file cache): inactive file pages are reclaimed before the
// kernel OOM-kills anything, anonymous memory is not, so only the former is subtracted. The
// cgroup's oom_kill counter, read before and after a worker dies, confirms a cgroup OOM kill.
// Missing cgroup files mean "no cgroup limit"; malformed ones fall back to the host numbers with
// a `problem` that names the file, so the scheduler keeps working.
import { access, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';

export interface CgroupMemory {
  /** null: no limit ('max' in v2, page-rounded LONG_MAX in v1). */
  limitBytes: number | null;
  usageBytes: number;
  inactiveFileBytes: number;
  anonBytes: number;
  /** Processes killed by the OOM killer inside this cgroup (and its children); 0 if the kernel does not say. */
  oomKills: number;
}

export interface HostMemory {
  totalBytes: number;
  availableBytes: number;
}

/** The cgroup paths of /proc/self/cgroup, as the kernel prints them ('/' at a namespace root). */
export interface ProcSelfCgroup {
  /** From the unified `0::/path` line. */
  v2Path: string | null;
  /** From the v1 line whose controller list holds `memory`. */
  v1MemoryPath: string | null;
}

export interface RamFacts {
  source: 'cgroup-v2' | 'cgroup-v1' | 'host';
  hostTotalBytes: number;
  hostAvailableBytes: number;
  /** `path` is the cgroup's directory on disk, e.g. /sys/fs/cgroup/memory/system.slice/x.service. */
  cgroup: null | ({ path: string } & CgroupMemory);
  /** What a new worker may use before the reserve: min(host available, cgroup limit - (usage - inactive file)). */
  availableBytes: number;
  /** Why cgroup or host numbers could not be read as they should (the file is named); the others were used. */
  problem?: string;
}

export interface RamBudget {
  /** availableBytes - reserve, never below 0. */
  budgetBytes: number;
  reserveBytes: number;
  limitedBy: 'cgroup' | 'host';
}

export interface RamProbeOptions {
  /** Default '/proc'. */
  procRoot?: string;
  /** Default '/sys/fs/cgroup'. */
  cgroupRoot?: string;
}

/** A file's content that is not what the kernel writes; `file` is its base name. */
class MalformedFile extends Error {
  constructor(
    readonly file: string,
    readonly detail: string,
  ) {
    super(`${file}: ${detail}`);
  }
}

function byteCount(file: string, text: string | undefined, what = 'a byte count'): number {
  const trimmed = (text ?? '').trim();
  if (!/^\d+$/.test(trimmed)) throw new MalformedFile(file, `expected ${what}, got ${JSON.stringify(trimmed)}`);
  const value = Number(trimmed);
  if (!Number.isSafeInteger(value)) throw new MalformedFile(file, `${what} out of range: ${trimmed}`);
  return value;
}

/**
 * v1 prints "no limit" as LONG_MAX rounded down to a page, 9223372036854771712; that and anything
 * else beyond 2^53 bytes (8 PiB, more than any machine has) means no limit.
 */
function v1Limit(file: string, text: string | undefined): number | null {
  const trimmed = (text ?? '').trim();
  if (/^\d+$/.test(trimmed) && BigInt(trimmed) > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  return byteCount(file, trimmed, 'a byte limit');
}

/** `key value` lines (memory.stat, memory.events, memory.oom_control) as raw text per key. */
function keyValues(file: string, text: string): Map<string, string> {
  const table = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const match = /^(\S+)\s+(\S+)$/.exec(line.trim());
    if (!match) throw new MalformedFile(file, `expected "key value", got ${JSON.stringify(line)}`);
    table.set(match[1] as string, match[2] as string);
  }
  return table;
}

function required(file: string, table: Map<string, string>, ...keys: string[]): number {
  const key = keys.find((k) => table.has(k));
  if (key === undefined) throw new MalformedFile(file, `no ${keys.join(' or ')} line`);
  return byteCount(file, table.get(key), `a number for ${key}`);
}

function oomKillCount(file: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const table = keyValues(file, text);
  return table.has('oom_kill') ? byteCount(file, table.get('oom_kill'), 'a number for oom_kill') : undefined;
}

/** The v2 files memory.max, memory.current, memory.stat and (optional) memory.events. */
export function parseCgroupV2(files: { max: string; current: string; stat: string; events?: string }): CgroupMemory {
  const max = files.max.trim();
  const stat = keyValues('memory.stat', files.stat);
  return {
    limitBytes: max === 'max' ? null : byteCount('memory.max', max, "a byte limit or 'max'"),
    usageBytes: byteCount('memory.current', files.current),
    inactiveFileBytes: required('memory.stat', stat, 'inactive_file'),
    anonBytes: required('memory.stat', stat, 'anon'),
    oomKills: oomKillCount('memory.events', files.events) ?? 0,
  };
}

/**
 * The v1 files memory.limit_in_bytes, memory.usage_in_bytes, memory.stat and (optional)
 * memory.oom_control. The limit is the smaller of limit_in_bytes and the stat's
 * hierarchical_memory_limit (a parent's limit binds too); the hierarchical total_* counters are
 * preferred over the cgroup's own.
 */
export function parseCgroupV1(files: { limit: string; usage: string; stat: string; oomControl?: string }): CgroupMemory {
  const stat = keyValues('memory.stat', files.stat);
  const own = v1Limit('memory.limit_in_bytes', files.limit);
  const hierarchical = stat.has('hierarchical_memory_limit') ? v1Limit('memory.stat', stat.get('hierarchical_memory_limit')) : null;
  const limits = [own, hierarchical].filter((limit) => limit !== null);
  return {
    limitBytes: limits.length > 0 ? Math.min(...limits) : null,
    usageBytes: byteCount('memory.usage_in_bytes', files.usage),
    inactiveFileBytes: required('memory.stat', stat, 'total_inactive_file', 'inactive_file'),
    anonBytes: required('memory.stat', stat, 'total_rss', 'rss'),
    oomKills: oomKillCount('memory.oom_control', files.oomControl) ?? 0,
  };
}

/** /proc/meminfo: MemTotal and MemAvailable, printed in kB. */
export function parseMeminfo(text: string): HostMemory {
  const kilobytes = (key: string): number => {
    const line = text.split('\n').find((l) => l.startsWith(`${key}:`));
    if (line === undefined) throw new MalformedFile('meminfo', `no ${key} line`);
    const match = /^\S+:\s+(\d+) kB$/.exec(line.trim());
    if (!match) throw new MalformedFile('meminfo', `expected "${key}: <number> kB", got ${JSON.stringify(line)}`);
    return byteCount('meminfo', match[1], `a number for ${key}`) * 1024;
  };
  return { totalBytes: kilobytes('MemTotal'), availableBytes: kilobytes('MemAvailable') };
}

/** /proc/self/cgroup: `hierarchy:controllers:path` lines. A path that climbs out of the namespace (`..`) is unusable. */
export function parseProcSelfCgroup(text: string): ProcSelfCgroup {
  const result: ProcSelfCgroup = { v2Path: null, v1MemoryPath: null };
  for (const line of text.split('\n')) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    const [id, controllers, where] = [line.slice(0, first), line.slice(first + 1, second), line.slice(second + 1).trim()];
    if (!where.startsWith('/') || where.split('/').includes('..')) continue;
    if (id === '0' && controllers === '') result.v2Path = where;
    else if (controllers.split(',').includes('memory')) result.v1MemoryPath = where;
  }
  return result;
}

/** Pure: the facts from host numbers and the cgroup found (if any). */
export function ramFactsFrom(host: HostMemory, found: { version: 1 | 2; path: string; memory: CgroupMemory } | null): RamFacts {
  const facts: RamFacts = {
    source: found ? (found.version === 2 ? 'cgroup-v2' : 'cgroup-v1') : 'host',
    hostTotalBytes: host.totalBytes,
    hostAvailableBytes: host.availableBytes,
    cgroup: found ? { path: found.path, ...found.memory } : null,
    availableBytes: host.availableBytes,
  };
  const headroom = cgroupHeadroom(facts);
  if (headroom !== null) facts.availableBytes = Math.min(host.availableBytes, headroom);
  return facts;
}

function cgroupHeadroom(facts: RamFacts): number | null {
  const cgroup = facts.cgroup;
  if (!cgroup || cgroup.limitBytes === null) return null;
  const counted = Math.max(0, cgroup.usageBytes - cgroup.inactiveFileBytes);
  return Math.max(0, cgroup.limitBytes - counted);
}

export function ramBudget(facts: RamFacts, reserveBytes: number): RamBudget {
  if (!(reserveBytes >= 0)) throw new RangeError(`RAM reserve must be a byte count >= 0, got ${reserveBytes}`);
  const headroom = cgroupHeadroom(facts);
  return {
    budgetBytes: Math.max(0, facts.availableBytes - reserveBytes),
    reserveBytes,
    limitedBy: headroom !== null && headroom < facts.hostAvailableBytes ? 'cgroup' : 'host',
  };
}

// ---- the real I/O ----

interface CgroupDir {
  version: 1 | 2;
  dir: string;
}

function roots(options: RamProbeOptions): { procRoot: string; cgroupRoot: string } {
  return { procRoot: options.procRoot ?? '/proc', cgroupRoot: options.cgroupRoot ?? '/sys/fs/cgroup' };
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

async function readIfPresent(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (error) {
    if (isMissing(error)) return undefined;
    throw error;
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await access(file);
    return true;
  } catch {
    return false;
  }
}

/**
 * The process's own cgroup directory (v2 first, then v1), else the root of a namespaced
 * container's hierarchy, where /proc/self/cgroup often shows a path that is not mounted.
 */
async function findCgroupDir(procRoot: string, cgroupRoot: string): Promise<CgroupDir | null> {
  const self = parseProcSelfCgroup((await readIfPresent(path.join(procRoot, 'self', 'cgroup'))) ?? '');
  const candidates: CgroupDir[] = [];
  if (self.v2Path !== null) candidates.push({ version: 2, dir: path.join(cgroupRoot, self.v2Path) });
  if (self.v1MemoryPath !== null) candidates.push({ version: 1, dir: path.join(cgroupRoot, 'memory', self.v1MemoryPath) });
  candidates.push({ version: 2, dir: cgroupRoot }, { version: 1, dir: path.join(cgroupRoot, 'memory') });
  for (const candidate of candidates) {
    if (await exists(path.join(candidate.dir, candidate.version === 2 ? 'memory.max' : 'memory.limit_in_bytes'))) return candidate;
  }
  return null;
}

async function readCgroup({ version, dir }: CgroupDir): Promise<CgroupMemory> {
  const read = (name: string) => readFile(path.join(dir, name), 'utf8');
  const optional = (name: string) => readIfPresent(path.join(dir, name));
  if (version === 2) {
    const [max, current, stat, events] = await Promise.all([read('memory.max'), read('memory.current'), read('memory.stat'), optional('memory.events')]);
    return parseCgroupV2({ max, current, stat, ...(events === undefined ? {} : { events }) });
  }
  const [limit, usage, stat, oomControl] = await Promise.all([
    read('memory.limit_in_bytes'),
    read('memory.usage_in_bytes'),
    read('memory.stat'),
    optional('memory.oom_control'),
  ]);
  return parseCgroupV1({ limit, usage, stat, ...(oomControl === undefined ? {} : { oomControl }) });
}

function describe(error: unknown, dir: string): string {
  if (error instanceof MalformedFile) return `${path.join(dir, error.file)}: ${error.detail}`;
  return (error as Error).message;
}

async function readHost(procRoot: string): Promise<{ host: HostMemory; problem?: string }> {
  try {
    return { host: parseMeminfo(await readFile(path.join(procRoot, 'meminfo'), 'utf8')) };
  } catch (error) {
    const host = { totalBytes: os.totalmem(), availableBytes: os.freemem() };
    return { host, problem: `${describe(error, procRoot)}; using the Node.js figures instead` };
  }
}

export async function readRamFacts(options: RamProbeOptions = {}): Promise<RamFacts> {
  const { procRoot, cgroupRoot } = roots(options);
  const problems: string[] = [];
  const { host, problem: hostProblem } = await readHost(procRoot);
  if (hostProblem) problems.push(hostProblem);
  let found: { version: 1 | 2; path: string; memory: CgroupMemory } | null = null;
  const where = await findCgroupDir(procRoot, cgroupRoot);
  if (where) {
    try {
      found = { version: where.version, path: where.dir, memory: await readCgroup(where) };
    } catch (error) {
      problems.push(`cgroup v${where.version} memory files unusable, ${describe(error, where.dir)}; using host numbers only`);
    }
  }
  const facts = ramFactsFrom(host, found);
  if (problems.length > 0) facts.problem = problems.join('; ');
  return facts;
}

/** The oom_kill counter of our cgroup, or null when there is none to read (no cgroup, old kernel, unreadable). */
export async function readOomKills(options: RamProbeOptions = {}): Promise<number | null> {
  const { procRoot, cgroupRoot } = roots(options);
  const where = await findCgroupDir(procRoot, cgroupRoot);
  if (!where) return null;
  const name = where.version === 2 ? 'memory.events' : 'memory.oom_control';
  try {
    return oomKillCount(name, await readIfPresent(path.join(where.dir, name))) ?? null;
  } catch {
    return null;
  }
}
