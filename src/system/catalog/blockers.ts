// What keeps a profile from being executable (CONTRACT section 4: computed `executable` and
// `blockers`). A published profile with a blocker stays published but leaves the model lists
// (spec 2.1 rule 4). A new kind of blocker is one more check here, with its code.
import { statSync } from 'node:fs';
import { stat, statfs } from 'node:fs/promises';
import { STT_LANGUAGES, type StoredProfile } from '../../store/profile.schema.js';
import { ENHANCER_TASKS, readInstalled, type EnhancerTask } from '../../store/enhancers.js';
import type { RuntimeLookup, RuntimeName } from '../../adapters/runtimes.js';
import { findCommand, resolveRuntime, resolveRuntimeNow, runtimeVariableProblem, whisperProgram } from '../../adapters/runtimes.js';
import { fileKind, onProbeLane, openRegular, statStamp } from '../../adapters/regularFile.js';

const GGUF_MAGIC = Buffer.from('GGUF', 'latin1');

/** What a probe found at a path: nothing, something other than a regular file, or a file and its first bytes. */
type Probe = { missing: true } | { kind: string } | { head: Buffer | undefined };

/**
 * The first bytes of each probed file by its stat stamp: an unchanged file is stat'ed, not opened
 * again. `local`: the file lies on a filesystem of this machine (see localFilesystem).
 */
const heads = new Map<string, { stamp: string; head: Buffer | undefined; local: boolean }>();

/**
 * Filesystems whose stat may wait on a network or a user-space server (statfs's f_type): NFS,
 * SMB/CIFS, FUSE, 9p, Ceph, Lustre, GPFS, AFS, BeeGFS, OCFS2. A file there is always stat'ed on
 * the probe lane, off the event loop.
 */
const REMOTE_FILESYSTEMS = new Set([
  0x6969, 0xff534d42, 0xfe534d42, 0x517b, 0x65735546, 0x01021997, 0x00c36400, 0x0bd00bd0, 0x47504653, 0x5346414f, 0x6b414653, 0x19830326, 0x7461636f,
]);

async function localFilesystem(file: string): Promise<boolean> {
  try {
    return !REMOTE_FILESYSTEMS.has((await statfs(file)).type);
  } catch {
    return false;
  }
}

/**
 * Stats a profile's file, and opens it only when it is a regular file that changed since the last
 * probe (src/adapters/regularFile.ts: a FIFO or device is never opened). `head` is undefined when
 * the file cannot be read.
 *
 * Every chat request checks its profile's model file: this is the hot path. A known file on a
 * local filesystem is stat'ed at once, on the event loop like the runtime and the token file: the
 * thread pool's round trip costs many times the stat. Anything else (a first look, a change, a
 * network filesystem, a stat that fails other than as missing) goes to the probe lane.
 */
function probe(file: string): Promise<Probe> {
  const now = probeNow(file);
  if (now) return Promise.resolve(now);
  return onProbeLane(async () => {
    let stats;
    try {
      stats = await stat(file);
    } catch {
      return { missing: true };
    }
    if (!stats.isFile()) return { kind: fileKind(stats) };
    const stamp = statStamp(stats);
    const known = heads.get(file);
    if (known?.stamp === stamp) return { head: known.head };
    const head = await readHead(file, GGUF_MAGIC.length);
    const local = await localFilesystem(file);
    if (heads.size > 4096) heads.clear();
    heads.set(file, { stamp, head, local });
    return { head };
  });
}

/**
 * The probe of a known file on a local filesystem, answered on the event loop: its head from
 * memory when its stat is unchanged, or missing when it is gone. Undefined when only the probe
 * lane can tell (a first look, a change, a network filesystem, a stat that fails otherwise).
 */
function probeNow(file: string): Probe | undefined {
  const known = heads.get(file);
  if (!known?.local) return undefined;
  let stats;
  try {
    stats = statSync(file);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? { missing: true } : undefined;
  }
  return stats.isFile() && statStamp(stats) === known.stamp ? { head: known.head } : undefined;
}

async function readHead(file: string, length: number): Promise<Buffer | undefined> {
  let opened;
  try {
    opened = await openRegular(file);
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await opened.handle.read(buffer, 0, length, 0);
    return buffer.subarray(0, bytesRead);
  } catch {
    return undefined;
  } finally {
    await opened?.handle.close();
  }
}

