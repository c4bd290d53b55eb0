// One job on a granted lease, for the routes of the speech workers: the work runs with a signal
// that aborts when the client leaves or the reservation is revoked; afterwards the reservation
// goes back. A failure answers with the supervisor's diagnosis when the worker died (its
// revocation), else 502 worker_failed naming the worker.
import { ApiError, errors } from '../errors.js';
import { ReservationDenied, ReservationRevoked, type Lease } from '../system/scheduler.js';
import { clientOrLease, revocation } from './chat/chatRequest.js';

export async function onLease<T>(lease: Lease, client: AbortSignal, worker: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await work(clientOrLease(client, lease));
  } catch (error) {
    if (client.aborted) {
      lease.cancel();
      throw client.reason;
    }
    // The diagnosis comes with the revocation, so it is awaited before the reservation goes back.
    const revoked = await revocation(lease, 2_000);
    lease.cancel();
    if (revoked) throw revoked;
    // A failure the work already named (the prompt enhancer's 502 enhancer_failed) keeps its code.
    if (error instanceof ApiError) throw error;
    throw errors.workerFailed(`The ${worker} failed: ${(error as Error).message}`);
  }
  lease.release();
  return result;
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
