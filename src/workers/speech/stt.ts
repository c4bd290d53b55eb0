// The STT worker adapter (spec 3.5): runs the STT worker machine (machines/sttWorker) with the
// real engine process, forwards its reports to the supervisor, carries the supervisor's unload
// commands to it, and transcribes one recording at a time on a loaded start.
//
// The pocketsphinx backend is the engine program native/pocketsphinx-worker.c (built at set-up by
// scripts/build-pocketsphinx.sh): it loads the en-us model once and answers recording after
// recording over stdin/stdout, so the worker stays loaded between jobs. The recordings reach it
// as 16-bit PCM, streamed from the uploaded file (the route checked its headers before). The whisper.cpp backend (whisper-server
// kept loaded, or whisper-cli per recording) is src/workers/speech/whisper.ts.
import type { Readable, Writable } from 'node:stream';
import type { ResultPromise } from 'execa';
import type { Actor } from 'xstate';
import { WORKER_IDS } from '../../../machines/ids.js';
import { sttWorkerMachine, type SttLaunch, type SttWorkerEvent } from '../../../machines/sttWorker/index.js';
import { diesWithService } from '../../adapters/parentDeath.js';
import { pcmStream, type PcmFile } from '../../adapters/wav.js';
import { resolveRuntime, runtimeMissingMessage } from '../../adapters/runtimes.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { connectionOf, LifecycleWorker, type WorkerDeps } from '../lifecycle.js';
import { engineActor, type StartHooks } from '../engine.js';
import { workerEnv } from '../process.js';
import { whisperHooks, whisperTranscribe, type WhisperEngine } from './whisper.js';

export type SttWorkerActor = Actor<typeof sttWorkerMachine>;
export type SttProfile = Extract<StoredProfile, { category: 'stt' }>;

/** The engine answered with an error, or is gone. */
export class EngineFailure extends Error {
  override name = 'EngineFailure';
}

/**
 * Writes `source` into `stdin` as the engine reads it, leaving stdin open for the next request
 * (stream.pipeline with `end: false` would leave its listeners on stdin, request after request).
 * A stdin that closes (the engine's end, which answers the request) ends the feed and the source;
 * only a source that cannot be read rejects.
 */
async function feed(source: Readable, stdin: Writable): Promise<void> {
  for await (const chunk of source) {
    if (stdin.destroyed) break;
    if (!stdin.write(chunk)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          stdin.off('drain', done);
          stdin.off('close', done);
          resolve();
        };
        stdin.on('drain', done);
        stdin.on('close', done);
      });
    }
  }
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

  /**
   * Sends one recording (16-bit PCM, 16 kHz mono) and awaits the engine's answer line. The samples
   * go from the file to the engine's stdin as the engine reads them: a few chunks in memory at most.
   */
  request(pcm: PcmFile, signal?: AbortSignal): Promise<string> {
    if (this.#closed) return Promise.reject(this.#closed);
    return new Promise<string>((resolve, reject) => {
      const fail = (error: Error) => {
        signal?.removeEventListener('abort', onAbort);
        // The engine cannot drop a recording halfway: it is stopped, and the next job restarts it.
        this.child.kill('SIGKILL');
        reject(error);
      };
      const onAbort = () => fail(new EngineFailure('the request was cancelled'));
      this.#waiters.push({
        resolve: (line) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(line);
        },
        reject,
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      const stdin = this.child.stdin;
      if (!stdin) return;
      stdin.write(`${pcm.bytes}\n`);
      feed(pcmStream(pcm), stdin).catch(() => fail(new EngineFailure('the recording could not be read from its job folder')));
    });
  }
}



export class SttWorker extends LifecycleWorker<ReturnType<SttWorkerActor['getSnapshot']>> {
  readonly #links: Map<number, EngineLink>;
  readonly #whispers: Map<number, WhisperEngine>;
  readonly #env: NodeJS.ProcessEnv;

  constructor(deps: WorkerDeps) {
    const links = new Map<number, EngineLink>();
    const whispers = new Map<number, WhisperEngine>();
    const info = { worker: 'stt', name: 'speech-to-text worker', log: deps.log, runtimeDir: deps.runtimeDir, stderr: deps.workers.stderr.of('stt') } as const;
    const engine = engineActor<SttLaunch, SttWorkerEvent>(info, (launch): StartHooks => {
      if (launch.backend === 'whisper.cpp') return whisperHooks(launch, { lookup: deps.lookup, env: deps.env, engines: whispers });
      const { generation } = launch;
      return {
        prepare: async () => {
          const binary = await resolveRuntime('pocketsphinx', deps.lookup);
          if (!binary) {
            return { unable: { cause: 'runtime_missing', message: runtimeMissingMessage('speech-to-text worker', ['pocketsphinx'], deps.lookup.env, 'the pocketsphinx engine is not built (run scripts/build-pocketsphinx.sh)') } };
          }
          return { command: await diesWithService(binary, [], deps.env), options: { stdin: 'pipe', env: workerEnv(deps.env) } };
        },
        // Its stdout is the line protocol (transcripts): only stderr, and stdout lines that answer no request, go to the tail.
        tail: 'stderr',
        spawned: (child, engine) => {
          const link = new EngineLink(child);
          links.set(generation, link);
          child.stdout?.on('data', (chunk: Buffer) => {
            for (const line of link.push(chunk)) {
              if (line.includes('"ready"')) engine.ready();
              else if (!link.deliver(line)) engine.keep(Buffer.from(`${line}\n`));
            }
          });
        },
        cleanup: () => {
          links.get(generation)?.close(new EngineFailure('the speech-to-text engine ended'));
          links.delete(generation);
        },
      };
    });
    super(sttWorkerMachine.provide({ actors: { engine } }), 'stt', connectionOf(deps, 'STT worker', WORKER_IDS.stt), (reason) => new EngineFailure(reason));
    this.#links = links;
    this.#whispers = whispers;
    this.#env = deps.env;
  }

  /** Transcribes one checked recording (its samples in its file) on the loaded start `generation`. */
  async transcribe(generation: number, pcm: PcmFile, language: 'de' | 'en' | 'auto', signal?: AbortSignal): Promise<string> {
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
