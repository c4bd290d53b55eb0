// The console's state-chart data: a machine definition walked into plain nodes and transitions
// (checked on the listener machine, spec 3.1), and the chart feed's actor views, which keep the
// type and sender of the last events and never a payload.
import t from 'tap';
import { createActor, fromPromise, sendTo, setup } from 'xstate';
import { listenerMachine } from '../../../machines/listener/index.js';
import { expiryTimer } from '../../../machines/queue/index.js';
import { ACTOR_EVENT_LIMIT, ChartFeed, describeMachine, eventLabel } from '../../../src/system/observe/charts.js';
import type { ActorView, StateNodeView } from '../../../src/system/observe/console.types.js';

const find = (node: StateNodeView, id: string): StateNodeView | undefined =>
  node.id === id ? node : node.states.map((child) => find(child, id)).find((n) => n !== undefined);

t.test('describeMachine walks the listener machine', async (t) => {
  const view = describeMachine(listenerMachine);
  t.equal(view.id, 'listener');
  t.equal(view.root.key, 'listener');
  t.equal(view.root.type, 'compound');
  t.equal(view.root.initial, 'restoring');
  t.same(
    view.root.states.map((s) => s.key),
    ['restoring', 'stopped', 'starting', 'running', 'stopping', 'off'],
    'children in definition order',
  );
  const restoring = find(view.root, 'listener.restoring');
  t.same(restoring?.transitions, [
    { event: 'always', targets: ['listener.stopped'], guard: 'savedPortOutsideRange', reenter: false },
    { event: 'always', targets: ['listener.starting'], guard: 'rememberedRunning', reenter: false },
    { event: 'always', targets: ['listener.stopped'], guard: null, reenter: false },
  ]);
  t.same(find(view.root, 'listener.running')?.tags, ['accepting']);
  t.same(find(view.root, 'listener.stopped')?.transitions.slice(0, 2), [
    { event: 'endpoint.start', targets: [], guard: 'savedPortOutsideRange', reenter: false },
    { event: 'endpoint.start', targets: ['listener.starting'], guard: null, reenter: false },
  ]);
  const configs = find(view.root, 'listener.stopped')?.transitions.filter((tr) => tr.event === 'endpoint.config');
  t.same(configs?.[0], { event: 'endpoint.config', targets: [], guard: 'portInAllowedRange', reenter: false }, 'a transition that stays has no target');
  const starting = find(view.root, 'listener.starting');
  t.same(
    starting?.transitions.filter((tr) => tr.event === 'done').map((tr) => [tr.targets, tr.guard]),
    [
      [['listener.stopping'], 'stopRequestedWhileStarting'],
      [['listener.stopping'], 'shuttingDown'],
      [['listener.running'], null],
    ],
    'invoke onDone rows are `done`',
  );
  t.ok(starting?.transitions.some((tr) => tr.event === 'error' && tr.targets[0] === 'listener.stopped'), 'invoke onError rows are `error`');
  const stopping = find(view.root, 'listener.stopping');
  t.equal(stopping?.initial, 'discarding');
  t.same(stopping?.transitions.find((tr) => tr.event === 'done')?.targets, ['listener.off'], 'a compound state onDone is `done`');
  t.same(find(view.root, 'listener.stopping.draining.bounded')?.transitions, [
    { event: 'after drainLimit', targets: ['listener.stopping.forcing'], guard: null, reenter: false },
  ]);
  t.equal(find(view.root, 'listener.off')?.type, 'final');
  t.equal(find(view.root, 'listener.off')?.initial, null);
  t.same(JSON.parse(JSON.stringify(view)), view, 'plain data');
});

t.test('event labels', async (t) => {
  t.equal(eventLabel('xstate.after.30000.timer.waiting'), 'after 30000ms');
  t.equal(eventLabel('xstate.after.queueWaitLimit.expiryTimer.counting'), 'after queueWaitLimit');
  t.equal(eventLabel('xstate.done.actor.0.listener.starting'), 'done');
  t.equal(eventLabel('xstate.error.actor.x'), 'error');
  t.equal(eventLabel('job.submit'), 'job.submit');
  const timer = setup({}).createMachine({ id: 'timer', initial: 'waiting', states: { waiting: { after: { 30000: { target: 'gone', reenter: true } } }, gone: {} } });
  t.same(describeMachine(timer).root.states[0]?.transitions, [{ event: 'after 30000ms', targets: ['timer.gone'], guard: null, reenter: true }]);
});

