// What keeps a profile from being executable (CONTRACT section 4: computed `executable` and
// `blockers`). A published profile with a blocker stays published but leaves the model lists
// (spec 2.1 rule 4). Later issues add their own blockers here.
import { open, stat } from 'node:fs/promises';
import { STT_LANGUAGES, type StoredProfile } from '../store/profile.schema.js';
import { ENHANCER_TASKS, readInstalled, type EnhancerTask } from '../store/enhancers.js';
import type { RuntimeLookup, RuntimeName } from '../adapters/runtimes.js';
import { findCommand, resolveRuntime, whisperProgram } from '../adapters/runtimes.js';

const GGUF_MAGIC = Buffer.from('GGUF', 'latin1');

/** Reads the first bytes of a file: undefined when it cannot be opened. */
async function head(file: string, length: number): Promise<Buffer | undefined> {
  let handle;
  try {
    handle = await open(file, 'r');
    const stats = await handle.stat();
    if (!stats.isFile()) return undefined;
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, 0);
    return buffer.subarray(0, bytesRead);
  } catch {
    return undefined;
  } finally {
    await handle?.close();
  }
}

/** GGUF verdicts by the file's stat stamp: an unchanged model file is not read again. */
const ggufVerdicts = new Map<string, { stamp: string; verdict: string | undefined }>();

/** Whether a chat model file exists and starts with the GGUF magic (one stat when it did not change). */
async function ggufBlocker(file: string): Promise<string | undefined> {
  let stamp: string;
  try {
    const s = await stat(file);
    if (!s.isFile()) return `model file missing: ${file}`;
    stamp = `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.mode}`;
  } catch {
    return `model file missing: ${file}`;
  }
  const known = ggufVerdicts.get(file);
  if (known?.stamp === stamp) return known.verdict;
  const bytes = await head(file, 4);
  const verdict = bytes === undefined ? `model file missing: ${file}` : bytes.equals(GGUF_MAGIC) ? undefined : `model file is not a GGUF file: ${file}`;
  if (ggufVerdicts.size > 256) ggufVerdicts.clear();
  ggufVerdicts.set(file, { stamp, verdict });
  return verdict;
}

async function fileBlocker(file: string, what = 'model file'): Promise<string | undefined> {
  return (await head(file, 1)) === undefined ? `${what} missing: ${file}` : undefined;
}

/**
 * The program a profile's worker runs, by its runtime name, and where the lookup (environment
 * variable, the project's cache, PATH) finds it now: undefined when it is not installed.
 */
export async function programOf(profile: StoredProfile, lookup: RuntimeLookup): Promise<{ runtime: string; path: string | undefined }> {
  const runtime = async (name: RuntimeName) => ({ runtime: name, path: await resolveRuntime(name, lookup) });
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
      return { runtime: program ? `whisper-${program.mode}` : 'whisper-server or whisper-cli', path: program?.binary };
    }
  }
}

async function runtimeBlocker(profile: StoredProfile, lookup: RuntimeLookup): Promise<string | undefined> {
  const program = await programOf(profile, lookup);
  return program.path === undefined ? `runtime missing: ${program.runtime}` : undefined;
}

/** An active enhancer task whose recipe is not installed (or another repository is). */
async function enhancerBlocker(enhancersDir: string | undefined, task: EnhancerTask, repo: string): Promise<string | undefined> {
  const installed = enhancersDir ? await readInstalled(enhancersDir, task) : null;
  return installed?.repo === repo ? undefined : `prompt enhancer not installed: ${repo} (${task})`;
}

export async function profileBlockers(profile: StoredProfile, lookup: RuntimeLookup): Promise<string[]> {
  const checks: Array<Promise<string | undefined>> = [runtimeBlocker(profile, lookup)];
  switch (profile.category) {
    case 'chat':
      checks.push(ggufBlocker(profile.params.model));
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
