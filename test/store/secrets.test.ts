// The gate in front of scrypt: a flood of logins runs at most two hashes at
// once and queues a few; a further one is refused at once with the contract's 429, so the thread
// pool that every request's file reads need is never filled with password checks.
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { HashGate } from '../../src/store/secrets.js';

t.test('at most `concurrency` tasks run, `queue` wait, and the rest are refused with 429 login_busy', async (t) => {
  const gate = new HashGate(2, 3);
  let running = 0;
  let most = 0;
  const releases: Array<() => void> = [];
  const task = () =>
    new Promise<string>((resolve) => {
      running += 1;
      most = Math.max(most, running);
      releases.push(() => {
        running -= 1;
        resolve('done');
      });
    });
  const settled = Array.from({ length: 8 }, () => gate.run(task).then((v) => v, (e: unknown) => e));
  await new Promise((r) => setImmediate(r));
  t.equal(running, 2, 'two run');
  const refused = await Promise.all(settled.slice(5));
  for (const error of refused) {
    t.ok(error instanceof ApiError, 'refused at once');
    t.match((error as ApiError).body(), { error: { type: 'rate_limit_error', code: 'login_busy' } });
    t.equal((error as ApiError).headers['retry-after'], '1');
  }
  while (releases.length > 0) {
    releases.shift()?.();
    await new Promise((r) => setImmediate(r));
  }
  t.same(await Promise.all(settled.slice(0, 5)), Array(5).fill('done'), 'the queued ones ran, in turn');
  t.equal(most, 2, 'never more than two at once');
  t.equal(gate.most, 2, 'and the gate counts the same (what the login flood test reads)');
  t.equal(gate.running, 0, 'the gate is free again');
  t.equal(await gate.run(async () => 'again'), 'again');
});
