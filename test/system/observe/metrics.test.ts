// The metrics the supervisor's events feed, on a running supervisor with a simulated
// clock: queue wait from the reservation to its grant, refusals by code, a worker's load and load
// time, a crash by its diagnosis with the revocation it causes, unloads by reason class; the
// scrape-time gauges (queue depth, running jobs, worker state, simulated GPUs, RAM budget); and
// the class of every unload reason the supervisor writes.
import t from 'tap';
import { Metrics } from '../../../src/system/observe/metrics.js';
import type { SupervisorActor } from '../../../src/system/scheduler.js';
import { supervisorHarness } from '../../helpers/supervisor.js';
import { sample } from '../../helpers/metrics.js';

const MIB = 1024 * 1024;

t.test('supervisor events become queue, worker and crash metrics', async (t) => {
  const metrics = new Metrics({
    config: { env: { SERVICE_DECK_GPUS: '[{"uuid":"GPU-sim-a","name":"sim","memoryTotalMiB":24576}]' }, ramReserveMiB: 1024 },
    now: () => h.clock.now(),
  });
  const h = supervisorHarness({ maxWaiting: 1, inspect: metrics.observe });
  metrics.attach(h.actor as unknown as SupervisorActor);
  const alpha = { profileId: 'a', profile: { name: 'alpha' } };

  const first = await h.submit(alpha);
  t.same(h.outcome(first), ['job.queued', 'granted +start']);
  const second = await h.submit(alpha);
  const third = await h.submit(alpha);
  t.same(h.outcome(third), ['denied queue_full']);
  let text = await metrics.text();
  t.equal(sample(text, 'service_deck_queue_depth{kind="chat"}'), 1, 'one waits');
  t.equal(sample(text, 'service_deck_jobs_running{kind="chat"}'), 1);
  t.equal(sample(text, 'service_deck_worker_state{kind="chat",state="loaded"}'), 1);
  t.equal(sample(text, 'service_deck_worker_state{kind="chat",state="unloaded"}'), 0);
  t.equal(sample(text, 'service_deck_worker_loads_total{kind="chat",model="alpha"}'), 1);
  t.equal(sample(text, 'service_deck_worker_load_seconds_count{kind="chat",model="alpha"}'), 1);
  t.equal(sample(text, 'service_deck_queue_rejections_total{kind="chat",code="queue_full"}'), 1);

  h.clock.increment(2_500);
  await h.release(first);
  t.same(h.outcome(second), ['job.queued', 'granted']);
  text = await metrics.text();
  t.equal(sample(text, 'service_deck_queue_wait_seconds_count{kind="chat",model="alpha"}'), 2);
  t.equal(sample(text, 'service_deck_queue_wait_seconds_sum{kind="chat",model="alpha"}'), 2.5, 'the second waited 2.5 s on the clock');
  t.equal(sample(text, 'service_deck_queue_wait_seconds_bucket{kind="chat",model="alpha",le="1"}'), 1, 'buckets are cumulative: the first waited 0 s');
  t.equal(sample(text, 'service_deck_queue_wait_seconds_bucket{kind="chat",model="alpha",le="2.5"}'), 2, 'an observation on a bound counts in that bucket');
  t.equal(sample(text, 'service_deck_queue_wait_seconds_bucket{kind="chat",model="alpha",le="+Inf"}'), 2);
  t.equal(sample(text, 'service_deck_queue_depth{kind="chat"}'), 0);

  await h.send({ type: 'worker.exited', kind: 'chat', generation: h.gen('chat'), cause: 'ram_oom', message: 'killed by the OOM killer' });
  text = await metrics.text();
  t.equal(sample(text, 'service_deck_worker_crashes_total{kind="chat",cause="ram_oom"}'), 1, 'the crash by its diagnosis');
  t.equal(sample(text, 'service_deck_reservations_revoked_total{kind="chat",code="worker_failed"}'), 1, 'the running job lost its reservation');
  t.notMatch(text, 'killed by the OOM killer', 'the message is no label');

  // A job for another profile makes the supervisor switch: an unload with its reason class.
  const beta = await h.submit(alpha);
  await h.release(beta);
  await h.submit({ profileId: 'b', profile: { name: 'beta' } });
  text = await metrics.text();
  t.equal(sample(text, 'service_deck_worker_unloads_total{kind="chat",reason="profile_switch"}'), 1);
  t.equal(sample(text, 'service_deck_worker_loads_total{kind="chat",model="beta"}'), 1);
  t.notMatch(text, /switch to profile/, 'the reason sentence is no label');

  t.equal(sample(text, 'service_deck_gpu_memory_total_bytes{gpu="GPU-sim-a"}'), 24576 * MIB);
  t.equal(sample(text, 'service_deck_gpu_memory_free_bytes{gpu="GPU-sim-a"}'), 24576 * MIB);
  t.equal(sample(text, 'service_deck_ram_reserve_bytes'), 1024 * MIB);
  t.ok((sample(text, 'service_deck_ram_available_bytes') ?? 0) > 0);
  h.actor.stop();
});

t.test('unloads are counted by the code the supervisor gives, never by its sentence', async (t) => {
  const metrics = new Metrics({ config: { env: { SERVICE_DECK_GPUS: 'none' }, ramReserveMiB: 1024 }, now: () => h.clock.now() });
  const h = supervisorHarness({ inspect: metrics.observe });
  metrics.attach(h.actor as unknown as SupervisorActor);
  await h.release(await h.submit({ profileId: 'a', profile: { name: 'alpha' } }));
  await h.release(await h.submit({ kind: 'stt', profileId: 's' }));
  await h.send({ type: 'workers.unloadAll', requestId: 'stop' });
  const text = await metrics.text();
  const unloads = h.unloads();
  t.same(unloads.map((u) => [u.kind, u.code]).sort(), [['chat', 'endpoint_stop'], ['stt', 'endpoint_stop']], 'the endpoint stop unloads both, with its code');
  for (const u of unloads) t.equal(sample(text, `service_deck_worker_unloads_total{kind="${u.kind}",reason="${u.code}"}`), 1, `${u.kind}: counted as ${u.code}`);
  t.notMatch(text, /reason="endpoint stop"/, 'the sentence is no label');
  h.actor.stop();
});
