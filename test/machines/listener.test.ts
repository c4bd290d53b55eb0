// Spec 3.1, the listener table, row by row, on a running actor with simulated actors and a
// simulated clock. Each row states its trigger, condition, next state and what else must happen.
import t from 'tap';
import type { Test as TapTest } from 'tap';
import { createActor, fromPromise, SimulatedClock, type AnyStateNode } from 'xstate';
import { TAGS } from '../../machines/ids.js';
import { listenerMachine, type ListenerEmitted, type ListenerInput } from '../../machines/listener/index.js';

interface Harness {
  actor: ReturnType<typeof createActor<typeof listenerMachine>>;
  calls: string[];
  replies: ListenerEmitted[];
  clock: SimulatedClock;
  seen: Set<string>;
  /** Resolves the pending closeListener (running answers have finished). */
  finishAnswers: () => void;
  settle: () => Promise<void>;
}

const allSeen = new Set<string>();

function harness(input: Partial<ListenerInput> = {}, behaviour: { listenFails?: boolean; answersHang?: boolean } = {}): Harness {
  const calls: string[] = [];
  let finishAnswers = () => {};
  const clock = new SimulatedClock();
  const machine = listenerMachine.provide({
    actors: {
      openListener: fromPromise(async ({ input: address }) => {
        calls.push(`openListener ${address.host}:${address.port}`);
        if (behaviour.listenFails) throw new Error('EADDRINUSE');
      }),
      discardWaiting: fromPromise<void>(async () => {
        calls.push('discardWaiting');
      }),
      closeListener: fromPromise(async () => {
        calls.push('closeListener');
        if (behaviour.answersHang) await new Promise<void>((resolve) => (finishAnswers = resolve));
      }),
      forceClose: fromPromise<void>(async () => {
        calls.push('forceClose');
      }),
      unloadWorkers: fromPromise<void>(async () => {
        calls.push('unloadWorkers');
      }),
    },
  });
  const actor = createActor(machine, {
    clock,
    input: {
      address: { host: '127.0.0.1', port: 8120 },
      portRange: { first: 1024, last: 65535 },
      rememberedRunning: false,
      drainLimitMs: 30_000,
      ...input,
    },
  });
  const replies: ListenerEmitted[] = [];
  const seen = new Set<string>();
  actor.on('endpoint.reply', (event) => void replies.push(event));
  actor.subscribe((snapshot) => {
    const value = JSON.stringify(snapshot.value);
    seen.add(value);
    allSeen.add(value);
  });
  actor.start();
  return { actor, calls, replies, clock, seen, finishAnswers: () => finishAnswers(), settle: () => new Promise((r) => setTimeout(r, 5)) };
}

const state = (h: Harness) => h.actor.getSnapshot().value;
const context = (h: Harness) => h.actor.getSnapshot().context;

interface Row {
  row: string;
  from: 'stopped' | 'running';
  remembered?: boolean;
  input?: Partial<ListenerInput>;
  run: (h: Harness, t: TapTest) => Promise<void>;
}


async function reachRunning(h: Harness): Promise<void> {
  h.actor.send({ type: 'endpoint.start', requestId: 'setup' });
  await h.settle();
}

