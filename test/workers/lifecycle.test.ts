// How a job waits for a worker start to end (whenGone in src/workers/lifecycle.ts), on a worker
// machine with a simulated clock and engine: the start is gone (unloaded), lost (its process
// outlived SIGKILL: the job waits no longer, the supervisor keeps its memory reserved), the
// client left (the wait ends with its reason), or the limit came first. Whichever ends the wait,
// nothing is left listening on the machine or the signal.
import { getEventListeners } from 'node:events';
import t from 'tap';
import { KILL_LIMIT_MS, lifecycleMachine, type LaunchBase } from '../../machines/worker/lifecycle.js';
import { whenGone } from '../../src/workers/lifecycle.js';
import { countSubscriptions, lifecycleHarness } from '../helpers/lifecycle.js';
import { baseLaunch, baseStart } from '../helpers/workerStart.js';

const GRACE_MS = 1_000;
const machine = lifecycleMachine<LaunchBase, 'enhancer'>({
  id: 'testWorker',
  kind: 'enhancer',
  name: 'test worker',
  limits: { loadTimeLimitMs: 5_000, terminationGraceMs: GRACE_MS },
  launch: baseLaunch,
  rows: { start: 'start row', cancel: 'cancel row', unload: 'unload row', error: 'error row' },
});
/** A worker whose start 1 is loaded and then unloaded by the supervisor: its process is being ended. */
function unloading() {
  const h = lifecycleHarness(machine);
  h.actor.send({ type: 'worker.start', start: baseStart({ generation: 1, profileId: 'p', revision: 1 }) });
  h.engine({ type: 'engine.spawned', pid: 4001 });
  h.engine({ type: 'engine.ready' });
  h.actor.send({ type: 'worker.unload', generation: 1, reason: 'the enhancer answered' });
  return { ...h, subscriptions: countSubscriptions(h.actor) };
}
/** Long enough that only the machine, or the signal, ends the wait. */
const LIMIT_MS = 60_000;
const abortListeners = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;

t.test('gone: the process ended after the unload', async (t) => {
  const h = unloading();
  const client = new AbortController();
  const wait = whenGone(h.actor, 1, { limitMs: LIMIT_MS, signal: client.signal });
  h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGTERM', cause: 'stopped', message: 'stopped' } });
  t.equal(await wait, 'gone');
  t.equal(h.subscriptions(), 0, 'the machine has no listener left');
  t.equal(abortListeners(client.signal), 0, 'the signal has no listener left');
});

t.test('lost: the process outlived SIGKILL by the kill limit, and the job waits no longer', async (t) => {
  const h = unloading();
  const client = new AbortController();
  const wait = whenGone(h.actor, 1, { limitMs: LIMIT_MS, signal: client.signal });
  h.clock.increment(GRACE_MS + KILL_LIMIT_MS);
  t.equal(h.state(), '{"running":"lost"}');
  t.equal(await wait, 'lost');
  t.equal(h.subscriptions(), 0, 'the machine has no listener left');
  t.equal(abortListeners(client.signal), 0, 'the signal has no listener left');
  t.equal(await whenGone(h.actor, 1, { limitMs: LIMIT_MS }), 'lost', 'a wait that begins once it is lost ends at once');
  t.equal(h.subscriptions(), 0, 'and subscribes to nothing');
});

t.test('the client leaves while the process is being ended: the wait ends with its reason', async (t) => {
  const h = unloading();
  const client = new AbortController();
  const wait = whenGone(h.actor, 1, { limitMs: LIMIT_MS, signal: client.signal });
  const reason = new Error('the client went away');
  client.abort(reason);
  await t.rejects(wait, reason);
  t.equal(h.state(), '{"running":"unloading"}', 'the process is still being ended');
  t.equal(h.subscriptions(), 0, 'the machine has no listener left');
  t.equal(abortListeners(client.signal), 0, 'the signal has no listener left');
  await t.rejects(whenGone(h.actor, 1, { limitMs: LIMIT_MS, signal: client.signal }), reason, 'a wait with a signal aborted already ends at once');
  t.equal(h.subscriptions(), 0, 'and subscribes to nothing');
});

t.test('the limit comes first (the machine reports neither): the wait ends, and its listeners go', async (t) => {
  // The simulated clock stands still: the machine stays unloading whatever the real time.
  const h = unloading();
  const client = new AbortController();
  t.equal(await whenGone(h.actor, 1, { limitMs: 20, signal: client.signal }), 'limit');
  t.equal(h.state(), '{"running":"unloading"}');
  t.equal(h.subscriptions(), 0, 'the machine has no listener left');
  t.equal(abortListeners(client.signal), 0, 'the signal has no listener left');
});
