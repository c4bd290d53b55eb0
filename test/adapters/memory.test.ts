// RAM facts for the memory check: cgroup v2 and v1 files and /proc/meminfo parsed from kernel-format
// fixtures; inactive file cache subtracted from cgroup usage, anonymous memory not; malformed files
// reported by name with a host fallback; fake /proc and /sys/fs/cgroup trees; the oom_kill counter
// read before and after; and one probe of the machine the tests run on.
import { mkdir, rm, writeFile, readFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import {
  parseCgroupV1,
  parseCgroupV2,
  parseMeminfo,
  parseProcSelfCgroup,
  ramBudget,
  ramFactsFrom,
  readOomKills,
  readRamFacts,
  type CgroupMemory,
} from '../../src/adapters/memory.js';
import { tempDir } from '../helpers/build.js';

const fixture = (name: string) => readFile(new URL(`../fixtures/cgroup/${name}`, import.meta.url), 'utf8');

const V2_FILES = ['memory.max', 'memory.current', 'memory.stat', 'memory.events'];
const V1_FILES = ['memory.limit_in_bytes', 'memory.usage_in_bytes', 'memory.stat', 'memory.oom_control'];
const fixtureSet = async (dir: string, names: string[]) =>
  Object.fromEntries(await Promise.all(names.map(async (name) => [name, await fixture(`${dir}/${name}`)] as const))) as Record<string, string>;

const v2Limited = await fixtureSet('v2-limited', V2_FILES);
const v2Unlimited = await fixtureSet('v2-unlimited', V2_FILES);
const v1 = await fixtureSet('v1', V1_FILES);
const MEMINFO = await fixture('proc/meminfo');
const SELF_V2 = await fixture('proc/self-cgroup-v2');
const SELF_V1 = await fixture('proc/self-cgroup-v1');

const GiB = 1024 ** 3;
const HOST = { totalBytes: 65773904 * 1024, availableBytes: 48213796 * 1024 };
const V2_LIMITED: CgroupMemory = { limitBytes: 17179869184, usageBytes: 9663586304, inactiveFileBytes: 2818572288, anonBytes: 5412855808, oomKills: 2 };
// 16 GiB limit - (9663586304 usage - 2818572288 inactive file) = 10334855168, below the host's 49370927104.
const V2_LIMITED_HEADROOM = 10334855168;

const v2 = (files: Record<string, string>) =>
  parseCgroupV2({ max: files['memory.max'] ?? '', current: files['memory.current'] ?? '', stat: files['memory.stat'] ?? '', events: files['memory.events'] ?? '' });
const v1Parsed = (files: Record<string, string>) =>
  parseCgroupV1({
    limit: files['memory.limit_in_bytes'] ?? '',
    usage: files['memory.usage_in_bytes'] ?? '',
    stat: files['memory.stat'] ?? '',
    oomControl: files['memory.oom_control'] ?? '',
  });
const setStat = (stat: string, key: string, value: number) => {
  const line = new RegExp(`^${key} \\d+$`, 'm');
  if (!line.test(stat)) throw new Error(`fixture has no ${key} line`);
  return stat.replace(line, `${key} ${value}`);
};

/** Writes `files` (relative path → content) under `root`. */
async function writeTree(root: string, files: Record<string, string>) {
  for (const [name, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, name)), { recursive: true });
    await writeFile(path.join(root, name), content);
  }
}
const under = (dir: string, files: Record<string, string>) => Object.fromEntries(Object.entries(files).map(([name, text]) => [`${dir}/${name}`, text]));

/** A fake machine: <dir>/proc with meminfo and self/cgroup, <dir>/cgroup as /sys/fs/cgroup. */
async function fakeMachine(t: Test, selfCgroup: string | null, cgroupFiles: Record<string, string>) {
  const dir = await tempDir(t);
  const procRoot = path.join(dir, 'proc');
  const cgroupRoot = path.join(dir, 'cgroup');
  await writeTree(procRoot, { meminfo: MEMINFO, ...(selfCgroup === null ? {} : { 'self/cgroup': selfCgroup }) });
  await mkdir(cgroupRoot, { recursive: true });
  await writeTree(cgroupRoot, cgroupFiles);
  return { procRoot, cgroupRoot };
}

