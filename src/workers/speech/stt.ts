// The STT worker adapter (spec 3.5): runs the STT worker machine (machines/sttWorker) with the
// real engine process, forwards its reports to the supervisor, carries the supervisor's unload
// commands to it, and transcribes one recording at a time on a loaded start.
//
// The pocketsphinx backend is the engine program native/pocketsphinx-worker.c (built at set-up by
// scripts/build-pocketsphinx.sh): it loads the en-us model once and answers recording after
// recording over stdin/stdout, so the worker stays loaded between jobs. The recordings reach it
// as 16-bit PCM; the route checked the WAV file before. The whisper.cpp backend (whisper-server
// kept loaded, or whisper-cli per recording) is src/workers/speech/whisper.ts.
import type { ResultPromise } from 'execa';
import { createActor, fromCallback, type Actor } from 'xstate';
import { sttWorkerMachine, type EngineCommand, type EngineInput, type SttLaunch, type SttWorkerEvent } from '../../../machines/sttWorker/index.js';
import { readOomKills } from '../../adapters/memory.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage } from '../../adapters/runtimes.js';
import type { Lease } from '../../system/scheduler.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { LifecycleWorker, workerActorOptions, type WorkerDeps } from '../lifecycle.js';
import { ProcessRecord } from '../leftovers.js';
import { endReport, Tail, WORKER_PROCESS, workerEnv } from '../process.js';
import { runWhisper, whisperTranscribe, type WhisperEngine } from './whisper.js';

export type SttWorkerActor = Actor<typeof sttWorkerMachine>;
export type SttProfile = Extract<StoredProfile, { category: 'stt' }>;

/** The engine answered with an error, or is gone. */
export class EngineFailure extends Error {
  override name = 'EngineFailure';
}

/** One running engine process: a line protocol, one request at a time. */
class EngineLink {
  #pending = '';
  #waiters: Array<{ resolve: (line: string) => void; reject: (error: Error) => void }> = [];
  #closed: Error | null = null;

  constructor(readonly child: ResultPromise) {}

  push(chunk: Buffer): string[] {
    this.#pending += chunk.toString('utf8');
    const lines: string[] = [];
    for (let at = this.#pending.indexOf('\n'); at >= 0; at = this.#pending.indexOf('\n')) {
      lines.push(this.#pending.slice(0, at));
      this.#pending = this.#pending.slice(at + 1);
    }
    return lines;
  }

  deliver(line: string): boolean {
    const waiter = this.#waiters.shift();
    waiter?.resolve(line);
    return waiter !== undefined;
  }

  close(error: Error): void {
    this.#closed = error;
    for (const waiter of this.#waiters.splice(0)) waiter.reject(error);
  }

  /** Sends one recording (16-bit PCM, 16 kHz mono) and awaits the engine's answer line. */
  request(pcm: Buffer, signal?: AbortSignal): Promise<string> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise<string>((resolve, reject) => {
      const onAbort = () => {
        // The engine cannot drop a recording halfway: it is stopped, and the next job restarts it.
        this.child.kill('SIGKILL');
        reject(new EngineFailure('the request was cancelled'));
      };
      this.#waiters.push({
        resolve: (line) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(line);
        },
        reject,
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      this.child.stdin?.write(`${pcm.length}\n`);
      this.child.stdin?.write(pcm);
    });
  }
}


export function sttLaunchOf(lease: Pick<Lease, 'generation'>, profile: SttProfile): SttLaunch {
  return { generation: lease.generation, profileId: profile.id, revision: profile.revision, backend: profile.params.backend, model: profile.params.model, threads: profile.params.threads };
}

export class SttWorker extends LifecycleWorker<ReturnType<SttWorkerActor['getSnapshot']>, SttLaunch, SttProfile> {
  readonly #links: Map<number, EngineLink>;
  readonly #whispers: Map<number, WhisperEngine>;
  readonly #env: NodeJS.ProcessEnv;

