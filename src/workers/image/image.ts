// The image worker adapter (spec 3.3): runs the image worker machine (machines/imageWorker) with
// the real sd-cli process, one process per image, forwards its reports to the supervisor and
// carries the supervisor's unload commands to it.
//
// The supervisor sends the machine its start with the job's grant; the job hands its own part over
// (its prompt, job folder and reference images) once it runs, after its enhancer's process is gone
// when it has one, and the start waits for that before it spawns sd-cli (`JobHandoffs`).
//
// The prompt reaches sd-cli as its `-p` argument (the program has no other way in), so a local
// user can read it in the process list while the image is made, unless /proc hides other users'
// processes (hidepid; docs/operations.md, "What a local user can see"). It is kept here by the
// start's generation, never in a machine's context, a log line or a file outside the job folder.
// sd-cli's output is read for its progress (steps done), shown in the job's diagnostics; the
// output tail is used only to diagnose a failure, and never logged.
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Actor } from 'xstate';
import { WORKER_IDS } from '../../../machines/ids.js';
import {
  IMAGE_OUTPUT,
  imageWorkerMachine,
  lastProgress,
  sdArgs,
  type ImageLaunch,
  type ImageWorkerEvent,
} from '../../../machines/imageWorker/index.js';
import { diesWithService } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage } from '../../adapters/runtimes.js';
import type { Lease } from '../../system/scheduler.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { connectionOf, LifecycleWorker, type WorkerDeps } from '../lifecycle.js';
import { engineActor, type StartHooks } from '../engine.js';
import { workerEnv } from '../process.js';

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

/**
 * The jobs' own parts of their images, by the start's generation: the prompt lives only here while
 * its process needs it. A start waits (`take`) until its job hands its part over (`give`); a start
 * that ends before (its job ended first, and the supervisor unloaded the idle start) stops waiting
 * (`endWaitsBut`).
 */
class JobHandoffs {
  readonly #given = new Map<number, ImageJob>();
  readonly #waiting = new Map<number, (job: ImageJob | undefined) => void>();

  give(generation: number, job: ImageJob): void {
    this.#given.set(generation, job);
    this.#waiting.get(generation)?.(job);
    this.#waiting.delete(generation);
  }

  take(generation: number): Promise<ImageJob | undefined> {
    const job = this.#given.get(generation);
    return job ? Promise.resolve(job) : new Promise((resolve) => this.#waiting.set(generation, resolve));
  }

  forget(generation: number): void {
    this.#given.delete(generation);
  }

  /** Every start but `live` has ended: its wait ends without a job. */
  endWaitsBut(live: number | null): void {
    for (const [generation, resolve] of this.#waiting) {
      if (generation === live) continue;
      this.#waiting.delete(generation);
      resolve(undefined);
    }
  }
}

export class ImageWorker extends LifecycleWorker<ReturnType<ImageActor['getSnapshot']>> {
  readonly #jobs: JobHandoffs;
  readonly #progress: Map<number, ImageProgress>;
  readonly #progressListeners: Set<(generation: number) => void>;

  constructor(deps: WorkerDeps) {
    const jobs = new JobHandoffs();
    const progress = new Map<number, ImageProgress>();
    const progressListeners = new Set<(generation: number) => void>();
    // The error of a failed start may quote the command line, and with it the prompt.
    const info = { worker: 'image', name: 'image worker', log: deps.log, runtimeDir: deps.runtimeDir, stderr: deps.workers.stderr.of('image'), privateCommand: true } as const;
    const engine = engineActor<ImageLaunch, ImageWorkerEvent>(info, (launch): StartHooks => {
      const { generation } = launch;
      let job: ImageJob | undefined;
      let output = '';
      return {
        prepare: async () => {
          const binary = await resolveRuntime('sd-cli', deps.lookup);
          if (!binary) return { unable: { cause: 'runtime_missing', message: runtimeMissingMessage('image worker', ['sd-cli'], deps.lookup.env, 'sd-cli (stable-diffusion.cpp) is not installed') } };
          job = await jobs.take(generation);
          if (!job) return { unable: { cause: 'unclear', message: 'The image worker start ended before its job handed over its prompt.' } };
          output = path.join(job.dir, IMAGE_OUTPUT);
          const command = await diesWithService(binary, sdArgs(launch, job, output), deps.env);
          return { command, options: { cwd: job.dir, env: { ...workerEnv(deps.env), CUDA_VISIBLE_DEVICES: launch.gpus.join(',') } } };
        },
        spawned: (child) => {
          let recent = '';
          const watch = (chunk: Buffer) => {
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
        },
        // One image per process: a process that wrote its image and ended is done, not failed.
        exitedAs: async (result, stopRequested) => {
          if (result.exitCode !== 0 || stopRequested) return undefined;
          if (await stat(output).then((s) => s.isFile() && s.size > 0, () => false)) return 'ready';
          return { exitCode: 0, signal: null, cause: 'unclear', message: 'The image worker (sd-cli) ended without an error but wrote no image.' };
        },
        tailText: (text) => withoutPrompt(text, job?.prompt ?? ''),
      };
    });
    super(imageWorkerMachine.provide({ actors: { engine } }), 'image', connectionOf(deps, 'image worker', WORKER_IDS.image), (reason) => new ImageFailure(reason));
    this.#jobs = jobs;
    this.#progress = progress;
    this.#progressListeners = progressListeners;
  }

  protected override attached(actor: this['actor']): void {
    // A start that ended stops waiting for its job's part.
    actor.subscribe((snapshot) => this.#jobs.endWaitsBut(snapshot.matches('unloaded') ? null : (snapshot.context.launch?.generation ?? null)));
  }

  protected override gpus(): string[] {
    return this.actor.getSnapshot().context.launch?.gpus ?? [];
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
  async generate(lease: Pick<Lease, 'generation' | 'start'>, job: ImageJob, signal?: AbortSignal): Promise<Buffer> {
    if (lease.start === null) throw new ImageFailure('an image job always starts its own image process');
    // Only the latest image's progress is kept (it holds no prompt): the test shows it once done.
    for (const generation of this.#progress.keys()) if (generation !== lease.generation) this.#progress.delete(generation);
    this.#jobs.give(lease.generation, job);
    try {
      await this.ready(lease.generation, signal);
      return await readFile(path.join(job.dir, IMAGE_OUTPUT));
    } finally {
      // The prompt is forgotten as soon as the process no longer needs it.
      this.#jobs.forget(lease.generation);
    }
  }
}
