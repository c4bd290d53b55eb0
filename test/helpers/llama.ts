// The real llama-server that scripts/build-llama.sh built (the test script runs it during set-up)
// and a tiny generated GGUF model, for the e2e tests that run the real chat worker.
import { access, constants } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeTinyModel, type TinyModelOptions } from '../../src/adapters/tinyModel.js';

/** The built llama-server: SERVICE_DECK_LLAMA_SERVER, else the cache's bin/ (as scripts/build-llama.sh leaves it). */
export async function llamaServerPath(): Promise<string> {
  const cache = process.env.SERVICE_DECK_CACHE_DIR ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'service-deck');
  const binary = process.env.SERVICE_DECK_LLAMA_SERVER ?? path.join(cache, 'bin', 'llama-server');
  try {
    await access(binary, constants.X_OK);
  } catch {
    throw new Error(`llama-server is not built at ${binary}: run sh scripts/build-llama.sh (npm test does it during set-up)`);
  }
  return binary;
}

/** Writes a tiny chat model into `dir` and returns its path. */
export function tinyModelIn(dir: string, name = 'tiny.gguf', options: TinyModelOptions = {}): Promise<string> {
  return writeTinyModel(path.join(dir, name), options);
}