const rows: Row[] = [
  {
    row: 'stopped | POST /api/v1/endpoint/start | admin session | running | start is remembered across restarts',
    from: 'stopped',
    run: async (h, t) => {
      t.notOk(context(h).remembered.running, 'not remembered as running before');
      h.actor.send({ type: 'endpoint.start', requestId: 'r1' });
      t.equal(state(h), 'starting', 'binding the port first');
      t.notOk(h.actor.getSnapshot().hasTag(TAGS.accepting), 'no request accepted before the port is bound');
      await h.settle();
      t.equal(state(h), 'running');
      t.ok(h.actor.getSnapshot().hasTag(TAGS.accepting), 'accepts requests');
      t.ok(context(h).remembered.running, 'start is remembered');
      t.same(h.calls, ['openListener 127.0.0.1:8120']);
      t.same(h.replies, [{ type: 'endpoint.reply', requestId: 'r1', outcome: { ok: true } }]);
    },
  },
  {
    row: 'running | POST /api/v1/endpoint/stop | admin session | stopped | no new requests; waiting discarded; running answers finish; then workers unloaded',
    from: 'running',
    run: async (h, t) => {
      h.calls.length = 0;
      h.actor.send({ type: 'endpoint.stop', requestId: 's1' });
      t.notOk(h.actor.getSnapshot().hasTag(TAGS.accepting), 'no new requests accepted from the stop on');
      t.notOk(context(h).remembered.running, 'the stop is remembered at once');
      t.ok(h.actor.getSnapshot().matches('stopping'));
      t.same(h.calls, ['discardWaiting'], 'waiting requests are discarded first');
      await h.settle();
      t.same(h.calls, ['discardWaiting', 'closeListener', 'unloadWorkers'], 'answers finish, then workers are unloaded');
      t.equal(state(h), 'stopped');
      t.same(h.replies.filter((r) => r.requestId === 's1'), [{ type: 'endpoint.reply', requestId: 's1', outcome: { ok: true } }]);
    },
  },
  {
    row: 'stopped | POST /api/v1/endpoint/config with port | only while stopped | stopped | port saved',
    from: 'stopped',
    run: async (h, t) => {
      h.actor.send({ type: 'endpoint.config', requestId: 'c1', port: 8123 });
      t.equal(state(h), 'stopped');
      t.equal(context(h).address.port, 8123);
      t.equal(context(h).remembered.port, 8123, 'port saved');
      t.same(h.replies, [{ type: 'endpoint.reply', requestId: 'c1', outcome: { ok: true } }]);
      h.actor.send({ type: 'endpoint.start' });
      await h.settle();
      t.same(h.calls, ['openListener 127.0.0.1:8123'], 'the next start uses the saved port');
    },
  },
  {
    row: 'running | POST /api/v1/endpoint/config with port | only while stopped (not met) | running | refused, port unchanged',
    from: 'running',
    run: async (h, t) => {
      h.actor.send({ type: 'endpoint.config', requestId: 'c2', port: 9000 });
      t.equal(state(h), 'running');
      t.equal(context(h).address.port, 8120);
      t.equal(context(h).remembered.port, 8120);
      const reply = h.replies.find((r) => r.requestId === 'c2');
      t.match(reply?.outcome, { ok: false, code: 'endpoint_running' });
    },
  },
  {
    row: 'stopped | POST /api/v1/endpoint/config with port | port outside the allowed range (container: 8120-8124) | stopped | refused',
    from: 'stopped',
    input: { portRange: { first: 8120, last: 8124 } },
    run: async (h, t) => {
      for (const port of [80, 1023, 8125]) h.actor.send({ type: 'endpoint.config', requestId: `p${port}`, port });
      t.equal(context(h).address.port, 8120);
      t.same(
        h.replies.map((r) => [r.requestId, r.outcome.ok ? 'ok' : r.outcome.code]),
        [
          ['p80', 'port_out_of_range'],
          ['p1023', 'port_out_of_range'],
          ['p8125', 'port_out_of_range'],
        ],
      );
    },
  },
  {
    row: 'running or stopped | regular restart | remembered state is running | running | only the listener starts; no model is loaded',
    from: 'stopped',
    remembered: true,
    run: async (h, t) => {
      t.equal(state(h), 'starting', 'the restart goes straight to starting');
      await h.settle();
      t.equal(state(h), 'running');
      t.same(h.calls, ['openListener 127.0.0.1:8120'], 'only the listener starts: no other actor ran');
    },
  },
  {
    row: 'spec 8 | regular restart | remembered running, saved port outside the range (another --api-ports on update) | stopped | the port is not used; the error says how to fix it',
    from: 'stopped',
    remembered: true,
    input: { portRange: { first: 8130, last: 8134 } },
    run: async (h, t) => {
      await h.settle();
      t.equal(state(h), 'stopped', 'the remembered start does not happen');
      t.same(h.calls, [], 'the saved port 8120 is never bound');
      t.match(context(h).error, {
        code: 'saved_port_out_of_range',
        message: /saved port 8120 is outside the allowed ports 8130-8134.*POST \/api\/v1\/endpoint\/config.*wider --api-ports/,
      });
      t.ok(context(h).remembered.running, 'the remembered flag stays: the operator wanted it running');
      h.actor.send({ type: 'endpoint.start', requestId: 's1' });
      t.equal(state(h), 'stopped', 'an admin start does not use the saved port either');
      t.match(h.replies, [{ requestId: 's1', outcome: { ok: false, code: 'saved_port_out_of_range', message: /8120.*8130-8134/ } }]);
      h.actor.send({ type: 'endpoint.config', requestId: 'c1', host: '0.0.0.0' });
      t.match(context(h).error, { code: 'saved_port_out_of_range' }, 'a new host alone fixes nothing');
      h.actor.send({ type: 'endpoint.config', requestId: 'c2', port: 8131 });
      t.equal(context(h).error, null, 'a port within the range clears the error');
      h.actor.send({ type: 'endpoint.start', requestId: 's2' });
      await h.settle();
      t.equal(state(h), 'running');
      t.same(h.calls, ['openListener 0.0.0.0:8131'], 'the start uses the corrected port');
      t.match(h.replies.at(-1), { requestId: 's2', outcome: { ok: true } });
    },
  },
  {
    row: 'spec 8 | regular restart | remembered stopped, saved port outside the range | stopped | the error is shown before anyone starts',
    from: 'stopped',
    remembered: false,
    input: { portRange: { first: 8130, last: 8134 } },
    run: async (h, t) => {
      await h.settle();
      t.equal(state(h), 'stopped');
      t.match(context(h).error, { code: 'saved_port_out_of_range' });
      t.notOk(context(h).remembered.running);
    },
  },
  {
    row: 'running or stopped | regular restart | remembered state is stopped | stopped | nothing starts',
    from: 'stopped',
    remembered: false,
    run: async (h, t) => {
      await h.settle();
      t.equal(state(h), 'stopped');
      t.same(h.calls, []);
    },
  },
];

