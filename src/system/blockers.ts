// What keeps a profile from being executable (CONTRACT section 4: computed `executable` and
// `blockers`). A published profile with a blocker stays published but leaves the model lists
// (spec 2.1 rule 4). Later issues add their own blockers here.
import { open, stat } from 'node:fs/promises';
import { STT_LANGUAGES, type StoredProfile } from '../store/profile.schema.js';
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

async function runtimeBlocker(name: RuntimeName, lookup: RuntimeLookup): Promise<string | undefined> {
  return (await resolveRuntime(name, lookup)) === undefined ? `runtime missing: ${name}` : undefined;
}

async function commandBlocker(command: string, lookup: RuntimeLookup): Promise<string | undefined> {
  return (await findCommand(command, lookup.env)) === undefined ? `runtime missing: ${command}` : undefined;
}

export async function profileBlockers(profile: StoredProfile, lookup: RuntimeLookup): Promise<string[]> {
  const checks: Array<Promise<string | undefined>> = [];
  switch (profile.category) {
    case 'chat':
      checks.push(runtimeBlocker('llama-server', lookup));
      checks.push(ggufBlocker(profile.params.model));
      break;
    case 'image': {
      checks.push(runtimeBlocker('sd-cli', lookup));
      checks.push(fileBlocker(profile.params.model));
      for (const [kind, file] of Object.entries(profile.params.files)) if (file) checks.push(fileBlocker(file, `${kind} file`));
      const enhancer = profile.prompt_enhancer;
      for (const task of ['t2i', 'i2i'] as const) {
        const repo = enhancer?.[task];
        if (repo) checks.push(Promise.resolve(`prompt enhancer not installed: ${repo} (${task})`));
      }
      break;
    }
    case 'tts':
      if (profile.params.backend === 'espeak-ng') checks.push(runtimeBlocker('espeak-ng', lookup));
      else if (profile.params.command?.[0]) checks.push(commandBlocker(profile.params.command[0], lookup));
      break;
    case 'stt':
      if (profile.params.backend === 'pocketsphinx') checks.push(runtimeBlocker('pocketsphinx', lookup));
      else checks.push(whisperProgram(lookup).then((found) => (found ? undefined : 'runtime missing: whisper-server or whisper-cli')));
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