t.test('cgroup v2: memory.max as a number and as max, memory.stat and memory.events', async (t) => {
  t.same(v2(v2Limited), V2_LIMITED);
  t.same(v2(v2Unlimited), { limitBytes: null, usageBytes: 3395584000, inactiveFileBytes: 1612709888, anonBytes: 1209532416, oomKills: 0 }, "'max' is no limit");
  const withoutEvents = { max: '17179869184\n', current: '9663586304\n', stat: v2Limited['memory.stat'] ?? '' };
  t.equal(parseCgroupV2(withoutEvents).oomKills, 0, 'no memory.events: no OOM kills known');
  t.equal(parseCgroupV2({ ...withoutEvents, events: 'low 0\nhigh 0\nmax 0\noom 0\n' }).oomKills, 0, 'no oom_kill line: 0');
});

t.test('cgroup v1: unlimited sentinel, hierarchical total_* counters, oom_control', async (t) => {
  t.same(v1Parsed(v1), { limitBytes: null, usageBytes: 2214592512, inactiveFileBytes: 524288000, anonBytes: 1476395008, oomKills: 3 });
  const limited = v1Parsed({ ...v1, 'memory.limit_in_bytes': '4294967296\n' });
  t.equal(limited.limitBytes, 4294967296);
  t.equal(v1Parsed({ ...v1, 'memory.limit_in_bytes': '9223372036854775807\n' }).limitBytes, null, 'unrounded LONG_MAX is no limit too');
  t.equal(v1Parsed({ ...v1, 'memory.limit_in_bytes': '9223372036854767616\n' }).limitBytes, null, 'one page under the sentinel: still beyond any machine');
  const parentLimit = setStat(v1['memory.stat'] ?? '', 'hierarchical_memory_limit', 2147483648);
  t.equal(parseCgroupV1({ limit: '4294967296', usage: '1', stat: parentLimit }).limitBytes, 2147483648, "a parent's smaller limit binds");
  const ownOnly = (v1['memory.stat'] ?? '')
    .split('\n')
    .filter((line) => !line.startsWith('total_'))
    .join('\n');
  const flat = parseCgroupV1({ limit: '9223372036854771712', usage: '108089344', stat: ownOnly });
  t.same([flat.inactiveFileBytes, flat.anonBytes, flat.oomKills], [104857600, 1593344, 0], 'without total_* lines: inactive_file and rss; no oom_control: 0');
});

t.test('/proc/meminfo: MemTotal and MemAvailable in bytes', async (t) => {
  t.same(parseMeminfo(MEMINFO), { totalBytes: 67352477696, availableBytes: 49370927104 });
  t.throws(() => parseMeminfo(MEMINFO.replace(/^MemAvailable:.*\n/m, '')), /meminfo: no MemAvailable line/);
  t.throws(() => parseMeminfo(MEMINFO.replace('MemTotal:       65773904 kB', 'MemTotal:       65773904 MB')), /meminfo: expected "MemTotal: <number> kB"/);
});

t.test('/proc/self/cgroup: the unified line and the v1 memory line', async (t) => {
  t.same(parseProcSelfCgroup(SELF_V2), { v2Path: '/user.slice/user-1000.slice/user@1000.service/app.slice/service-deck.service', v1MemoryPath: null });
  t.same(parseProcSelfCgroup(SELF_V1), { v2Path: '/system.slice/service-deck.service', v1MemoryPath: '/system.slice/service-deck.service' });
  t.same(parseProcSelfCgroup('7:cpu,memory:/a/b\n0::/\n'), { v2Path: '/', v1MemoryPath: '/a/b' }, 'memory in a shared hierarchy');
  t.same(parseProcSelfCgroup('0::/../../outside\n'), { v2Path: null, v1MemoryPath: null }, 'a path outside the namespace is unusable');
  t.same(parseProcSelfCgroup(''), { v2Path: null, v1MemoryPath: null });
});

