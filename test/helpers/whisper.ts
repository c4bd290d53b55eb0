// The real whisper.cpp programs that scripts/build-whisper.sh built (set-up runs it) and a tiny
// generated whisper model, for the tests that run whisper.cpp for real.
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { resolveRuntime } from '../../src/adapters/runtimes.js';
import { writeTinyWhisper, type TinyWhisperOptions } from './tinyWhisper.js';

/**
 * whisper-server and whisper-cli found the way the service finds them (their variable, the cache's
 * bin/, then PATH). Set-up builds them, so a missing one fails the test and says what to run.
 */
export async function whisperPrograms(): Promise<{ server: string; cli: string }> {
  const lookup = { env: process.env, cacheDir: loadConfig({}, process.env).cacheDir };
  const [server, cli] = await Promise.all([resolveRuntime('whisper-server', lookup), resolveRuntime('whisper-cli', lookup)]);
  if (!server || !cli) {
    const missing = [server ? '' : 'whisper-server', cli ? '' : 'whisper-cli'].filter(Boolean).join(' and ');
    throw new Error(`${missing} not found (by its SERVICE_DECK_WHISPER_* variable, in ${path.join(lookup.cacheDir, 'bin')}, on PATH): run sh scripts/build-whisper.sh (set-up does it)`);
  }
  return { server, cli };
}

/** Writes a tiny whisper model into `dir` and returns its path. */
export function tinyWhisperIn(dir: string, name = 'tiny-whisper.bin', options: TinyWhisperOptions = {}): Promise<string> {
  return writeTinyWhisper(path.join(dir, name), options);
}
