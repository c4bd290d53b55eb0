// External programs (CONTRACT section 1): found by environment variable, then the project's own
// built copy under the cache folder, then PATH.
import { createHash } from 'node:crypto';
import { constants, statSync, type Stats } from 'node:fs';
import { access, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { openRegular } from './regularFile.js';

export const RUNTIMES = {
  'llama-server': 'SERVICE_DECK_LLAMA_SERVER',
  'llama-fit-params': 'SERVICE_DECK_LLAMA_FIT_PARAMS',
  'sd-cli': 'SERVICE_DECK_SD_CLI',
  'whisper-cli': 'SERVICE_DECK_WHISPER_CLI',
  'whisper-server': 'SERVICE_DECK_WHISPER_SERVER',
  'espeak-ng': 'SERVICE_DECK_ESPEAK_NG',
  pocketsphinx: 'SERVICE_DECK_POCKETSPHINX',
} as const;
export type RuntimeName = keyof typeof RUNTIMES;

/**
 * The program's file name where it differs from the runtime's name: the pocketsphinx runtime is
 * the project's own engine program around libpocketsphinx (scripts/build-pocketsphinx.sh).
 */
const FILE_NAMES: Partial<Record<RuntimeName, string>> = { pocketsphinx: 'pocketsphinx-worker' };

/** Files found executable, by their stat stamp: a file that did not change needs no second access check. */
const executable = new Map<string, string>();

const stampOf = (s: Stats) => `${s.dev}:${s.ino}:${s.mode}:${s.uid}:${s.gid}:${s.size}:${s.mtimeMs}`;

export async function isExecutableFile(file: string): Promise<boolean> {
  try {
    // Synchronous: runtimes are local programs, and the inference routes check theirs on every
    // request (a thread-pool round trip costs more than the stat itself).
    const s = statSync(file);
    if (!s.isFile()) return false;
    const stamp = stampOf(s);
    if (executable.get(file) === stamp) return true;
    await access(file, constants.X_OK);
    if (executable.size > 256) executable.clear();
    executable.set(file, stamp);
    return true;
  } catch {
    return false;
  }
}

export interface RuntimeLookup {
  env: NodeJS.ProcessEnv;
  /** The project's own built copies live in `<cacheDir>/bin/`. */
  cacheDir: string;
  /** Where installed prompt enhancers live (`<state>/enhancers`); unset: none is installed. */
  enhancersDir?: string;
}

/**
 * isExecutableFile without a promise, for the per-request check: true for a file whose
 * access check passed and that did not change since, false for one that is missing or not a
 * file, undefined when only the access check can tell (then ask isExecutableFile).
 */
export function isExecutableFileNow(file: string): boolean | undefined {
  let s: Stats;
  try {
    s = statSync(file);
  } catch {
    return false;
  }
  if (!s.isFile()) return false;
  return executable.get(file) === stampOf(s) ? true : undefined;
}

/**
 * resolveRuntime without a promise: the same look-up (variable, the project's cache, PATH), with
 * null when a candidate's access check is not known (then ask resolveRuntime).
 */
export function resolveRuntimeNow(name: RuntimeName, lookup: RuntimeLookup): string | undefined | null {
  const fromEnv = lookup.env[RUNTIMES[name]];
  if (fromEnv) {
    const known = isExecutableFileNow(fromEnv);
    return known === undefined ? null : known ? path.resolve(fromEnv) : undefined;
  }
  const file = FILE_NAMES[name] ?? name;
  const candidates = [path.join(lookup.cacheDir, 'bin', file)];
  for (const dir of (lookup.env.PATH ?? '').split(path.delimiter)) if (dir) candidates.push(path.join(dir, file));
  for (const candidate of candidates) {
    const known = isExecutableFileNow(candidate);
    if (known === undefined) return null;
    if (known) return candidate;
  }
  return undefined;
}

/** The path of a runtime, or undefined when it is not installed. An env variable that names a missing file is not silently passed over. */
export async function resolveRuntime(name: RuntimeName, lookup: RuntimeLookup): Promise<string | undefined> {
  const fromEnv = lookup.env[RUNTIMES[name]];
  if (fromEnv) return (await isExecutableFile(fromEnv)) ? path.resolve(fromEnv) : undefined;
  const file = FILE_NAMES[name] ?? name;
  const built = path.join(lookup.cacheDir, 'bin', file);
  if (await isExecutableFile(built)) return built;
  return findCommand(file, lookup.env);
}

/**
 * Why a runtime was not found where its variable points: `SERVICE_DECK_LLAMA_SERVER is set to
 * /x, which is not an executable file`, or undefined when the variable is not set (the lookup then
 * went to the cache and PATH). `withPath: false` leaves the value out, for messages that reach API
 * clients (a path on the server is no business of theirs).
 */
export function runtimeVariableProblem(name: RuntimeName, env: NodeJS.ProcessEnv, withPath = true): string | undefined {
  const variable = RUNTIMES[name];
  const value = env[variable];
  if (!value) return undefined;
  return withPath ? `${variable} is set to ${value}, which is not an executable file` : `${variable} is set but names no executable file: point it at ${name}, or unset it`;
}

/** A worker's runtime_missing message: the variable that points nowhere (without its value), else `notInstalled`. */
export function runtimeMissingMessage(worker: string, names: RuntimeName[], env: NodeJS.ProcessEnv, notInstalled: string): string {
  const problems = names.flatMap((name) => runtimeVariableProblem(name, env, false) ?? []);
  return `The ${worker} cannot start: ${problems.length > 0 ? problems.join('; ') : notInstalled}.`;
}

/** A command as a shell finds it: a path with a slash as it is, a bare name on PATH. */
export async function findCommand(command: string, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  if (command.includes('/')) return (await isExecutableFile(command)) ? path.resolve(command) : undefined;
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/** The whisper.cpp program to use: whisper-server (kept loaded) when it is installed, else whisper-cli. */
export async function whisperProgram(lookup: RuntimeLookup): Promise<{ mode: 'server' | 'cli'; binary: string } | undefined> {
  const server = await resolveRuntime('whisper-server', lookup);
  if (server) return { mode: 'server', binary: server };
  const cli = await resolveRuntime('whisper-cli', lookup);
  return cli ? { mode: 'cli', binary: cli } : undefined;
}

/** Which build of a program a worker runs: the path it was found at, the file behind it, and a short fingerprint of its bytes. */
export interface Build {
  /** The path the lookup gave (an env variable's file, the cache's link, a PATH entry). */
  path: string;
  /** The file behind links: a new build behind the same link is another file. */
  real: string;
  /** The file's identity on disk (device, inode, size, mtime): replaced or rewritten, it changes. */
  stamp: string;
  /** The first 12 hex digits of the file's sha256. */
  fingerprint: string;
}

/** Fingerprints by real path and stamp: an unchanged program is hashed once. */
const fingerprints = new Map<string, string>();

/** The build of the program at `file` (undefined when it is not there). */
export async function buildOf(file: string): Promise<Build | undefined> {
  try {
    const real = await realpath(file);
    const s = await stat(real);
    if (!s.isFile()) return undefined;
    const stamp = `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
    const key = `${real}\0${stamp}`;
    let fingerprint = fingerprints.get(key);
    if (fingerprint === undefined) {
      const hash = createHash('sha256');
      // A program swapped for a FIFO after the stat is still never waited on.
      const { handle } = await openRegular(real);
      for await (const chunk of handle.createReadStream()) hash.update(chunk as Buffer);
      fingerprint = hash.digest('hex').slice(0, 12);
      if (fingerprints.size > 256) fingerprints.clear();
      fingerprints.set(key, fingerprint);
    }
    return { path: file, real, stamp, fingerprint };
  } catch {
    return undefined;
  }
}
