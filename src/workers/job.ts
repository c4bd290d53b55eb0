// One job on a granted lease, for the routes of the speech workers: the work runs with a signal
// that aborts when the client leaves or the reservation is revoked; afterwards the reservation
// goes back. A failure answers with the supervisor's diagnosis when the worker died (its
// revocation), else 502 worker_failed naming the worker.
import { errors } from '../routes/errors.js';
import type { Lease } from '../system/scheduler.js';
import { revocation } from './chatRequest.js';

export async function onLease<T>(lease: Lease, client: AbortSignal, worker: string, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await work(AbortSignal.any([client, lease.signal]));
  } catch (error) {
    if (client.aborted) {
      lease.cancel();
      throw client.reason;
    }
    // The diagnosis comes with the revocation, so it is awaited before the reservation goes back.
    const revoked = await revocation(lease, 2_000);
    lease.cancel();
    if (revoked) throw revoked;
    throw errors.workerFailed(`The ${worker} failed: ${(error as Error).message}`);
  }
  lease.release();
  return result;
}