t.test('a malformed number throws an error naming the file and the text', async (t) => {
  const good = { max: '17179869184', current: '9663586304', stat: v2Limited['memory.stat'] ?? '', events: v2Limited['memory.events'] ?? '' };
  t.throws(() => parseCgroupV2({ ...good, current: '96635x86304' }), { message: 'memory.current: expected a byte count, got "96635x86304"' });
  t.throws(() => parseCgroupV2({ ...good, max: '-1' }), /^memory\.max: .*"-1"/);
  t.throws(() => parseCgroupV2({ ...good, max: '' }), /^memory\.max: .*""/);
  t.throws(() => parseCgroupV2({ ...good, stat: good.stat.replace('inactive_file 2818572288', 'inactive_file 2.8e9') }), /^memory\.stat: .*inactive_file.*"2\.8e9"/);
  t.throws(() => parseCgroupV2({ ...good, stat: good.stat.replace(/^anon .*\n/m, '') }), /^memory\.stat: no anon line/);
  t.throws(() => parseCgroupV2({ ...good, events: 'oom_kill many\n' }), /^memory\.events: .*"many"/);
  t.throws(() => v1Parsed({ ...v1, 'memory.limit_in_bytes': 'unlimited' }), /^memory\.limit_in_bytes: .*"unlimited"/);
  t.throws(() => v1Parsed({ ...v1, 'memory.oom_control': 'oom_kill_disable 0\nunder_oom\n' }), /^memory\.oom_control: .*"under_oom"/);
});

t.test('available RAM: inactive file cache counts as free, anonymous memory does not', async (t) => {
  const limited = ramFactsFrom(HOST, { version: 2, path: '/x', memory: V2_LIMITED });
  t.equal(limited.availableBytes, V2_LIMITED_HEADROOM, 'the cgroup limit clamps below the host');
  t.ok(limited.availableBytes < limited.hostAvailableBytes);
  t.same(ramBudget(limited, GiB), { budgetBytes: V2_LIMITED_HEADROOM - GiB, reserveBytes: GiB, limitedBy: 'cgroup' });

  const moreCache = v2({ ...v2Limited, 'memory.stat': setStat(v2Limited['memory.stat'] ?? '', 'inactive_file', 2818572288 + GiB) });
  const withCache = ramBudget(ramFactsFrom(HOST, { version: 2, path: '/x', memory: moreCache }), GiB);
  t.equal(withCache.budgetBytes - (V2_LIMITED_HEADROOM - GiB), GiB, 'one more GiB of inactive file cache: one more GiB of budget');

  const moreAnon = v2({ ...v2Limited, 'memory.stat': setStat(v2Limited['memory.stat'] ?? '', 'anon', 5412855808 + GiB) });
  const withAnon = ramBudget(ramFactsFrom(HOST, { version: 2, path: '/x', memory: moreAnon }), GiB);
  t.equal(withAnon.budgetBytes, V2_LIMITED_HEADROOM - GiB, 'anon is already in usage and is not subtracted again, nor freed');

  const unlimited = ramFactsFrom(HOST, { version: 2, path: '/x', memory: v2(v2Unlimited) });
  t.equal(unlimited.availableBytes, HOST.availableBytes, "'max': the host's available memory limits");
  t.equal(ramBudget(unlimited, 0).limitedBy, 'host');

  const roomy = ramFactsFrom(HOST, { version: 2, path: '/x', memory: { ...V2_LIMITED, limitBytes: 128 * GiB } });
  t.same([roomy.availableBytes, ramBudget(roomy, 0).limitedBy], [HOST.availableBytes, 'host'], 'a limit above the host: the host limits');
  t.equal(ramFactsFrom(HOST, null).availableBytes, HOST.availableBytes);
});

