// bench/cpuprofile: where the CPU time of a V8 profile went, by area and by function (self time).
//
// Run: BENCH_CPU_PROFILE=/tmp/own.cpuprofile npm run bench:chat -- --own (the measured requests
// only; node --cpu-prof profiles a whole run), then node dist/bench/cpuprofile.js FILE [TOP].
// Idle time is left out of the shares.
// Areas: each package under node_modules, each project file, Node's own modules
// (node:internal/…), V8's (garbage collector) and (program), the native part of Node ((native)).
import { readFile } from 'node:fs/promises';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The area a function belongs to: a package, a project file, Node itself, or V8. */
export function areaOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (inPackage) return inPackage[1]!;
  if (url.startsWith('node:')) return url.replace(/^node:internal\/(deps\/)?/, 'node:').split('/').slice(0, 2).join('/');
  const project = /\/(src|machines|bench|test)\/(.+)$/.exec(url);
  return project ? `${project[1]}/${project[2]}` : url;
}

const [file, topArg] = process.argv.slice(2);
if (!file) throw new Error('usage: node dist/bench/cpuprofile.js PROFILE.cpuprofile [TOP]');
const top = Number(topArg ?? 25);
const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile;
const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const parents = new Map<number, ProfileNode>();
for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node);
/** Time with a function of the project on the stack (each function once per sample). */
const inclusive = new Map<string, number>();
const areas = new Map<string, number>();
const functions = new Map<string, number>();
let busy = 0;
let idle = 0;
profile.samples.forEach((id, i) => {
  const node = byId.get(id);
  const delta = profile.timeDeltas[i] ?? 0;
  if (!node) return;
  const { functionName, url, lineNumber } = node.callFrame;
  if (functionName === '(idle)') {
    idle += delta;
    return;
  }
  busy += delta;
  const area = areaOf(url, functionName);
  areas.set(area, (areas.get(area) ?? 0) + delta);
  const name = `${functionName || '(anonymous)'} ${area}${url ? `:${lineNumber + 1}` : ''}`;
  functions.set(name, (functions.get(name) ?? 0) + delta);
  const seen = new Set<string>();
  for (let at: ProfileNode | undefined = node; at; at = parents.get(at.id)) {
    const frame = at.callFrame;
    const where = areaOf(frame.url, frame.functionName);
    if (!/^(src|machines)\//.test(where)) continue;
    const key = `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`;
    if (seen.has(key)) continue;
    seen.add(key);
    inclusive.set(key, (inclusive.get(key) ?? 0) + delta);
  }
});
const ms = (us: number) => (us / 1000).toFixed(1).padStart(9);
const share = (us: number) => `${((100 * us) / busy).toFixed(1).padStart(5)} %`;
console.log(`busy ${ms(busy).trim()} ms, idle ${ms(idle).trim()} ms`);
console.log('\nself time by area');
for (const [area, us] of [...areas].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${ms(us)} ms ${share(us)}  ${area}`);
console.log('\nself time by function');
for (const [name, us] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${ms(us)} ms ${share(us)}  ${name}`);
console.log('\ntotal time by project function (itself and what it calls)');
for (const [name, us] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${ms(us)} ms ${share(us)}  ${name}`);
