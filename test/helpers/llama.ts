// The real llama-server and llama-fit-params that scripts/build-llama.sh built (the test script
// runs it during set-up), a tiny generated GGUF model and a tiny vision projector for it, for the
// tests that run the real programs.
import { access, constants, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeTinyModel, type TinyModelOptions } from '../../src/adapters/tinyModel.js';
import { writeTinyProjector, type TinyProjectorOptions } from './tinyProjector.js';

/** The cache folder as the service finds it: SERVICE_DECK_CACHE_DIR, else XDG_CACHE_HOME or ~/.cache, then service-deck. */
export function serviceCacheDir(): string {
  return process.env.SERVICE_DECK_CACHE_DIR ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'service-deck');
}

/** A built runtime: its variable, else the cache's bin/ (as scripts/build-llama.sh leaves it); missing fails the test. */
async function builtRuntime(name: string, variable: string): Promise<string> {
  const binary = process.env[variable] ?? path.join(serviceCacheDir(), 'bin', name);
  try {
    await access(binary, constants.X_OK);
  } catch {
    throw new Error(`${name} is not built at ${binary}: run sh scripts/build-llama.sh (npm test does it during set-up) or set ${variable}`);
  }
  return binary;
}

/** The built llama-server: SERVICE_DECK_LLAMA_SERVER, else the cache's bin/. */
export function llamaServerPath(): Promise<string> {
  return builtRuntime('llama-server', 'SERVICE_DECK_LLAMA_SERVER');
}

/** The built llama-fit-params: SERVICE_DECK_LLAMA_FIT_PARAMS, else the cache's bin/. */
export function llamaFitParamsPath(): Promise<string> {
  return builtRuntime('llama-fit-params', 'SERVICE_DECK_LLAMA_FIT_PARAMS');
}

/** Writes a tiny chat model into `dir` and returns its path. */
export function tinyModelIn(dir: string, name = 'tiny.gguf', options: TinyModelOptions = {}): Promise<string> {
  return writeTinyModel(path.join(dir, name), options);
}

/** Writes a tiny vision projector (`--mmproj`) for the tiny chat model into `dir` and returns its path. */
export function tinyProjectorIn(dir: string, name = 'tiny-mmproj.gguf', options: TinyProjectorOptions = {}): Promise<string> {
  return writeTinyProjector(path.join(dir, name), options);
}

/**
 * Reads a streamed chat answer to its end, telling `each` how many choices came so far after every
 * chunk (a test kills the worker at a count); resolves with the error that ended the stream, or
 * undefined when it ended normally.
 */
export async function streamFailure(stream: AsyncIterable<{ choices: unknown[] }>, each: (choices: number) => void): Promise<unknown> {
  let choices = 0;
  try {
    for await (const chunk of stream) {
      choices += chunk.choices.length;
      each(choices);
    }
    return undefined;
  } catch (error) {
    return error;
  }
}

/** The stand-in llama-server (test/fixtures/fake-llama-server.mjs). */
export const FAKE_LLAMA_SERVER = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/fake-llama-server.mjs');

/**
 * An executable `llama-server` in `dir` that runs the stand-in in `mode`. The worker's environment
 * is an allowlist, so the mode (and where the stand-in notes its events) travels in the script.
 * With `outliving`, a prompt enhancer's start (its alias `prompt-enhancer-…`) leaves a process
 * behind in a session of its own that holds the start's output open: the service sees that
 * start's process outlive SIGKILL (it never ends for it), as a process stuck in the kernel does.
 * Its pid is appended to the file `outliving`; the test ends it.
 */
export async function fakeLlamaServerIn(dir: string, mode: string, events?: string, outliving?: string): Promise<string> {
  const wrapper = path.join(dir, 'llama-server');
  const vars = `FAKE_LLAMA_MODE=${mode}${events === undefined ? '' : ` FAKE_LLAMA_EVENTS="${events}"`}`;
  const stuck = outliving === undefined ? '' : `case " $* " in *" --alias prompt-enhancer-"*) setsid sh -c 'echo $$ >> "${outliving}"; exec sleep 600' & ;; esac\n`;
  await writeFile(wrapper, `#!/bin/sh\n${stuck}${vars} exec "${process.execPath}" "${FAKE_LLAMA_SERVER}" "$@"\n`, { mode: 0o755 });
  return wrapper;
}