t.test('ramBudget is never negative', async (t) => {
  const limited = ramFactsFrom(HOST, { version: 2, path: '/x', memory: V2_LIMITED });
  t.equal(ramBudget(limited, V2_LIMITED_HEADROOM + 1).budgetBytes, 0, 'a reserve above what is available');
  const overLimit = ramFactsFrom(HOST, { version: 1, path: '/x', memory: { ...V2_LIMITED, usageBytes: 20 * GiB, inactiveFileBytes: 0 } });
  t.equal(overLimit.availableBytes, 0, 'usage above the limit (possible for a moment): nothing available');
  t.same(ramBudget(overLimit, 512 * 1024 ** 2), { budgetBytes: 0, reserveBytes: 512 * 1024 ** 2, limitedBy: 'cgroup' });
  const cacheAboveUsage = ramFactsFrom(HOST, { version: 2, path: '/x', memory: { ...V2_LIMITED, usageBytes: 1, inactiveFileBytes: 10 } });
  t.equal(cacheAboveUsage.availableBytes, Math.min(HOST.availableBytes, V2_LIMITED.limitBytes ?? 0), 'counted usage never below 0');
  t.throws(() => ramBudget(limited, -1), RangeError);
  t.throws(() => ramBudget(limited, Number.NaN), RangeError);
});

t.test('readRamFacts on a fake v2 machine', async (t) => {
  const cgroupPath = '/user.slice/user-1000.slice/user@1000.service/app.slice/service-deck.service';
  const roots = await fakeMachine(t, SELF_V2, under(cgroupPath, v2Limited));
  t.same(await readRamFacts(roots), {
    source: 'cgroup-v2',
    hostTotalBytes: 67352477696,
    hostAvailableBytes: 49370927104,
    cgroup: { path: path.join(roots.cgroupRoot, cgroupPath), ...V2_LIMITED },
    availableBytes: V2_LIMITED_HEADROOM,
  });
  await rm(path.join(roots.cgroupRoot, cgroupPath, 'memory.events'));
  t.equal((await readRamFacts(roots)).cgroup?.oomKills, 0, 'memory.events missing: no problem, no kills known');
});

t.test('readRamFacts on a fake v1 hybrid machine (like the test machine)', async (t) => {
  const cgroupPath = '/system.slice/service-deck.service';
  // Hybrid: the unified hierarchy is mounted at unified/ without memory files, so v2 is passed over.
  const roots = await fakeMachine(t, SELF_V1, { ...under(`memory${cgroupPath}`, v1), 'unified/cgroup.procs': '1\n' });
  const facts = await readRamFacts(roots);
  t.same(facts, {
    source: 'cgroup-v1',
    hostTotalBytes: 67352477696,
    hostAvailableBytes: 49370927104,
    cgroup: { path: path.join(roots.cgroupRoot, 'memory', cgroupPath), limitBytes: null, usageBytes: 2214592512, inactiveFileBytes: 524288000, anonBytes: 1476395008, oomKills: 3 },
    availableBytes: 49370927104,
  });
  await writeFile(path.join(roots.cgroupRoot, 'memory', cgroupPath, 'memory.limit_in_bytes'), '2147483648\n');
  // 2 GiB - (2214592512 - 524288000) = 457179136
  t.equal((await readRamFacts(roots)).availableBytes, 457179136);
});

t.test('readRamFacts in a container whose own cgroup path is not mounted: the hierarchy root', async (t) => {
  const v2Roots = await fakeMachine(t, '0::/kubepods.slice/pod-1234/cri-containerd-abcd.scope\n', v2Limited);
  const facts = await readRamFacts(v2Roots);
  t.same([facts.source, facts.cgroup?.path, facts.availableBytes], ['cgroup-v2', v2Roots.cgroupRoot, V2_LIMITED_HEADROOM]);
  const v1Roots = await fakeMachine(t, '4:memory:/docker/0123abcd\n', under('memory', { ...v1, 'memory.limit_in_bytes': '2147483648' }));
  const old = await readRamFacts(v1Roots);
  t.same([old.source, old.cgroup?.path, old.availableBytes], ['cgroup-v1', path.join(v1Roots.cgroupRoot, 'memory'), 457179136]);
});

t.test('readRamFacts without cgroup memory files: the host numbers, no problem', async (t) => {
  const expected = { source: 'host', hostTotalBytes: 67352477696, hostAvailableBytes: 49370927104, cgroup: null, availableBytes: 49370927104 };
  t.same(await readRamFacts(await fakeMachine(t, SELF_V2, { 'cgroup.controllers': 'cpu io pids\n' })), expected);
  t.same(await readRamFacts(await fakeMachine(t, null, {})), expected, 'no /proc/self/cgroup at all');
  t.equal(await readOomKills(await fakeMachine(t, SELF_V1, {})), null, 'no cgroup: no OOM count');
});

