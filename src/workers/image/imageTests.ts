// The operator's image test (spec 3.3, 4.7): one image through the same reservation and image
// worker as the API (source `test`: no publication needed), except that a busy reservation is
// reported as a conflict at once instead of waited for. The job lives in RAM only: the prompt is
// never kept in it, and its image (PNG without metadata, base64) and the enhancer's rewrite only
// until the next test. After a preview the operator's choice is the prompt, not enhanced again. Every
// change of the job (phase, each step of its image process) emits `change`.
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'eventemitter3';
import { errors, type ApiError } from '../../errors.js';
import type { Lease } from '../../system/scheduler.js';
import type { ImageProfile } from './image.js';
import { runImageJob, type ImageJobParts } from './imageJob.js';
import { jobFailure } from '../lease.js';
import type { ImageTestJob, ImageTestPhase } from '../../system/observe/console.types.js';

/** How the start of a test ended: it runs, or its reservation was refused at once. */
export type ImageTestStart = { ok: true; job: ImageTestJob } | { ok: false; error: ApiError };

export class ImageTests extends EventEmitter<{ change: [] }> {
  #job: ImageTestJob | null = null;
  #controller: AbortController | null = null;
  #lease: Lease | null = null;
  #settled: Promise<void> = Promise.resolve();

  constructor(private readonly service: ImageJobParts) {
    super();
  }

  current(): ImageTestJob | null {
    if (!this.#job) return null;
    const progress = this.#lease && this.#job.phase === 'running' ? this.service.image.progress(this.#lease.generation) : this.#job.progress;
    return { ...this.#job, progress };
  }

  running(): boolean {
    return this.#job?.phase === 'waiting' || this.#job?.phase === 'running';
  }

  /**
   * Starts a test and resolves once it holds the reservation (or was refused: a busy reservation
   * is a conflict at once). The image itself comes later; `current()` shows it.
   */
  start(profile: ImageProfile, prompt: string, options: { fromPreview?: boolean } = {}): Promise<ImageTestStart> {
    const controller = new AbortController();
    const job: ImageTestJob = {
      id: randomUUID(),
      profile_id: profile.id,
      revision: profile.revision,
      phase: 'waiting',
      progress: null,
      result: null,
      b64_png: null,
      error: null,
      enhancer: options.fromPreview ? 'preview' : 'off',
      enhanced: null,
      started_at: new Date().toISOString(),
      finished_at: null,
    };
    const previous = { job: this.#job, lease: this.#lease };
    this.#job = job;
    this.#controller = controller;
    this.#lease = null;
    let granted: (start: ImageTestStart) => void = () => {};
    const started = new Promise<ImageTestStart>((resolve) => (granted = resolve));
    let unwatch = () => {};
    const finish = (phase: ImageTestPhase, error: ImageTestJob['error']) => {
      unwatch();
      job.phase = phase;
      job.error = error;
      job.finished_at = new Date().toISOString();
      this.emit('change');
    };
    this.emit('change');
    this.#settled = runImageJob(this.service, profile, { prompt }, {
      source: 'test',
      whenBusy: 'refuse',
      signal: controller.signal,
      enhance: options.fromPreview ? 'skip' : 'profile',
      onGranted: (lease) => {
        this.#lease = lease;
        job.phase = 'running';
        unwatch = this.service.image.onProgress((generation) => {
          if (generation === lease.generation) this.emit('change');
        });
        this.emit('change');
        granted({ ok: true, job: { ...job } });
      },
    }).then(
      (result) => {
        if (this.#lease) job.progress = this.service.image.progress(this.#lease.generation) ?? job.progress;
        job.result = { size: `${result.width}x${result.height}`, removed_chunks: result.removed };
        job.b64_png = result.png.toString('base64');
        if (result.enhanced) {
          job.enhancer = 'ran';
          job.enhanced = { prompt: result.enhanced.prompt, wh_ratio: result.enhanced.whRatio };
        }
        finish('done', null);
      },
      (error: unknown) => {
        if (controller.signal.aborted) {
          finish('cancelled', null);
          granted({ ok: true, job: { ...job } });
          return;
        }
        const apiError = (jobFailure(error) ?? errors.internal());
        finish('failed', { code: apiError.code, message: apiError.message });
        // Refused before it ran: the caller hears the conflict at once, and the last test stays shown.
        if (!this.#lease && this.#job === job) {
          this.#job = previous.job;
          this.#lease = previous.lease;
          this.emit('change');
          granted({ ok: false, error: apiError });
          return;
        }
        granted({ ok: true, job: { ...job } });
      },
    );
    return started;
  }

  /** Cancels the running test: it leaves the queue, or its image process is ended. */
  cancel(): boolean {
    if (!this.running()) return false;
    this.#controller?.abort(new Error('the image test was cancelled'));
    return true;
  }

  settled(): Promise<void> {
    return this.#settled;
  }
}