const SECRET = 'PROMPT-never-shown-4421';

const child = setup({}).createMachine({ id: 'child', initial: 'idle', states: { idle: { on: { 'child.end': 'over' } }, over: { type: 'final' } } });
const parent = setup({
  actors: { child, work: fromPromise(async () => 'ok') },
}).createMachine({
  id: 'parent',
  initial: 'idle',
  states: {
    idle: {
      on: {
        'job.submit': { target: 'busy' },
        'job.note': {},
      },
    },
    busy: {
      initial: 'working',
      invoke: { src: 'child', id: 'kid' },
      states: { working: { invoke: { src: 'work', onDone: 'resting' } }, resting: {} },
      on: { 'job.finish': { actions: sendTo('kid', { type: 'child.end' }) } },
    },
  },
});

t.test('the chart feed keeps one view per machine actor, without payloads', async (t) => {
  const feed = new ChartFeed([listenerMachine, expiryTimer]);
  const seen: ActorView[] = [];
  feed.on('actor', (view) => seen.push(view));
  const actor = createActor(parent, { systemId: 'boss', inspect: feed.observe }).start();
  actor.send({ type: 'job.submit', prompt: SECRET, messages: [{ role: 'user', content: SECRET }] } as never);
  await new Promise((resolve) => setTimeout(resolve, 10));

  t.same(Object.keys(feed.machines()).sort(), ['child', 'expiryTimer', 'listener', 'parent'], 'given definitions and those seen');
  const views = feed.actors();
  t.same(views.map((v) => v.machine).sort(), ['child', 'parent'], 'the promise actor is left out');
  const boss = views.find((v) => v.id === 'boss');
  t.equal(boss?.machine, 'parent');
  t.equal(boss?.status, 'active');
  t.same(boss?.value, { busy: 'resting' });
  t.same(boss?.active, ['parent', 'parent.busy', 'parent.busy.resting'], 'every active node, ancestors included');
  t.same(
    boss?.events.map((e) => e.type),
    ['xstate.init', 'job.submit', 'xstate.done.actor.0.parent.busy.working'],
  );
  t.same(Object.keys(boss?.events[1] ?? {}).sort(), ['at', 'source', 'type'], 'an event is its type, its sender and when');
  t.equal(boss?.events[1]?.source, null, 'sent from outside: no sender');
  t.equal(boss?.events[2]?.source, '0.parent.busy.working', 'the invoked promise sent its result');
  t.notOk(JSON.stringify(views).includes(SECRET), 'no payload in the views');
  t.notOk(JSON.stringify(seen).includes(SECRET), 'nor in what it emitted');
  t.ok(seen.some((v) => v.id === 'boss' && v.value !== null && (v.value as Record<string, unknown>).busy === 'working'), 'it emitted each change');

  for (let i = 0; i < ACTOR_EVENT_LIMIT + 5; i += 1) actor.send({ type: 'job.note', n: i } as never);
  const after = feed.actors().find((v) => v.id === 'boss');
  t.equal(after?.events.length, ACTOR_EVENT_LIMIT, `at most ${ACTOR_EVENT_LIMIT} events`);
  t.equal(after?.events.at(-1)?.type, 'job.note', 'oldest first');

  const kid = feed.actors().find((v) => v.machine === 'child');
  t.equal(kid?.id, 'kid', 'an actor without systemId goes by its id');
  actor.send({ type: 'job.finish' });
  t.equal(seen.filter((v) => v.id === 'kid').at(-1)?.status, 'done', 'its end is emitted');
  t.equal(seen.filter((v) => v.id === 'kid').at(-1)?.gone, true, 'marked gone, so that a page forgets it too');
  t.notOk(seen.some((v) => v.id === 'boss' && v.gone), 'an actor with a systemId is never gone');
  t.same(feed.actors().map((v) => v.id), ['boss'], 'then an ended actor without systemId is forgotten');
  actor.stop();
  t.equal(feed.actors()[0]?.status, 'stopped', 'an actor with a systemId stays, stopped');
});
