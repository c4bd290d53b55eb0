// The job side of a reservation: the one place that decides what a job does with its lease when
// its work fails. A client that left cancels the reservation (a start this job began and nobody
// else uses is aborted) and gets its own abort reason back; a job's own 4xx (its request is at
// fault, no worker died) answers at once; any other failure waits for the supervisor's diagnosis
// (a dead worker's revocation carries it) before the reservation goes back, so the client reads
// the likely cause rather than a broken connection.
import { ApiError, errors } from '../errors.js';
import { ReservationDenied, ReservationRevoked, type Lease } from '../system/scheduler.js';

/** The reason a signal was aborted with, or undefined. */
const reasonOf = (signal: AbortSignal): unknown => (signal.aborted ? (signal.reason as unknown) : undefined);

/** Waits up to `ms` for the reservation to be revoked (the supervisor's diagnosis of a dead worker). */
export function revocation(lease: Lease, ms: number): Promise<ReservationRevoked | undefined> {
  const now = reasonOf(lease.signal);
  if (now instanceof ReservationRevoked) return Promise.resolve(now);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      lease.signal.removeEventListener('abort', onAbort);
      resolve(undefined);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      const reason = reasonOf(lease.signal);
      resolve(reason instanceof ReservationRevoked ? reason : undefined);
    };
    lease.signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A signal that aborts when the client leaves or the reservation is revoked, with the first one's
 * reason. Both live only as long as the request, so plain listeners suffice: `AbortSignal.any`
 * tracks its sources through weak references, which cost more per request.
 */
export function clientOrLease(client: AbortSignal, lease: Lease): AbortSignal {
  if (client.aborted) return client;
  if (lease.signal.aborted) return lease.signal;
  const either = new AbortController();
  const abort = function (this: AbortSignal) {
    either.abort(this.reason);
  };
  client.addEventListener('abort', abort, { once: true });
  lease.signal.addEventListener('abort', abort, { once: true });
  return either.signal;
}

/**
 * Runs `work` on a granted lease. When it fails: a client that left cancels the reservation and
 * gets its abort reason back; otherwise `diagnose` names the failure it rejects with (it may wait
 * for the revocation) before the reservation goes back. When it succeeds the reservation goes back too,
 * unless `then` is 'keep': the caller hands the lease on (a stream holds it until its end).
 */
export async function withLease<T>(
  lease: Lease,
  client: AbortSignal,
  work: () => Promise<T>,
  diagnose: (error: unknown) => Promise<unknown>,
  then: 'release' | 'keep' = 'release',
): Promise<T> {
  let result: T;
  try {
    result = await work();
  } catch (error) {
    if (client.aborted) {
      lease.cancel();
      throw client.reason;
    }
    const failure = await diagnose(error);
    lease.cancel();
    throw failure;
  }
  if (then === 'release') lease.release();
  return result;
}

/** How long a failed job waits for the revocation that carries a dead worker's diagnosis. */
export const DIAGNOSIS_WAIT_MS = 2_000;

/**
 * One job of a worker that answers in one piece (speech, transcription, image): `work` runs with
 * a signal that aborts when the client leaves or the reservation is revoked. The job's own 4xx
 * (a request its worker cannot serve) answers at once: no worker died for it. Any other failure
 * answers with the supervisor's diagnosis when the worker died (its revocation, awaited up to
 * DIAGNOSIS_WAIT_MS), else keeps the code the work already named (the prompt enhancer's 502
 * enhancer_failed), else 502 worker_failed naming the worker.
 */
export function onLease<T>(lease: Lease, client: AbortSignal, worker: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  return withLease(
    lease,
    client,
    () => work(clientOrLease(client, lease)),
    async (error) => {
      if (error instanceof ApiError && error.statusCode < 500) return error;
      const revoked = await revocation(lease, DIAGNOSIS_WAIT_MS);
      if (revoked) return revoked;
      if (error instanceof ApiError) return error;
      return errors.workerFailed(`The ${worker} failed: ${(error as Error).message}`);
    },
  );
}

/** CONTRACT section 5: what a refused or revoked reservation answers. */
function reservationError(error: ReservationDenied | ReservationRevoked): ApiError {
  switch (error.code) {
    case 'queue_full':
      return errors.tooManyRequests(error.code, error.message, (error as ReservationDenied).retryAfterSeconds ?? 10);
    case 'profile_changed':
    case 'image_busy':
      return errors.conflict(error.code, error.message);
    case 'worker_failed':
      return errors.workerFailed(error.message);
    case 'enhancer_failed':
      return errors.enhancerFailed(`The prompt enhancer failed: ${error.message}`);
    default:
      return errors.unavailable(error.code, error.message);
  }
}

/** A job's own failure as the API answers it (an ApiError, or a refused or revoked reservation); undefined for anything else. */
export function jobFailure(error: unknown): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (error instanceof ReservationDenied || error instanceof ReservationRevoked) return reservationError(error);
  return undefined;
}
