// The image worker adapter (spec 3.3): runs the image worker machine (machines/imageWorker) with
// the real sd-cli process, one process per image, forwards its reports to the supervisor and
// carries the supervisor's unload commands to it.
//
// The prompt reaches sd-cli as its `-p` argument (the program has no other way in), so a local
// user can read it in the process list while the image is made, unless /proc hides other users'
// processes (hidepid; docs/operations.md, "What a local user can see"). It is kept here by the
// start's generation, never in a machine's context, a log line or a file outside the job folder. sd-cli's output is read for its progress (steps done), shown in the job's
// diagnostics; the output tail is used only to diagnose a failure, and never logged.
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { ResultPromise } from 'execa';
import { createActor, fromCallback, type Actor } from 'xstate';
import {
  IMAGE_OUTPUT,
  imageWorkerMachine,
  lastProgress,
  sdArgs,
  type EngineCommand,
  type EngineInput,
  type ImageLaunch,
  type ImageWorkerEvent,
} from '../../../machines/imageWorker/index.js';
import { readOomKills } from '../../adapters/memory.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage } from '../../adapters/runtimes.js';
import type { Lease } from '../../system/scheduler.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { LifecycleWorker, workerActorOptions, type WorkerDeps } from '../lifecycle.js';
import { ProcessRecord } from '../leftovers.js';
import { endReport, Tail, WORKER_PROCESS, workerEnv } from '../process.js';

export type ImageProfile = Extract<StoredProfile, { category: 'image' }>;

/** One image: its private folder, prompt and reference files (in the client's order). */
export interface ImageJob {
  dir: string;
  prompt: string;
  references: string[];
}

export class ImageFailure extends Error {
  override name = 'ImageFailure';
}

export interface ImageProgress {
  step: number;
  steps: number;
}

type ImageActor = Actor<typeof imageWorkerMachine>;

/**
 * sd-cli's output without the lines that quote the prompt (it echoes it): the diagnosis may put a
 * matched line into the log, and a prompt could be written to look like an error line.
 */
export function withoutPrompt(output: string, prompt: string): string {
  const quoted = prompt
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line.length >= 3);
  return output
    .split(/\r?\n|\r/)
    .filter((line) => !/\bprompt\b/i.test(line) && !quoted.some((part) => line.includes(part)))
    .join('\n');
}

export class ImageWorker extends LifecycleWorker<ReturnType<ImageActor['getSnapshot']>, ImageLaunch, ImageProfile> {
  /** The job of each start, by generation: the prompt lives only here while its process runs. */
  readonly #jobs: Map<number, ImageJob & { gpus: string[] }>;
  readonly #progress: Map<number, ImageProgress>;
  readonly #progressListeners: Set<(generation: number) => void>;