  constructor(deps: WorkerDeps) {
    const links = new Map<number, EngineLink>();
    const whispers = new Map<number, WhisperEngine>();
    const engine = fromCallback<EngineCommand, EngineInput, SttWorkerEvent>(({ input, sendBack, receive }) => {
      const { launch } = input;
      if (launch.backend === 'whisper.cpp') {
        return runWhisper(launch, { lookup: deps.lookup, env: deps.env, log: deps.log, engines: whispers, runtimeDir: deps.runtimeDir }, sendBack, receive);
      }
      const tail = new Tail(16 * 1024);
      let child: ResultPromise | undefined;
      let stopped = false;
      let exited = false;
      let stopRequested = false;
      let before: number | null = null;
      receive((command) => {
        stopRequested = true;
        if (child && !exited) child.kill(command.type === 'engine.kill' ? 'SIGKILL' : 'SIGTERM');
      });
      const start = async () => {
        const binary = await resolveRuntime('pocketsphinx', deps.lookup);
        if (!binary) {
          exited = true;
          const message = runtimeMissingMessage('speech-to-text worker', ['pocketsphinx'], deps.lookup.env, 'the pocketsphinx engine is not built (run scripts/build-pocketsphinx.sh)');
          if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode: null, signal: null, cause: 'runtime_missing', message } });
          return;
        }
        const command = await diesWithService(binary, [], deps.env);
        before = await readOomKills().catch(() => null);
        if (stopped || stopRequested) return;
        const record = deps.runtimeDir ? new ProcessRecord(deps.runtimeDir, 'stt', launch.generation) : undefined;
        child = startWorker(command, { ...WORKER_PROCESS, stdin: 'pipe', env: { ...workerEnv(deps.env), ...record?.env() } });
        if (child.pid !== undefined) void record?.write(child.pid, false);
        const link = new EngineLink(child);
        links.set(launch.generation, link);
        child.stderr?.on('data', (chunk: Buffer) => tail.push(chunk));
        child.stdout?.on('data', (chunk: Buffer) => {
          for (const line of link.push(chunk)) {
            if (line.includes('"ready"')) sendBack({ type: 'engine.ready' });
            else if (!link.deliver(line)) tail.push(Buffer.from(`${line}\n`));
          }
        });
        void child.then(async (result) => {
          exited = true;
          void record?.remove();
          link.close(new EngineFailure('the speech-to-text engine ended'));
          links.delete(launch.generation);
          const { report, evidence } = await endReport('stt', result, { oomKillsBefore: before, outputTail: tail.text(), expected: stopRequested });
          if (!stopRequested) deps.log.warn({ worker: 'stt', generation: launch.generation, cause: report.cause, evidence }, 'speech-to-text worker ended');
          if (!stopped) sendBack({ type: 'engine.exited', report });
        });
        if (child.pid !== undefined && !stopped) sendBack({ type: 'engine.spawned', pid: child.pid });
      };
      start().catch((error: unknown) => {
        deps.log.error({ err: error, worker: 'stt' }, 'speech-to-text worker could not be started');
        if (!stopped && !exited) sendBack({ type: 'engine.exited', report: { exitCode: null, signal: null, cause: 'unclear', message: `The speech-to-text worker could not be started: ${(error as Error).message}` } });
      });
      return () => {
        stopped = true;
        if (child && !exited) child.kill('SIGKILL');
      };
    });
    const actor = createActor(sttWorkerMachine.provide({ actors: { engine } }), workerActorOptions('sttWorker', deps));
    super(actor, 'stt', { name: 'STT worker', supervisor: deps.supervisor, workers: deps.workers, log: deps.log }, (reason) => new EngineFailure(reason));
    this.#links = links;
    this.#whispers = whispers;
    this.#env = deps.env;
  }

  protected launchOf(lease: { generation: number }, profile: SttProfile): SttLaunch {
    return sttLaunchOf(lease, profile);
  }

  /** Transcribes one recording (16-bit PCM, 16 kHz mono) on the loaded start `generation`. */
  async transcribe(generation: number, pcm: Buffer, language: 'de' | 'en' | 'auto', signal?: AbortSignal): Promise<string> {
    const whisper = this.#whispers.get(generation);
    if (whisper) return whisperTranscribe(whisper, pcm, language, this.#env, signal);
    const link = this.#links.get(generation);
    if (!link) throw new EngineFailure('the speech-to-text worker is not running');
    const line = await link.request(pcm, signal);
    let answer: { text?: unknown; error?: unknown };
    try {
      answer = JSON.parse(line) as typeof answer;
    } catch {
      throw new EngineFailure('the speech-to-text engine gave an answer that is not JSON');
    }
    if (typeof answer.text === 'string') return answer.text;
    throw new EngineFailure(typeof answer.error === 'string' ? answer.error : 'the speech-to-text engine failed');
  }
}
