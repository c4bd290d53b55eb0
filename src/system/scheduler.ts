// The door between a route (or an admin test) and the supervisor's reservation protocol. A route
// calls `reserve()` with the job its profile snapshot describes and awaits a Lease; it runs its
// work on the granted worker and calls `release()` when its answer has ended (a stream after its
// last byte). Nothing is decided here: the supervisor grants, denies and revokes; this only turns
// those events into a promise, an AbortSignal and a typed error, and keeps the times the
// diagnostics show.
import { randomUUID } from 'node:crypto';
import type { Actor } from 'xstate';
import type { DenialCode, JobSpec, RevocationCode, StartPlan, SupervisorEmitted, supervisorMachine } from '../../machines/supervisor/index.js';

export type SupervisorActor = Actor<typeof supervisorMachine>;
type Granted = Extract<SupervisorEmitted, { type: 'gpu.granted' }>;

/** A reservation the supervisor refused (queue full, timeout, profile changed, stop, memory, busy). */
export class ReservationDenied extends Error {
  override name = 'ReservationDenied';
  constructor(
    readonly code: DenialCode,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** A running job whose reservation was taken back (foreign GPU process, worker death, stop). */
export class ReservationRevoked extends Error {
  override name = 'ReservationRevoked';
  constructor(
    readonly code: RevocationCode,
    message: string,
  ) {
    super(message);
  }
}

/** The client went away while its job waited: it left the queue. */
export class ReservationAbandoned extends Error {
  override name = 'ReservationAbandoned';
}

export interface Lease {
  jobId: string;
  worker: Granted['worker'];
  /** The worker start this job runs on; the worker adapter names it in every report. */
  generation: number;
  /** The worker start plan when this job's grant starts the worker; null when it is already loaded. */
  start: StartPlan | null;
  gpus: string[];
  /** How long the job waited for its grant (queue and memory check), in ms. */
  waitedMs: number;
  /** image jobs with the prompt enhancer on (4.7): the enhancer's start, which runs first. */
  enhancer: { generation: number; plan: StartPlan } | null;
  /**
   * image jobs with the prompt enhancer on: the image start the job runs on once its enhancer
   * answered (`enhancer.done`). With an enhancer on the CPU it is granted only when every GPU is
   * free. Rejects with a ReservationRevoked when the reservation is taken back, or with the
   * reason of `signal` when it aborts.
   */
  imageStep(signal: AbortSignal): Promise<ImageStep>;
  /** Aborted with a ReservationRevoked when the supervisor takes the reservation back. */
  signal: AbortSignal;
  /** Gives the reservation back; safe to call more than once. */
  release(): void;
  /**
   * The job's worker has given it no token past its limit and answers no status probe: the
   * supervisor restarts the worker when others wait for it (every job on it is then revoked with
   * `message`), and does nothing otherwise; so it is said again while it lasts.
   */
  stalled(message: string): void;
  /**
   * The client went away while the job ran: like release, and a worker start this job began and
   * no other job uses is aborted (spec 3.2: cancel in the chat test during its own model start).
   */
  cancel(): void;
}

/** The image start of an image job's second step. */
export interface ImageStep {
  generation: number;
  start: StartPlan | null;
  gpus: string[];
}

export type JobRequest = Omit<JobSpec, 'id' | 'at'>;

export interface JobTimes {
  submittedAt: number;
  grantedAt: number | null;
}

export class Scheduler {
  readonly #supervisor: SupervisorActor;
  readonly #now: () => number;
  readonly #times = new Map<string, JobTimes>();
  /** What each live job hears of the supervisor: one listener for all of them, one lookup per event. */
  readonly #jobs = new Map<string, (event: SupervisorEmitted) => void>();

  constructor(supervisor: SupervisorActor, now: () => number = Date.now) {
    this.#supervisor = supervisor;
    this.#now = now;
    supervisor.on('*', (event: SupervisorEmitted) => {
      if ('jobId' in event) this.#jobs.get(event.jobId)?.(event);
    });
  }

  /** When each live job was submitted and granted (for `waited_ms` and `running_ms`). */
  times(jobId: string): JobTimes | undefined {
    return this.#times.get(jobId);
  }

  reserve(request: JobRequest, options: { signal?: AbortSignal; onQueued?: (position: number) => void } = {}): Promise<Lease> {
    const supervisor = this.#supervisor;
    const job: JobSpec = { ...request, id: randomUUID(), at: this.#now() };
    const times: JobTimes = { submittedAt: job.at, grantedAt: null };
    this.#times.set(job.id, times);
    const jobs = this.#jobs;
    /** The job has ended here: it hears nothing more, and its times go. */
    const forget = () => {
      jobs.delete(job.id);
      this.#times.delete(job.id);
    };

    return new Promise<Lease>((resolve, reject) => {
      let settled = false;
      const revoked = new AbortController();
      /** The image step's grant, once it came (it may come before anyone asks for it). */
      let imageStep: ImageStep | undefined;
      let stepWaiter: ((step: ImageStep) => void) | undefined;
      let released = false;
      const giveBack = (type: 'gpu.release' | 'job.cancel') => {
        if (released) return;
        released = true;
        forget();
        // How long it held its reservation: chat answers measure the overtaking rule (CONTRACT 9).
        supervisor.send(times.grantedAt === null ? { type, jobId: job.id } : { type, jobId: job.id, heldMs: this.#now() - times.grantedAt });
      };
      const onAbort = () => {
        if (settled) return;
        settled = true;
        forget();
        supervisor.send({ type: 'job.cancel', jobId: job.id });
        reject(new ReservationAbandoned('the client went away while its job waited'));
      };
      jobs.set(job.id, (event) => {
        if (event.type === 'job.queued') options.onQueued?.(event.position);
        else if (event.type === 'gpu.denied' && !settled) {
          settled = true;
            options.signal?.removeEventListener('abort', onAbort);
          forget();
          reject(new ReservationDenied(event.code, event.message, event.retryAfterSeconds));
        } else if (event.type === 'gpu.granted' && !settled) {
          settled = true;
          options.signal?.removeEventListener('abort', onAbort);
          times.grantedAt = this.#now();
          resolve({
            jobId: job.id,
            worker: event.worker,
            generation: event.generation,
            start: event.start,
            gpus: event.gpus,
            waitedMs: times.grantedAt - job.at,
            enhancer: event.enhancer ?? null,
            imageStep: (signal) => {
              if (imageStep) return Promise.resolve(imageStep);
              const either = AbortSignal.any([signal, revoked.signal]);
              if (either.aborted) return Promise.reject(either.reason as Error);
              return new Promise<ImageStep>((resolveStep, rejectStep) => {
                const onAbort = () => rejectStep(either.reason as Error);
                either.addEventListener('abort', onAbort, { once: true });
                stepWaiter = (step) => {
                  either.removeEventListener('abort', onAbort);
                  resolveStep(step);
                };
              });
            },
            signal: revoked.signal,
            release: () => giveBack('gpu.release'),
            cancel: () => giveBack('job.cancel'),
            stalled: (message) => {
              if (!released) supervisor.send({ type: 'worker.stalled', kind: event.worker, generation: event.generation, jobId: job.id, message });
            },
          });
        } else if (event.type === 'gpu.granted' && event.step === 'image') {
          imageStep = { generation: event.generation, start: event.start, gpus: event.gpus };
          stepWaiter?.(imageStep);
        } else if (event.type === 'gpu.revoked') {
          released = true;
            forget();
          revoked.abort(new ReservationRevoked(event.code, event.message));
        }
      });
      if (options.signal?.aborted) {
        forget();
        reject(new ReservationAbandoned('the client went away before its job was queued'));
        return;
      }
      options.signal?.addEventListener('abort', onAbort, { once: true });
      supervisor.send({ type: 'gpu.reserve', job });
    });
  }
}