t.test('malformed or half-missing cgroup files: a problem naming the file, host numbers used', async (t) => {
  const roots = await fakeMachine(t, SELF_V2, { ...v2Limited, 'memory.current': 'garbage\n' });
  const facts = await readRamFacts(roots);
  t.same([facts.source, facts.cgroup, facts.availableBytes], ['host', null, 49370927104]);
  t.match(facts.problem, `${path.join(roots.cgroupRoot, 'memory.current')}: expected a byte count, got "garbage"`);

  const v1Roots = await fakeMachine(t, SELF_V1, under('memory/system.slice/service-deck.service', { ...v1, 'memory.stat': 'cache 1\nrss 2\n' }));
  const noInactive = await readRamFacts(v1Roots);
  t.equal(noInactive.source, 'host');
  t.match(noInactive.problem, `${path.join(v1Roots.cgroupRoot, 'memory/system.slice/service-deck.service/memory.stat')}: no total_inactive_file or inactive_file line`);

  const halfRoots = await fakeMachine(t, SELF_V2, { 'memory.max': 'max\n', 'memory.stat': v2Unlimited['memory.stat'] ?? '' });
  const half = await readRamFacts(halfRoots);
  t.same([half.source, half.availableBytes], ['host', 49370927104]);
  t.match(half.problem, /memory\.current/, 'memory.max present but memory.current missing is a problem, not "no cgroup"');

  await writeFile(path.join(halfRoots.procRoot, 'meminfo'), 'MemTotal: lots\n');
  const badHost = await readRamFacts(halfRoots);
  t.match(badHost.problem, `${path.join(halfRoots.procRoot, 'meminfo')}: expected "MemTotal: <number> kB"`);
  t.ok(badHost.hostTotalBytes > 0, 'meminfo unusable: the Node.js figures');
});

t.test('the OOM-kill count read before and after a worker dies rises', async (t) => {
  const roots = await fakeMachine(t, SELF_V2, v2Limited);
  const events = path.join(roots.cgroupRoot, 'memory.events');
  const before = await readOomKills(roots);
  t.equal(before, 2);
  await writeFile(events, 'low 0\nhigh 0\nmax 1901\noom 3\noom_kill 3\noom_group_kill 0\n');
  const after = await readOomKills(roots);
  t.equal(after, 3);
  t.ok(after !== null && before !== null && after > before, 'a confirmed cgroup OOM kill');
  t.equal((await readRamFacts(roots)).cgroup?.oomKills, 3);
  await writeFile(events, 'low 0\nhigh 0\nmax 0\noom 0\n');
  t.equal(await readOomKills(roots), null, 'a kernel without the oom_kill line: unknown, not 0');

  const v1Roots = await fakeMachine(t, SELF_V1, under('memory/system.slice/service-deck.service', v1));
  t.equal(await readOomKills(v1Roots), 3);
  await writeFile(path.join(v1Roots.cgroupRoot, 'memory/system.slice/service-deck.service/memory.oom_control'), 'oom_kill_disable 0\nunder_oom 0\noom_kill 4\n');
  t.equal(await readOomKills(v1Roots), 4);
});

t.test('readRamFacts on this machine: sane positive numbers', async (t) => {
  const facts = await readRamFacts();
  t.comment(`source ${facts.source}, host ${facts.hostTotalBytes} total / ${facts.hostAvailableBytes} available, worker may use ${facts.availableBytes}`);
  t.equal(facts.problem, undefined);
  t.ok(facts.hostTotalBytes > 0, 'host total > 0');
  t.ok(facts.hostAvailableBytes > 0 && facts.hostAvailableBytes <= facts.hostTotalBytes, '0 < host available <= host total');
  t.ok(facts.availableBytes > 0 && facts.availableBytes <= facts.hostTotalBytes, '0 < available <= host total');
  if (facts.cgroup) t.ok(facts.cgroup.usageBytes > 0, 'our own cgroup uses some memory');
  t.equal(ramBudget(facts, 0).budgetBytes, facts.availableBytes);
});