for (const row of rows) {
  t.test(row.row, async (t) => {
    const h = harness({ rememberedRunning: row.remembered ?? false, ...row.input });
    if (row.from === 'running' && row.remembered === undefined) await reachRunning(h);
    if (row.from === 'running') t.equal(state(h), 'running', 'precondition: running');
    await row.run(h, t);
    h.actor.stop();
  });
}

t.test('a port that cannot be bound leaves the listener stopped with the reason, not remembered as running', async (t) => {
  const h = harness({}, { listenFails: true });
  h.actor.send({ type: 'endpoint.start', requestId: 'x' });
  await h.settle();
  t.equal(state(h), 'stopped');
  t.match(context(h).error, { code: 'listen_failed', message: /EADDRINUSE/ });
  t.notOk(context(h).remembered.running);
  t.match(h.replies[0]?.outcome, { ok: false, code: 'listen_failed' });
  h.actor.send({ type: 'endpoint.start' });
  t.equal(context(h).error, null, 'a new start clears the old error');
});

t.test('a restart whose port is taken stays stopped but keeps the remembered intent', async (t) => {
  const h = harness({ rememberedRunning: true }, { listenFails: true });
  await h.settle();
  t.equal(state(h), 'stopped');
  t.ok(context(h).remembered.running, 'the operator wanted it running: the next restart tries again');
});