/** Why a file a profile names cannot be used, or undefined; `gguf` also wants the GGUF magic. */
async function fileBlocker(file: string, what = 'model file', gguf = false): Promise<string | undefined> {
  const found = await probe(file);
  if ('missing' in found || ('head' in found && found.head === undefined)) return `${what} missing: ${file}`;
  if ('kind' in found) return `${what} is a ${found.kind}, not a regular file: ${file}`;
  if (gguf && !found.head?.equals(GGUF_MAGIC)) return `${what} is not a GGUF file: ${file}`;
  return undefined;
}

/**
 * The program a profile's worker runs, by its runtime name, and where the lookup (environment
 * variable, the project's cache, PATH) finds it now: undefined when it is not installed.
 */
export async function programOf(profile: StoredProfile, lookup: RuntimeLookup): Promise<{ runtime: string; path: string | undefined; looked?: RuntimeName[] }> {
  const runtime = async (name: RuntimeName) => ({ runtime: name, path: await resolveRuntime(name, lookup), looked: [name] });
  switch (profile.category) {
    case 'chat':
      return runtime('llama-server');
    case 'image':
      return runtime('sd-cli');
    case 'tts': {
      if (profile.params.backend === 'espeak-ng') return runtime('espeak-ng');
      // The schema requires the openai-server backend's command line.
      const command = profile.params.command?.[0] ?? '';
      return { runtime: command, path: await findCommand(command, lookup.env) };
    }
    case 'stt': {
      if (profile.params.backend === 'pocketsphinx') return runtime('pocketsphinx');
      const program = await whisperProgram(lookup);
      return { runtime: program ? `whisper-${program.mode}` : 'whisper-server or whisper-cli', path: program?.binary, looked: ['whisper-server', 'whisper-cli'] };
    }
  }
}

async function runtimeBlocker(profile: StoredProfile, lookup: RuntimeLookup): Promise<string | undefined> {
  const program = await programOf(profile, lookup);
  if (program.path !== undefined) return undefined;
  // A variable that points nowhere is named: the operator set it, and may not know it is wrong.
  const problems = (program.looked ?? []).flatMap((name) => runtimeVariableProblem(name, lookup.env) ?? []);
  return `runtime missing: ${program.runtime}${problems.length > 0 ? ` (${problems.join('; ')})` : ''}`;
}

/** An active enhancer task whose recipe is not installed (or another repository is). */
async function enhancerBlocker(enhancersDir: string | undefined, task: EnhancerTask, repo: string): Promise<string | undefined> {
  const installed = enhancersDir ? await readInstalled(enhancersDir, task) : null;
  return installed?.repo === repo ? undefined : `prompt enhancer not installed: ${repo} (${task})`;
}

/**
 * Whether a chat profile has no blockers, decided without a promise when all it needs was seen
 * before and did not change (every chat request asks): true when llama-server is found
 * where the look-up found an executable before and the model file is the GGUF file probed before,
 * unchanged, on a local filesystem. Undefined when only profileBlockers can tell: a first look, a
 * change, a network filesystem, or a missing part (whose blocker profileBlockers then names).
 */
export function chatReadyNow(profile: StoredProfile, lookup: RuntimeLookup): true | undefined {
  if (profile.category !== 'chat') return undefined;
  if (typeof resolveRuntimeNow('llama-server', lookup) !== 'string') return undefined;
  const found = probeNow(profile.params.model);
  return found && 'head' in found && found.head?.equals(GGUF_MAGIC) ? true : undefined;
}

export async function profileBlockers(profile: StoredProfile, lookup: RuntimeLookup): Promise<string[]> {
  const checks: Array<Promise<string | undefined>> = [runtimeBlocker(profile, lookup)];
  switch (profile.category) {
    case 'chat':
      checks.push(fileBlocker(profile.params.model, 'model file', true));
      break;
    case 'image': {
      checks.push(fileBlocker(profile.params.model));
      for (const [kind, file] of Object.entries(profile.params.files)) if (file) checks.push(fileBlocker(file, `${kind} file`));
      const enhancer = profile.prompt_enhancer;
      for (const task of ENHANCER_TASKS) {
        const repo = enhancer?.[task];
        if (repo) checks.push(enhancerBlocker(lookup.enhancersDir, task, repo));
      }
      break;
    }
    case 'stt':
      if (profile.params.model) checks.push(fileBlocker(profile.params.model));
      if (!STT_LANGUAGES[profile.params.backend].includes(profile.params.defaultLanguage)) {
        checks.push(
          Promise.resolve(
            `default language ${profile.params.defaultLanguage} not supported by the ${profile.params.backend} backend (it transcribes ${STT_LANGUAGES[profile.params.backend].join(', ')}): set params.defaultLanguage`,
          ),
        );
      }
      break;
  }
  return (await Promise.all(checks)).filter((b): b is string => b !== undefined);
}
