// What a job does with its lease (src/workers/lease.ts), row by row: success gives the reservation
// back (or keeps it for a stream), a client that left cancels it and gets its own reason, any other
// failure is named by the diagnosis, awaited before the reservation goes back, so the revocation
// that carries a dead worker's cause is never missed.
import t from 'tap';
import { errors, type ApiError } from '../../src/errors.js';
import { ReservationRevoked, type Lease } from '../../src/system/scheduler.js';
import { clientOrLease, onLease, withLease } from '../../src/workers/lease.js';

/** A lease that records what was done with it, in order. */
function fakeLease(signal: AbortSignal = new AbortController().signal) {
  const calls: string[] = [];
  const lease = { signal, release: () => calls.push('release'), cancel: () => calls.push('cancel') } as unknown as Lease;
  return { lease, calls };
}

t.test('withLease: what happens to the reservation, row by row', async (t) => {
  const rows: Array<{
    what: string;
    work: 'ok' | 'fails' | 'fails after the client left';
    then?: 'release' | 'keep';
    calls: string[];
    outcome: RegExp | 'result';
  }> = [
    { what: 'the work succeeds', work: 'ok', calls: ['release'], outcome: 'result' },
    { what: 'the work succeeds and the caller keeps the lease (a stream)', work: 'ok', then: 'keep', calls: [], outcome: 'result' },
    { what: 'the work fails', work: 'fails', calls: ['diagnose', 'cancel'], outcome: /the diagnosis/ },
    { what: 'the work fails on a kept lease', work: 'fails', then: 'keep', calls: ['diagnose', 'cancel'], outcome: /the diagnosis/ },
    { what: 'the client left', work: 'fails after the client left', calls: ['cancel'], outcome: /client gone/ },
  ];
  for (const row of rows) {
    const client = new AbortController();
    const { lease, calls } = fakeLease();
    const work = async () => {
      if (row.work === 'ok') return 'result';
      if (row.work === 'fails after the client left') client.abort(new Error('client gone'));
      throw new Error('broken pipe');
    };
    const diagnose = async (error: unknown) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      calls.push('diagnose');
      return new Error(`the diagnosis of ${(error as Error).message}`);
    };
    const outcome = await withLease(lease, client.signal, work, diagnose, row.then).catch((error: unknown) => error as Error);
    if (row.outcome === 'result') t.equal(outcome, 'result', `${row.what}: the work's result`);
    else t.match((outcome as Error).message, row.outcome, `${row.what}: rejects with ${String(row.outcome)}`);
    t.same(calls, row.calls, `${row.what}: ${row.calls.join(', ') || 'nothing done with the lease'}`);
  }
});

t.test('onLease: a revocation wins, a named failure keeps its code, anything else is 502 naming the worker', async (t) => {
  const revoked = new AbortController();
  const cause = new ReservationRevoked('worker_failed', 'The worker ran out of memory.');
  const first = fakeLease(revoked.signal);
  const late = onLease(first.lease, new AbortController().signal, 'image worker', async () => {
    // The worker dies: the work fails at once, the supervisor's revocation comes a little later.
    setTimeout(() => revoked.abort(cause), 20);
    throw new Error('connection reset');
  }).catch((error: unknown) => error);
  t.equal(await late, cause, 'the diagnosis that came after the failure, not the connection error');
  t.same(first.calls, ['cancel'], 'the reservation went back after the diagnosis');

  const named = errors.enhancerFailed('The prompt enhancer failed: no JSON');
  const second = fakeLease();
  const started = Date.now();
  const kept = await onLease(second.lease, new AbortController().signal, 'image worker', async () => {
    throw named;
  }).catch((error: unknown) => error);
  t.equal(kept, named, 'the code the work named stays');
  t.ok(Date.now() - started >= 1_900, 'a failure without a revocation waits for it (2 s) before it is named');

  const third = fakeLease();
  const plain = (await onLease(third.lease, new AbortController().signal, 'speech-to-text worker', async () => {
    throw new Error('engine ended');
  }).catch((error: unknown) => error)) as ApiError;
  t.match({ statusCode: plain.statusCode, code: plain.code, message: plain.message }, { statusCode: 502, code: 'worker_failed', message: 'The speech-to-text worker failed: engine ended' });

  const fourth = fakeLease();
  const client = new AbortController();
  t.equal(
    await onLease(fourth.lease, client.signal, 'text-to-speech worker', async (signal) => {
      client.abort(new Error('gone'));
      t.ok(signal.aborted, 'the work signal follows the client');
      throw signal.reason;
    }).catch((error: unknown) => (error as Error).message),
    'gone',
    'a client that left gets its own reason back',
  );
  t.same(fourth.calls, ['cancel'], 'and the reservation is cancelled');
});

t.test("onLease: the job's own 4xx answers at once, without waiting for a revocation", async (t) => {
  for (const own of [
    errors.invalidValue('voice', 'The voice xx is not one of the backend; supported: en, de.'),
    errors.conflict('enhancer_not_installed', 'The t2i prompt enhancer is not installed.'),
  ]) {
    const revoked = new AbortController();
    const { lease, calls } = fakeLease(revoked.signal);
    const answered = onLease(lease, new AbortController().signal, 'text-to-speech worker', async () => {
      // A revocation that comes after the job's own refusal (an endpoint stop, a later death) is
      // another matter: the client reads what was wrong with its request.
      setTimeout(() => revoked.abort(new ReservationRevoked('endpoint_stopped', 'The endpoint is stopping.')), 0);
      throw own;
    }).catch((error: unknown) => error);
    t.equal(await answered, own, `${own.statusCode} ${own.code ?? ''}: the job's own answer, not the revocation that came after it`);
    t.same(calls, ['cancel'], `${own.statusCode}: the reservation went back`);
  }
});

t.test('the work signal aborts when the client leaves or the reservation is revoked, with that reason', async (t) => {
  const leaseOf = (signal: AbortSignal) => ({ signal }) as Lease;
  for (const which of ['client', 'lease'] as const) {
    const client = new AbortController();
    const revoked = new AbortController();
    const signal = clientOrLease(client.signal, leaseOf(revoked.signal));
    t.notOk(signal.aborted, `${which}: open while both are`);
    const reason = new Error(`${which} gone`);
    (which === 'client' ? client : revoked).abort(reason);
    t.ok(signal.aborted, `${which}: aborted`);
    t.equal(signal.reason, reason, `${which}: with its reason`);
    (which === 'client' ? revoked : client).abort(new Error('later'));
    t.equal(signal.reason, reason, `${which}: the first reason stays`);
  }
  const gone = new AbortController();
  gone.abort(new Error('before'));
  t.equal(clientOrLease(gone.signal, leaseOf(new AbortController().signal)).reason, gone.signal.reason, 'a client already gone');
  t.equal(clientOrLease(new AbortController().signal, leaseOf(gone.signal)).reason, gone.signal.reason, 'a reservation already revoked');
});