t.test('an admin stop waits for running answers however long they take; nothing is forced (simulated clock)', async (t) => {
  const h = harness({ drainLimitMs: 30_000 }, { answersHang: true });
  await reachRunning(h);
  h.calls.length = 0;
  h.actor.send({ type: 'endpoint.stop', requestId: 's' });
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'unbounded' } }, 'waiting for running answers');
  h.clock.increment(30_000);
  await h.settle();
  h.clock.increment(660_000);
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'unbounded' } }, 'still waiting 11.5 minutes later: an answer ends by its own limits');
  t.same(h.calls, ['discardWaiting', 'closeListener'], 'no connection was closed by force, no worker unloaded under a running answer');
  t.same(h.replies.filter((r) => r.requestId === 's'), [], 'the stop is not answered before it is done');
  h.finishAnswers();
  await h.settle();
  t.same(h.calls, ['discardWaiting', 'closeListener', 'unloadWorkers'], 'once the answers have finished, the workers are unloaded');
  t.equal(state(h), 'stopped');
  t.same(h.replies.filter((r) => r.requestId === 's').length, 1, 'then the stop is answered');
});

t.test('SIGTERM bounds the drain: answers still running after the drain limit are ended (simulated clock)', async (t) => {
  const h = harness({ drainLimitMs: 30_000 }, { answersHang: true });
  await reachRunning(h);
  h.calls.length = 0;
  h.actor.send({ type: 'service.shutdown' });
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'bounded' } }, 'waiting for running answers, bounded');
  h.clock.increment(29_999);
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'bounded' } }, 'still waiting just before the limit');
  h.clock.increment(1);
  await h.settle();
  t.same(h.calls, ['discardWaiting', 'closeListener', 'forceClose', 'unloadWorkers']);
  t.equal(state(h), 'off');
  t.ok(context(h).remembered.running, 'SIGTERM does not forget that the endpoint was running');
  h.finishAnswers();
});

t.test('SIGTERM during an admin stop bounds the drain from then on (simulated clock)', async (t) => {
  const h = harness({ drainLimitMs: 30_000 }, { answersHang: true });
  await reachRunning(h);
  h.calls.length = 0;
  h.actor.send({ type: 'endpoint.stop' });
  await h.settle();
  h.clock.increment(120_000);
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'unbounded' } });
  h.actor.send({ type: 'service.shutdown' });
  await h.settle();
  t.same(h.actor.getSnapshot().value, { stopping: { draining: 'bounded' } });
  h.clock.increment(29_999);
  await h.settle();
  t.notOk(h.calls.includes('forceClose'), 'the limit counts from the signal, not from the admin stop');
  h.clock.increment(1);
  await h.settle();
  t.same(h.calls, ['discardWaiting', 'closeListener', 'forceClose', 'unloadWorkers']);
  t.equal(state(h), 'off');
  t.notOk(context(h).remembered.running, 'the admin stop stays remembered');
  h.finishAnswers();
});

t.test('answers finishing before the drain limit need no force', async (t) => {
  const h = harness({ drainLimitMs: 30_000 }, { answersHang: true });
  await reachRunning(h);
  h.actor.send({ type: 'endpoint.stop' });
  await h.settle();
  h.clock.increment(10_000);
  h.finishAnswers();
  await h.settle();
  t.equal(state(h), 'stopped');
  t.notOk(h.calls.includes('forceClose'));
});

t.test('a stop during the start completes the start, then stops; both requests are answered', async (t) => {
  const h = harness();
  h.actor.send({ type: 'endpoint.start', requestId: 'a' });
  h.actor.send({ type: 'endpoint.stop', requestId: 'b' });
  h.actor.send({ type: 'endpoint.config', requestId: 'c', port: 9999 });
  await h.settle();
  t.equal(state(h), 'stopped');
  t.notOk(context(h).remembered.running);
  t.same(h.calls, ['openListener 127.0.0.1:8120', 'discardWaiting', 'closeListener', 'unloadWorkers']);
  t.same(
    h.replies.map((r) => [r.requestId, r.outcome.ok ? 'ok' : r.outcome.code]),
    [
      ['c', 'endpoint_running'],
      ['a', 'ok'],
      ['b', 'ok'],
    ],
  );
});

