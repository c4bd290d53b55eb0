// The whisper.cpp STT backend (spec 3.5, 4.6) for real deployments, with the model file from the
// profile. Two programs of whisper.cpp can serve:
// Both run on the CPU (-ng, and no GPU visible), as spec 3.5 has it.
// - `whisper-server` (preferred): started once with the model, kept loaded, each recording is one
//   POST /inference on its loopback port; ready means GET /health answered 200 (an older build
//   without /health: its root page answers once the model is loaded).
// - `whisper-cli`: no process stays; the start checks that the program runs, and each recording
//   is one run on a WAV file in a private temporary folder (0700) that is removed afterwards.
// Found as runtimes `whisper-server` (SERVICE_DECK_WHISPER_SERVER) and `whisper-cli`
// (SERVICE_DECK_WHISPER_CLI), by the variable, the project's cache, then PATH.
import { createWriteStream, openAsBlob } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { execa } from 'execa';
import type { SttLaunch } from '../../../machines/sttWorker/index.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { runtimeMissingMessage, whisperProgram, type RuntimeLookup } from '../../adapters/runtimes.js';
import { pcmStream, wavHeader, type PcmFile } from '../../adapters/wav.js';
import type { StartHooks } from '../engine.js';
import { freePort, workerEnv } from '../process.js';

const TRANSCRIBE_TIMEOUT_MS = 300_000;

export class WhisperFailure extends Error {
  override name = 'WhisperFailure';
}

/** How a loaded start transcribes: over HTTP to its server, or one CLI run per recording. */
export type WhisperEngine = { mode: 'server'; port: number } | { mode: 'cli'; binary: string; model: string; threads: number };

/** The STT worker runs on the CPU (spec 3.5): a CUDA build of whisper.cpp sees no GPU and is told not to use one (-ng). */
const cpuOnly = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({ ...workerEnv(env), CUDA_VISIBLE_DEVICES: '' });

const SAMPLE_RATE = 16_000;

/**
 * One checked recording (16-bit PCM, 16 kHz mono, its samples in its file) through a loaded
 * whisper.cpp start, as a plain WAV: a canonical header before the samples, which are read from the
 * file as they are sent or copied (never the whole recording in memory).
 */
export async function whisperTranscribe(engine: WhisperEngine, pcm: PcmFile, language: string, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<string> {
  if (engine.mode === 'server') {
    const form = new FormData();
    const samples = (await openAsBlob(pcm.file)).slice(pcm.offset, pcm.offset + pcm.bytes);
    form.set('file', new Blob([new Uint8Array(wavHeader(pcm.bytes, SAMPLE_RATE)), samples], { type: 'audio/wav' }), 'recording.wav');
    form.set('response_format', 'json');
    form.set('language', language);
    form.set('temperature', '0');
    const timeout = AbortSignal.timeout(TRANSCRIBE_TIMEOUT_MS);
    const response = await fetch(`http://127.0.0.1:${engine.port}/inference`, { method: 'POST', body: form, signal: signal ? AbortSignal.any([signal, timeout]) : timeout }).catch(
      (error: unknown) => {
        throw new WhisperFailure(signal?.aborted ? 'the request was cancelled' : `whisper-server did not answer: ${(error as Error).message}`);
      },
    );
    const text = await response.text();
    if (!response.ok) throw new WhisperFailure(`whisper-server answered ${response.status}: ${text.slice(0, 300)}`);
    let answer: { text?: unknown; error?: unknown };
    try {
      answer = JSON.parse(text) as typeof answer;
    } catch {
      throw new WhisperFailure('whisper-server gave an answer that is not JSON');
    }
    if (typeof answer.text !== 'string') throw new WhisperFailure(`whisper-server failed: ${typeof answer.error === 'string' ? answer.error : 'no text in its answer'}`);
    return answer.text.trim();
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'service-deck-stt-'));
  try {
    const file = path.join(dir, 'recording.wav');
    await writeFile(file, wavHeader(pcm.bytes, SAMPLE_RATE), { mode: 0o600 });
    await pipeline(pcmStream(pcm), createWriteStream(file, { flags: 'a' }));
    const command = await diesWithService(engine.binary, ['-m', engine.model, '-f', file, '-l', language, '-t', String(engine.threads), '-ng', '-nt', '-np'], env);
    const result = await startWorker(command, {
      env: cpuOnly(env),
      extendEnv: false,
      reject: false,
      timeout: TRANSCRIBE_TIMEOUT_MS,
      ...(signal ? { cancelSignal: signal } : {}),
      forceKillAfterDelay: 1_000,
    });
    if (result.isCanceled) throw new WhisperFailure('the request was cancelled');
    if (result.exitCode !== 0) throw new WhisperFailure(`whisper-cli failed${result.timedOut ? ' (timeout)' : ''}: exit ${String(result.exitCode ?? result.signal)}: ${String(result.stderr).split('\n').filter(Boolean).at(-1) ?? ''}`);
    return String(result.stdout).replace(/\s+/g, ' ').trim();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** GET of `path` on the loopback port: the status, or 0 when nothing answered. */
async function statusOf(port: number, path: string): Promise<number> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2_000) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

/** The engine hooks of one whisper.cpp start (src/workers/engine.ts runs them). */
export function whisperHooks(launch: SttLaunch, deps: { lookup: RuntimeLookup; env: NodeJS.ProcessEnv; engines: Map<number, WhisperEngine> }): StartHooks {
  const { generation } = launch;
  return {
    prepare: async () => {
      const program = await whisperProgram(deps.lookup);
      if (!program) {
        return { unable: { cause: 'runtime_missing', message: runtimeMissingMessage('speech-to-text worker', ['whisper-server', 'whisper-cli'], deps.lookup.env, 'whisper.cpp (whisper-server or whisper-cli) is not installed') } };
      }
      if (!launch.model) return { unable: { cause: 'runtime_missing', message: 'The speech-to-text worker cannot start: the profile names no whisper.cpp model (params.model).' } };
      if (program.mode === 'cli') {
        // No process stays: the start proves that the program runs.
        const probe = await execa(program.binary, ['--help'], { env: cpuOnly(deps.env), extendEnv: false, reject: false, timeout: 10_000 });
        if (probe.failed && probe.exitCode === undefined) return { unable: { cause: 'unclear', message: `whisper-cli does not run: ${probe.shortMessage}` } };
        deps.engines.set(generation, { mode: 'cli', binary: program.binary, model: launch.model, threads: launch.threads });
        return { ready: true };
      }
      const port = await freePort();
      const args = ['-m', launch.model, '--host', '127.0.0.1', '--port', String(port), '-t', String(launch.threads), '-ng'];
      return { command: await diesWithService(program.binary, args, deps.env), port, options: { env: cpuOnly(deps.env) } };
    },
    answers: async (port) => {
      const health = await statusOf(port, '/health');
      if (health !== 200 && !(health === 404 && (await statusOf(port, '/')) === 200)) return false;
      deps.engines.set(generation, { mode: 'server', port });
      return true;
    },
    cleanup: () => deps.engines.delete(generation),
  };
}
