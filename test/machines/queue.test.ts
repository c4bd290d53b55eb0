// Spec 3.7, the queue, rule by rule on a running actor with a simulated clock: the 600 s expiry is
// driven by the clock, never waited for.
import t from 'tap';
import { createActor, SimulatedClock } from 'xstate';
import { queueMachine, type QueuedJob, type QueueEmitted, type QueueInput } from '../../machines/queue/index.js';

function harness(input: QueueInput = {}) {
  const clock = new SimulatedClock();
  const actor = createActor(queueMachine, { clock, input });
  const emitted: QueueEmitted[] = [];
  actor.on('*', (event) => void emitted.push(event));
  actor.start();
  let n = 0;
  const job = (over: Partial<QueuedJob> = {}): QueuedJob => ({ id: `j${++n}`, kind: 'chat', source: 'api', profileId: 'p1', revision: 1, at: clock.now(), ...over });
  const enqueue = (over: Partial<QueuedJob> = {}) => {
    const j = job(over);
    actor.send({ type: 'job.enqueue', job: j });
    return j.id;
  };
  const waiting = () => actor.getSnapshot().context.jobs.map((j) => j.id);
  const outcome = (jobId: string) => emitted.filter((e) => e.jobId === jobId && e.type !== 'job.queued');
  return { actor, clock, emitted, enqueue, waiting, outcome };
}

t.test('FIFO: jobs wait in arrival order and get their position and ticket', async (t) => {
  const q = harness();
  t.equal(q.actor.getSnapshot().value, 'idle');
  const ids = [q.enqueue(), q.enqueue({ kind: 'image', profileId: 'img' }), q.enqueue({ kind: 'stt', profileId: null, revision: null })];
  t.equal(q.actor.getSnapshot().value, 'waiting');
  t.same(q.waiting(), ids);
  t.same(
    q.emitted.map((e) => (e.type === 'job.queued' ? e.position : -1)),
    [1, 2, 3],
  );
  q.actor.send({ type: 'job.dispatch', jobId: ids[0]! });
  t.same(q.waiting(), ids.slice(1));
  t.same(q.outcome(ids[0]!), [{ type: 'job.dispatched', jobId: ids[0] }]);
  q.actor.send({ type: 'job.dispatch', jobId: ids[1]! });
  const later = q.enqueue();
  t.same(
    q.emitted.flatMap((e) => (e.type === 'job.queued' ? [[e.jobId, e.position, e.ticket]] : [])),
    [[ids[0], 1, 1], [ids[1], 2, 2], [ids[2], 3, 3], [later, 2, 4]],
    'the ticket is the place in the FIFO order for good (the supervisor plans by it); the position is among those waiting now',
  );
  q.actor.send({ type: 'job.dispatch', jobId: ids[2]! });
  q.actor.send({ type: 'job.dispatch', jobId: later });
  t.equal(q.actor.getSnapshot().value, 'idle', 'an emptied queue is idle again');
});

t.test('at most 16 wait: the 17th is refused with queue_full and a Retry-After hint', async (t) => {
  const q = harness();
  const ids = Array.from({ length: 16 }, () => q.enqueue());
  const seventeenth = q.enqueue();
  t.same(q.waiting(), ids, 'the 16 keep their places');
  t.same(q.outcome(seventeenth), [{ type: 'job.rejected', jobId: seventeenth, code: 'queue_full', retryAfterSeconds: 10 }]);
  q.actor.send({ type: 'job.dispatch', jobId: ids[0]! });
  const next = q.enqueue();
  t.equal(q.waiting().at(-1), next, 'a freed place is taken again');
});

t.test('at most 600 s waiting: the job expires with queue_timeout, exactly at the limit', async (t) => {
  const q = harness();
  const first = q.enqueue();
  q.clock.increment(100_000);
  const second = q.enqueue();
  q.clock.increment(499_999);
  t.same(q.waiting(), [first, second], 'one millisecond before the limit nothing expired');
  q.clock.increment(1);
  t.same(q.outcome(first), [{ type: 'job.rejected', jobId: first, code: 'queue_timeout' }]);
  t.same(q.waiting(), [second]);
  q.clock.increment(100_000);
  t.same(q.outcome(second), [{ type: 'job.rejected', jobId: second, code: 'queue_timeout' }], 'each job has its own 600 s');
  t.equal(q.actor.getSnapshot().value, 'idle');
});

t.test('a client that disconnects leaves the queue at once, and its timer with it', async (t) => {
  const q = harness();
  const gone = q.enqueue();
  const stays = q.enqueue();
  q.actor.send({ type: 'job.cancel', jobId: gone });
  t.same(q.waiting(), [stays]);
  t.same(q.outcome(gone), [{ type: 'job.removed', jobId: gone }]);
  t.notOk(q.actor.getSnapshot().children[`expiry-${gone}`], 'its expiry timer is stopped');
  q.clock.increment(600_000);
  t.same(q.outcome(gone), [{ type: 'job.removed', jobId: gone }], 'no later expiry for a job that left');
  q.actor.send({ type: 'job.cancel', jobId: 'unknown' });
  t.same(q.emitted.filter((e) => e.jobId === 'unknown'), [], 'cancelling an unknown job does nothing');
});