t.test('a start during the stop is refused with endpoint_stopping', async (t) => {
  const h = harness({}, { answersHang: true });
  await reachRunning(h);
  h.actor.send({ type: 'endpoint.stop' });
  await h.settle();
  h.actor.send({ type: 'endpoint.start', requestId: 'late' });
  t.match(h.replies.find((r) => r.requestId === 'late')?.outcome, { ok: false, code: 'endpoint_stopping' });
  h.finishAnswers();
  await h.settle();
  t.equal(state(h), 'stopped');
});

t.test('SIGTERM stops like an admin stop but remembers running, so a regular restart brings the listener back', async (t) => {
  const h = harness();
  await reachRunning(h);
  h.calls.length = 0;
  h.actor.send({ type: 'service.shutdown' });
  await h.settle();
  t.equal(state(h), 'off');
  t.equal(h.actor.getSnapshot().status, 'done');
  t.ok(context(h).remembered.running);
  t.same(h.calls, ['discardWaiting', 'closeListener', 'unloadWorkers']);
  const restarted = harness({ rememberedRunning: context(h).remembered.running });
  await restarted.settle();
  t.equal(state(restarted), 'running');
});

t.test('SIGTERM while stopped ends at once', async (t) => {
  const h = harness();
  h.actor.send({ type: 'service.shutdown' });
  t.equal(state(h), 'off');
  t.same(h.calls, []);
});

t.test('every state of the chart was reached by the rows above', async (t) => {
  const leaves: string[] = [];
  const walk = (node: AnyStateNode, path: string[]) => {
    // A final child state is left in the same step that enters it (the parent's onDone): not observable.
    if (node.type === 'final' && path.length > 1) return;
    const children = Object.values(node.states) as AnyStateNode[];
    if (children.length === 0 || node.type === 'final') {
      // The state value XState reports for this leaf: "a", {"a":"b"}, {"a":{"b":"c"}}.
      leaves.push(JSON.stringify(path.slice(0, -1).reduceRight<unknown>((value, key) => ({ [key]: value }), path.at(-1))));
      return;
    }
    for (const child of children) walk(child, [...path, child.key]);
  };
  for (const top of Object.values(listenerMachine.root.states) as AnyStateNode[]) walk(top, [top.key]);
  const missing = leaves.filter((leaf) => !allSeen.has(leaf) && leaf !== '"restoring"');
  t.same(missing, [], `seen: ${[...allSeen].join(', ')}`);
});

t.test('a stop sent during a start that fails is answered, and does not stop the next start', async (t) => {
  const h = harness({}, { listenFails: true });
  h.actor.send({ type: 'endpoint.start', requestId: 'a' });
  h.actor.send({ type: 'endpoint.stop', requestId: 'b' });
  await h.settle();
  t.equal(state(h), 'stopped');
  t.same(
    h.replies.map((r) => [r.requestId, r.outcome.ok ? 'ok' : r.outcome.code]),
    [
      ['a', 'listen_failed'],
      ['b', 'ok'],
    ],
  );
  t.notOk(context(h).stopAfterStart, 'no stop is left behind');
});

t.test('SIGTERM during a start that fails ends the service at once', async (t) => {
  const h = harness({ rememberedRunning: true }, { listenFails: true });
  h.actor.send({ type: 'service.shutdown' });
  await h.settle();
  t.equal(state(h), 'off');
  t.ok(context(h).remembered.running, 'the remembered intent survives');
});

t.test('SIGTERM during the restart\'s own start stops without forgetting that the endpoint runs', async (t) => {
  const h = harness({ rememberedRunning: true });
  h.actor.send({ type: 'service.shutdown' });
  await h.settle();
  t.equal(state(h), 'off');
  t.ok(context(h).remembered.running);
  t.same(h.calls, ['openListener 127.0.0.1:8120', 'discardWaiting', 'closeListener', 'unloadWorkers'], 'the bound port is closed again');
});