  constructor(deps: WorkerDeps) {
    const jobs = new Map<number, ImageJob & { gpus: string[] }>();
    const progress = new Map<number, ImageProgress>();
    const progressListeners = new Set<(generation: number) => void>();
    const engine = fromCallback<EngineCommand, EngineInput, ImageWorkerEvent>(({ input, sendBack, receive }) => {
      const { launch } = input;
      const { generation } = launch;
      const tail = new Tail(16 * 1024);
      let child: ResultPromise | undefined;
      let stopped = false;
      let ended = false;
      let stopRequested = false;
      const gone = (cause: string, message: string) => {
        if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode: null, signal: null, cause, message } });
      };
      receive((command) => {
        stopRequested = true;
        if (child && !ended) child.kill(command.type === 'engine.kill' ? 'SIGKILL' : 'SIGTERM');
        // The image is written and its process gone: nothing is left to end.
        else if (ended || !child) gone('stopped', 'The image worker was stopped as requested.');
      });
      const run = async () => {
        const job = jobs.get(generation);
        if (!job) return gone('unclear', 'The image worker has no job for this start.');
        const binary = await resolveRuntime('sd-cli', deps.lookup);
        if (!binary) return gone('runtime_missing', runtimeMissingMessage('image worker', ['sd-cli'], deps.lookup.env, 'sd-cli (stable-diffusion.cpp) is not installed'));
        const output = path.join(job.dir, IMAGE_OUTPUT);
        const command = await diesWithService(binary, sdArgs(launch, job.prompt, output), deps.env);
        const before = await readOomKills().catch(() => null);
        if (stopped || stopRequested) return gone('stopped', 'The image worker was stopped before it started.');
        const record = deps.runtimeDir ? new ProcessRecord(deps.runtimeDir, 'image', generation) : undefined;
        child = startWorker(command, {
          ...WORKER_PROCESS,
          cwd: job.dir,
          env: { ...workerEnv(deps.env), CUDA_VISIBLE_DEVICES: launch.gpus.join(','), ...record?.env() },
        });
        if (child.pid !== undefined) void record?.write(child.pid, false);
        let recent = '';
        const watch = (chunk: Buffer) => {
          tail.push(chunk);
          // A progress mark may be split across chunks: the last few hundred bytes are read together.
          recent = `${recent}${chunk.toString('latin1')}`.slice(-512);
          const mark = lastProgress(recent);
          const before = progress.get(generation);
          if (!mark || (before?.step === mark.step && before.steps === mark.steps)) return;
          progress.set(generation, mark);
          for (const listener of progressListeners) listener(generation);
        };
        child.stdout?.on('data', watch);
        child.stderr?.on('data', watch);
        void child.then(async (result) => {
          ended = true;
          void record?.remove();
          const written = result.exitCode === 0 && !stopRequested && (await stat(output).then((s) => s.isFile() && s.size > 0, () => false));
          if (written) {
            if (!stopped) sendBack({ type: 'engine.ready' });
            return;
          }
          if (result.exitCode === 0 && !stopRequested) {
            if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode: 0, signal: null, cause: 'unclear', message: 'The image worker (sd-cli) ended without an error but wrote no image.' } });
            return;
          }
          const { report, evidence } = await endReport('image', result, { oomKillsBefore: before, outputTail: withoutPrompt(tail.text(), job.prompt), expected: stopRequested });
          if (!stopRequested) deps.log.warn({ worker: 'image', generation, cause: report.cause, evidence }, 'image worker failed');
          if (!stopped) sendBack({ type: 'engine.exited', report });
        });
        if (child.pid !== undefined && !stopped) sendBack({ type: 'engine.spawned', pid: child.pid });
        return undefined;
      };
      run().catch((error: unknown) => {
        // The error may quote the command line, and with it the prompt: only its name is logged.
        deps.log.error({ worker: 'image', generation, error: (error as Error).name }, 'image worker could not be started');
        if (child && !ended) child.kill('SIGKILL');
        else gone('unclear', 'The image worker could not be started (sd-cli could not be run).');
      });
      return () => {
        stopped = true;
        if (child && !ended) child.kill('SIGKILL');
      };
    });
    const actor = createActor(imageWorkerMachine.provide({ actors: { engine } }), workerActorOptions('imageWorker', deps));
    super(actor, 'image', { name: 'image worker', supervisor: deps.supervisor, workers: deps.workers, log: deps.log }, (reason) => new ImageFailure(reason));
    this.#jobs = jobs;
    this.#progress = progress;
    this.#progressListeners = progressListeners;
  }

  protected launchOf(lease: { generation: number }, profile: ImageProfile): ImageLaunch {
    const job = this.#jobs.get(lease.generation);
    const { params } = profile;
    return {
      generation: lease.generation,
      profileId: profile.id,
      revision: profile.revision,
      model: params.model,
      files: { ...params.files },
      width: params.width,
      height: params.height,
      steps: params.steps,
      guidance: params.guidance,
      cfgScale: params.cfgScale,
      seed: params.seed,
      gpus: job?.gpus ?? [],
      jobDir: job?.dir ?? '',
      references: job?.references ?? [],
    };
  }

  protected override gpus(): string[] {
    return this.actor.getSnapshot().context.launch?.gpus ?? [];
  }

  /** How long a process at work gets after SIGTERM before SIGKILL. */
  terminationGraceMs(): number {
    return this.actor.getSnapshot().context.terminationGraceMs;
  }

  /** Steps done by the image process of the start `generation`, as sd-cli printed them. */
  progress(generation: number): ImageProgress | null {
    return this.#progress.get(generation) ?? null;
  }

  /** Calls `listener` with the generation whenever an image process reports a further step; returns the unsubscribe. */
  onProgress(listener: (generation: number) => void): () => void {
    this.#progressListeners.add(listener);
    return () => this.#progressListeners.delete(listener);
  }

  /**
   * Makes one image on the granted start: its own image process, then the PNG it wrote (still with
   * whatever metadata sd-cli put in; the route strips it). Rejects when the process fails, the
   * reservation is revoked or `signal` aborts.
   */
  async generate(lease: Pick<Lease, 'generation' | 'start' | 'gpus'>, profile: ImageProfile, job: ImageJob, signal?: AbortSignal): Promise<Buffer> {
    if (lease.start === null) throw new ImageFailure('an image job always starts its own image process');
    this.#jobs.set(lease.generation, { ...job, gpus: lease.gpus });
    // Only the latest image's progress is kept (it holds no prompt): the test shows it once done.
    for (const generation of this.#progress.keys()) if (generation !== lease.generation) this.#progress.delete(generation);
    try {
      this.start(lease, profile);
      await this.ready(lease.generation, signal);
      return await readFile(path.join(job.dir, IMAGE_OUTPUT));
    } finally {
      // The prompt is forgotten as soon as the process no longer needs it.
      this.#jobs.delete(lease.generation);
    }
  }
}