t.test('waiting requests of a changed or deactivated profile are rejected; others keep their order', async (t) => {
  const q = harness();
  const a1 = q.enqueue({ profileId: 'a', revision: 3 });
  const b1 = q.enqueue({ profileId: 'b', revision: 1 });
  const a2 = q.enqueue({ profileId: 'a', revision: 4 });
  const c1 = q.enqueue({ profileId: 'c', revision: 1 });
  q.actor.send({ type: 'profile.changed', profileId: 'a', revision: 4, published: true });
  t.same(q.outcome(a1), [{ type: 'job.rejected', jobId: a1, code: 'profile_changed' }], 'the old revision is rejected');
  t.same(q.waiting(), [b1, a2, c1], 'a job that already took the new revision stays');
  q.actor.send({ type: 'profile.changed', profileId: 'c', revision: null, published: false });
  t.same(q.outcome(c1), [{ type: 'job.rejected', jobId: c1, code: 'profile_changed' }], 'a deleted profile');
  t.same(q.waiting(), [b1, a2]);
  const test = q.enqueue({ profileId: 'b', revision: 1, source: 'test' });
  q.actor.send({ type: 'profile.changed', profileId: 'b', revision: 1, published: false });
  t.same(q.outcome(b1), [{ type: 'job.rejected', jobId: b1, code: 'profile_changed' }], 'an unpublished profile: its waiting API job goes');
  t.same(q.waiting(), [a2, test], "the operator's test needs no publication and keeps its place");
});

t.test('endpoint stop discards every waiting job with endpoint_stopped', async (t) => {
  const q = harness();
  const ids = [q.enqueue(), q.enqueue({ kind: 'tts', profileId: 't' })];
  q.actor.send({ type: 'queue.discardAll' });
  t.same(q.waiting(), []);
  for (const id of ids) t.same(q.outcome(id), [{ type: 'job.rejected', jobId: id, code: 'endpoint_stopped' }]);
  t.equal(q.actor.getSnapshot().value, 'idle');
  q.clock.increment(600_000);
  t.equal(q.emitted.filter((e) => e.type === 'job.rejected' && e.code === 'queue_timeout').length, 0, 'no timer outlives its job');
});

t.test('every job ends exactly once over random arrival sequences (simulated clock)', async (t) => {
  let seed = 12345;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let run = 0; run < 200; run++) {
    const q = harness({ maxWaiting: 4 });
    const submitted: string[] = [];
    for (let step = 0; step < 60; step++) {
      const r = random();
      const waiting = q.waiting();
      const pick = waiting[Math.floor(random() * waiting.length)];
      if (r < 0.4) submitted.push(q.enqueue({ profileId: random() < 0.5 ? 'a' : 'b', revision: 1 }));
      else if (r < 0.55 && pick) q.actor.send({ type: 'job.dispatch', jobId: pick });
      else if (r < 0.65 && pick) q.actor.send({ type: 'job.cancel', jobId: pick });
      else if (r < 0.72) q.actor.send({ type: 'profile.changed', profileId: 'a', revision: 2, published: true });
      else if (r < 0.75) q.actor.send({ type: 'queue.discardAll' });
      else q.clock.increment(Math.floor(random() * 300_000));
      const order = q.waiting();
      const indices = order.map((id) => submitted.indexOf(id));
      if (indices.some((v, i) => i > 0 && v < indices[i - 1]!)) t.fail(`FIFO broken in run ${run}`);
    }
    q.actor.send({ type: 'queue.discardAll' });
    const endings = new Map<string, number>();
    for (const e of q.emitted) if (e.type !== 'job.queued') endings.set(e.jobId, (endings.get(e.jobId) ?? 0) + 1);
    const wrong = submitted.filter((id) => endings.get(id) !== 1);
    if (wrong.length > 0) t.fail(`run ${run}: jobs not ended exactly once: ${wrong.join(',')}`);
  }
  t.pass('200 random sequences: every job ended exactly once, FIFO held');
});

t.test('warm preloads (spec 3.6) take no request place: 16 requests still fit beside them, and their positions skip them', async (t) => {
  const q = harness();
  const preloads = [q.enqueue({ kind: 'tts', source: 'preload' }), q.enqueue({ kind: 'stt', source: 'preload' })];
  const requests = Array.from({ length: 16 }, () => q.enqueue());
  t.same(q.waiting(), [...preloads, ...requests], 'all wait');
  t.same(
    q.emitted.filter((e) => e.type === 'job.queued' && requests.includes(e.jobId)).map((e) => (e.type === 'job.queued' ? e.position : -1)),
    Array.from({ length: 16 }, (_, i) => i + 1),
    'a request is told its place among requests',
  );
  const seventeenth = q.enqueue();
  t.same(q.outcome(seventeenth), [{ type: 'job.rejected', jobId: seventeenth, code: 'queue_full', retryAfterSeconds: 10 }], 'the 17th request is refused');
  const third = q.enqueue({ kind: 'tts', source: 'preload' });
  t.same(q.outcome(third), [], 'a preload is never refused for the requests');
});
