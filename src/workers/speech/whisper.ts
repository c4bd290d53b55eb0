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
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { execa, type ResultPromise } from 'execa';
import type { EngineCommand, SttLaunch, SttWorkerEvent } from '../../../machines/sttWorker/index.js';
import { readOomKills } from '../../adapters/memory.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { runtimeMissingMessage, whisperProgram, type RuntimeLookup } from '../../adapters/runtimes.js';
import { encodeWav } from '../../adapters/wav.js';
import type { Logger } from '../../system/observe/log.js';
import { ProcessRecord } from '../leftovers.js';
import { endReport, freePort, Tail, WORKER_PROCESS, workerEnv } from '../process.js';

const READY_POLL_MS = 200;
const TRANSCRIBE_TIMEOUT_MS = 300_000;

export class WhisperFailure extends Error {
  override name = 'WhisperFailure';
}

/** How a loaded start transcribes: over HTTP to its server, or one CLI run per recording. */
export type WhisperEngine = { mode: 'server'; port: number } | { mode: 'cli'; binary: string; model: string; threads: number };

/** The STT worker runs on the CPU (spec 3.5): a CUDA build of whisper.cpp sees no GPU and is told not to use one (-ng). */
const cpuOnly = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({ ...workerEnv(env), CUDA_VISIBLE_DEVICES: '' });

const wavOf = (pcm: Buffer) => encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000);

/** One recording (16-bit PCM, 16 kHz mono) through a loaded whisper.cpp start. */
export async function whisperTranscribe(engine: WhisperEngine, pcm: Buffer, language: string, env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<string> {
  if (engine.mode === 'server') {
    const form = new FormData();
    form.set('file', new Blob([new Uint8Array(wavOf(pcm))], { type: 'audio/wav' }), 'recording.wav');
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
    await writeFile(file, wavOf(pcm), { mode: 0o600 });
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

/**
 * The engine process actor's body for one whisper.cpp start: the server, spawned and awaited until
 * it answers; or the CLI, checked once. Returns the actor's cleanup.
 */
export function runWhisper(
  launch: SttLaunch,
  deps: { lookup: RuntimeLookup; env: NodeJS.ProcessEnv; log: Logger; engines: Map<number, WhisperEngine>; runtimeDir: string | undefined },
  sendBack: (event: SttWorkerEvent) => void,
  receive: (listener: (command: EngineCommand) => void) => void,
): () => void {
  const tail = new Tail(16 * 1024);
  let child: ResultPromise | undefined;
  let stopped = false;
  let exited = false;
  let stopRequested = false;
  const report = (exitCode: number | null, signal: string | null, cause: string, message: string) => {
    if (exited) return;
    exited = true;
    deps.engines.delete(launch.generation);
    if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode, signal, cause, message } });
  };
  receive((command) => {
    stopRequested = true;
    if (child && !exited) child.kill(command.type === 'engine.kill' ? 'SIGKILL' : 'SIGTERM');
    else report(0, null, 'stopped', 'The speech-to-text worker was stopped as requested.');
  });
  const run = async () => {
    const program = await whisperProgram(deps.lookup);
    if (!program) {
      report(null, null, 'runtime_missing', runtimeMissingMessage('speech-to-text worker', ['whisper-server', 'whisper-cli'], deps.lookup.env, 'whisper.cpp (whisper-server or whisper-cli) is not installed'));
      return;
    }
    if (!launch.model) {
      report(null, null, 'runtime_missing', 'The speech-to-text worker cannot start: the profile names no whisper.cpp model (params.model).');
      return;
    }
    if (program.mode === 'cli') {
      const probe = await execa(program.binary, ['--help'], { env: cpuOnly(deps.env), extendEnv: false, reject: false, timeout: 10_000 });
      if (stopped || stopRequested) return;
      if (probe.failed && probe.exitCode === undefined) {
        report(null, null, 'unclear', `whisper-cli does not run: ${probe.shortMessage}`);
        return;
      }
      deps.engines.set(launch.generation, { mode: 'cli', binary: program.binary, model: launch.model, threads: launch.threads });
      sendBack({ type: 'engine.ready' });
      return;
    }
    const [port, before] = await Promise.all([freePort(), readOomKills().catch(() => null)]);
    const args = ['-m', launch.model, '--host', '127.0.0.1', '--port', String(port), '-t', String(launch.threads), '-ng'];
    const command = await diesWithService(program.binary, args, deps.env);
    if (stopped || stopRequested) return;
    const record = deps.runtimeDir ? new ProcessRecord(deps.runtimeDir, 'stt', launch.generation) : undefined;
    child = startWorker(command, { ...WORKER_PROCESS, env: { ...cpuOnly(deps.env), ...record?.env() } });
    if (child.pid !== undefined) void record?.write(child.pid, false);
    child.stdout?.on('data', (chunk: Buffer) => tail.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => tail.push(chunk));
    void child.then(async (result) => {
      void record?.remove();
      const { report: ended, evidence } = await endReport('stt', result, { oomKillsBefore: before, outputTail: tail.text(), expected: stopRequested });
      if (!stopRequested) deps.log.warn({ worker: 'stt', generation: launch.generation, cause: ended.cause, evidence }, 'whisper-server ended');
      report(ended.exitCode, ended.signal, ended.cause, ended.message);
    });
    if (child.pid === undefined) return;
    if (!stopped) sendBack({ type: 'engine.spawned', pid: child.pid, port });
    while (!exited && !stopped && !stopRequested) {
      const health = await statusOf(port, '/health');
      if (health === 200 || (health === 404 && (await statusOf(port, '/')) === 200)) {
        if (exited || stopped) return;
        deps.engines.set(launch.generation, { mode: 'server', port });
        sendBack({ type: 'engine.ready' });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
    }
  };
  run().catch((error: unknown) => {
    deps.log.error({ err: error, worker: 'stt' }, 'whisper.cpp could not be started');
    if (child && !exited) child.kill('SIGKILL');
    else report(null, null, 'unclear', `The speech-to-text worker could not be started: ${(error as Error).message}`);
  });
  return () => {
    stopped = true;
    deps.engines.delete(launch.generation);
    if (child && !exited) child.kill('SIGKILL');
  };
}
