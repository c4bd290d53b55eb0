// The supervisor's row for a chat worker held by one answer (beyond the spec): a running
// request that got no token past its limit, whose worker answers no status probe (stallWatch.ts),
// restarts the worker only when others wait for it; every job on it then fails with worker_failed
// and the report's message, and the waiting jobs get a new start. A report about another start, or about a job that no
// longer runs, changes nothing.
import t from 'tap';
import { supervisorHarness, type SupervisorHarness } from '../helpers/supervisor.js';

const HELD = 'The chat worker gave a request no first token for 61 s and answered no status probe while other requests waited: one answer held it, so it was restarted.';

const stalled = (h: SupervisorHarness, jobId: string) => h.send({ type: 'worker.stalled', kind: 'chat', generation: h.gen('chat'), jobId, message: HELD });

t.test('loaded | a stalled answer and nobody else waits | stays loaded: the answer goes on under its own limits', async (t) => {
  const h = supervisorHarness();
  const held = await h.submit();
  const preload = await h.submit({ source: 'preload' });
  await stalled(h, held);
  t.same(h.outcome(held), ['job.queued', 'granted +start'], 'the answer still runs');
  t.same(h.unloads(), [], 'nothing is unloaded');
  t.match(h.worker('chat'), { state: 'loaded', generation: 1 });
  t.same(h.waiting(), [preload], 'a waiting preload is no one who waits: it does not restart the worker');
});

t.test('loaded | a stalled answer while another chat waits | unloaded and started again: the answer fails with its message, the waiting chat runs on the new start', async (t) => {
  const h = supervisorHarness();
  const held = await h.submit();
  const waiting = await h.submit();
  t.same(h.outcome(waiting), ['job.queued'], 'the one slot is taken: the second waits');
  await stalled(h, held);
  t.same(h.outcome(held), ['job.queued', 'granted +start', 'revoked worker_failed']);
  t.match(h.emitted.find((e) => e.type === 'gpu.revoked' && e.jobId === held), { message: HELD }, "the request's error is the watch's message");
  t.match(h.unloads('chat'), [{ code: 'stalled', generation: 1, reason: /an answer held the chat worker \(no token, no answer to a status probe\) while others waited: it was restarted/ }]);
  t.same(h.outcome(waiting), ['job.queued', 'granted +start'], 'the waiting chat gets a new start');
  t.match(h.worker('chat'), { state: 'loaded', generation: 2 });
});

t.test('loaded | a stalled answer while another answer runs on the same worker | both fail with the same message (a held loop holds both)', async (t) => {
  const h = supervisorHarness();
  const held = await h.submit({ slots: 2 });
  const other = await h.submit({ slots: 2 });
  t.ok(h.granted(other), 'both run, one slot each');
  await stalled(h, held);
  t.match(h.emitted.find((e) => e.type === 'gpu.revoked' && e.jobId === held), { code: 'worker_failed', message: HELD });
  t.match(h.emitted.find((e) => e.type === 'gpu.revoked' && e.jobId === other), { code: 'worker_failed', message: HELD });
  t.same(h.context().jobs, {}, 'no job is left on the worker');
  t.equal(h.unloads('chat').length, 1);
});

t.test('a stall report about an earlier start, or about a job that no longer runs, changes nothing', async (t) => {
  const h = supervisorHarness();
  const done = await h.submit();
  await h.release(done);
  const held = await h.submit();
  const waiting = await h.submit();
  await h.send({ type: 'worker.stalled', kind: 'chat', generation: h.gen('chat') + 1, jobId: held, message: HELD });
  await stalled(h, done);
  t.same(h.unloads(), [], 'neither a start that is not the current one nor a finished job restarts the worker');
  t.same(h.outcome(held), ['granted'], 'the running answer goes on (it ran at once on the loaded worker)');
  t.same(h.outcome(waiting), ['job.queued']);
});
