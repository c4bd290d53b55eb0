// The state-chart view's layout (console/src/charts/layout.ts) on the machines the service runs,
// walked into MachineView by the server's own describeMachine (src/system/observe/charts.ts): one box per state node, children inside their parent,
// siblings apart, an edge for every transition between siblings, and labels for the rest; then a
// tiny hand-written machine whose edges and labels are known line by line.
import t from 'tap';
import { setup, type AnyStateMachine, type AnyStateNode } from 'xstate';
import { audioPolicyMachine } from '../../machines/audioPolicy/index.js';
import { chatWorkerMachine } from '../../machines/chatWorker/index.js';
import { imageWorkerMachine } from '../../machines/imageWorker/index.js';
import { listenerMachine } from '../../machines/listener/index.js';
import { queueMachine } from '../../machines/queue/index.js';
import { sttWorkerMachine } from '../../machines/sttWorker/index.js';
import { supervisorMachine } from '../../machines/supervisor/index.js';
import { ttsWorkerMachine } from '../../machines/ttsWorker/index.js';
import { eventMatches, layoutMachine, type ChartBox, type ChartLayout } from '../../console/src/charts/layout.js';
import type { MachineView, StateNodeView } from '../../src/system/observe/console.types.js';
import { describeMachine } from '../../src/system/observe/charts.js';

const MACHINES: AnyStateMachine[] = [
  listenerMachine,
  supervisorMachine,
  queueMachine,
  chatWorkerMachine,
  imageWorkerMachine,
  ttsWorkerMachine,
  sttWorkerMachine,
  audioPolicyMachine,
];

function stateNodes(node: AnyStateNode): AnyStateNode[] {
  return [node, ...Object.values(node.states).flatMap((child) => stateNodes(child as AnyStateNode))];
}

/** The child of `ancestor` that `node` is, or lies inside; undefined when it is not below it. */
function childOf(ancestor: AnyStateNode, node: AnyStateNode): AnyStateNode | undefined {
  for (let current: AnyStateNode | undefined = node; current; current = current.parent) {
    if (current.parent === ancestor) return current;
  }
  return undefined;
}

const EPS = 0.5;
type Rect = { x: number; y: number; width: number; height: number };
const inside = (inner: Rect, outer: ChartBox) =>
  inner.x >= outer.x - EPS &&
  inner.y >= outer.y + outer.titleHeight - EPS &&
  inner.x + inner.width <= outer.x + outer.width + EPS &&
  inner.y + inner.height <= outer.y + outer.height + EPS;
const overlap = (a: Rect, b: Rect) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;

for (const machine of MACHINES) {
  t.test(`the ${machine.id} machine`, async (t) => {
    const chart: ChartLayout = layoutMachine(describeMachine(machine));
    const boxes = new Map(chart.boxes.map((b) => [b.id, b]));
    const nodes = stateNodes(machine.root);

    t.equal(chart.boxes.length, nodes.length, 'as many boxes as state nodes');
    t.same(
      [...boxes.keys()].sort(),
      nodes.map((n) => n.id).sort(),
      'every state node has exactly one box',
    );
    t.ok(nodes.length > 1, 'a machine with states');

    for (const node of nodes) {
      const box = boxes.get(node.id)!;
      t.ok(box.width > 0 && box.height > 0, `${node.id} has a size`);
      t.equal(box.type, node.type, `${node.id} keeps its type`);
      t.equal(box.initial, node.parent?.type === 'compound' && node.parent.initial.target[0] === node, `${node.id} is marked initial exactly when it is`);
      const children = (Object.values(node.states) as AnyStateNode[]).map((child) => boxes.get(child.id)!);
      for (const label of box.labels) {
        t.ok(inside(label, box), `${node.id}: "${label.text}" inside its box`);
        t.notOk(children.some((child) => overlap(label, child)), `${node.id}: "${label.text}" clear of its children`);
      }
      if (!node.parent) {
        t.ok(box.x >= 0 && box.y >= 0 && box.x + box.width <= chart.width && box.y + box.height <= chart.height, 'the root fits the chart');
        continue;
      }
      t.ok(inside(box, boxes.get(node.parent.id)!), `${node.id} lies inside ${node.parent.id}`);
      const siblings = Object.values(node.parent.states) as AnyStateNode[];
      for (const other of siblings) {
        if (other !== node && other.order > node.order) t.notOk(overlap(box, boxes.get(other.id)!), `${node.id} and ${other.id} do not overlap`);
      }
    }

    // Every transition between siblings (or into something inside a sibling) has its edge.
    let siblingTransitions = 0;
    for (const node of nodes) {
      const parent = node.parent;
      const transitions = [...[...node.transitions.values()].flat(), ...(node.always ?? [])];
      for (const transition of transitions) {
        for (const target of transition.target ?? []) {
          const sibling = parent && parent.type !== 'parallel' ? childOf(parent, target) : undefined;
          if (!sibling || sibling === node) continue;
          siblingTransitions++;
          const edge = chart.edges.find((e) => e.kind === 'transition' && e.from === node.id && e.to === sibling.id);
          t.ok(edge?.transitions.some((x) => x.target === target.id), `${node.id} → ${target.id} is an edge to ${sibling.id}`);
        }
      }
    }
    t.ok(siblingTransitions > 0, 'the machine has transitions between siblings');

    for (const edge of chart.edges) {
      t.ok(edge.points.length >= 2, `${edge.id} has a path`);
      const container = boxes.get(edge.kind === 'initial' ? edge.from : boxes.get(edge.from)!.parent!)!;
      t.ok(
        edge.points.every((p) => p.x >= container.x - EPS && p.x <= container.x + container.width + EPS && p.y >= container.y - EPS && p.y <= container.y + container.height + EPS),
        `${edge.id} stays inside ${container.id}`,
      );
    }
    // One initial dot and edge per compound node.
    const compounds = nodes.filter((n) => n.type === 'compound');
    t.equal(chart.dots.length, compounds.length, 'an initial dot per compound node');
    t.equal(chart.edges.filter((e) => e.kind === 'initial').length, compounds.length, 'an initial edge per compound node');
  });
}

t.test('the listener: cross-level transitions are labels in their source box', async (t) => {
  const chart = layoutMachine(describeMachine(listenerMachine));
  const box = (id: string) => chart.boxes.find((b) => b.id === id)!;
  t.same(
    box('listener.stopping.draining.bounded').labels.map((l) => [l.kind, l.text]),
    [['out', 'after drainLimit → stopping.forcing']],
    'the drain limit leaves its parent: a label naming its target',
  );
  t.notOk(chart.edges.some((e) => e.from === 'listener.stopping.draining.bounded' && e.kind === 'transition'), 'and no edge');
  t.same(
    box('listener.stopped').labels.map((l) => [l.kind, l.text]),
    [
      ['internal', 'endpoint.start [savedPortOutsideRange]'],
      ['internal', 'endpoint.config [portInAllowedRange]'],
      ['internal', 'endpoint.config'],
      ['internal', 'endpoint.stop'],
    ],
    'transitions without target are listed in their box',
  );
  const toStopping = chart.edges.find((e) => e.from === 'listener.starting' && e.to === 'listener.stopping')!;
  t.same(toStopping.lines, ['done [stopRequestedWhileStarting]', 'done [shuttingDown]'], 'two guarded transitions share one edge, a line each');
  t.equal(box('listener.stopping.draining').depth, 2);
  t.equal(box('listener.stopping.draining.bounded').depth, 3);
});

t.test('parallel regions side by side while the row fits, tops aligned, in definition order', async (t) => {
  const machine = setup({}).createMachine({ id: 'pair', type: 'parallel', states: { left: { initial: 'a', states: { a: {} } }, right: { initial: 'b', states: { b: {} } } } });
  const chart = layoutMachine(describeMachine(machine));
  const box = (id: string) => chart.boxes.find((b) => b.id === id)!;
  const [left, right] = [box('pair.left'), box('pair.right')];
  t.equal(left.y, right.y, 'regions share a top');
  t.ok(left.x + left.width <= right.x, 'side by side, in definition order');
  t.notOk(left.initial || right.initial, 'regions are not initial states');
});

t.test('the supervisor: its three regions stacked (too wide for a row), an invoke result to a sibling of the parallel node', async (t) => {
  const chart = layoutMachine(describeMachine(supervisorMachine));
  const box = (id: string) => chart.boxes.find((b) => b.id === id)!;
  const regions = ['checks', 'gpuMode', 'gpuWatch'].map((key) => box(`supervisor.active.${key}`));
  t.equal(box('supervisor.active').type, 'parallel');
  t.ok(regions.every((r, i) => i === 0 || regions[i - 1]!.y + regions[i - 1]!.height <= r.y), 'one below the other, in definition order');
  t.notOk(regions.some((r) => r.initial), 'regions are not initial states');
  t.ok(box('supervisor.active.gpuMode.llm').initial, 'the GPU mode starts in the LLM GPU mode');
  t.same(chart.edges.find((e) => e.from === 'supervisor.active' && e.to === 'supervisor.closing')?.lines, ['done'], 'the listener ending moves to closing');
  t.ok(box('supervisor.active').labels.some((l) => l.text === 'gpu.reserve' && l.kind === 'internal'), 'the root actor’s own events are listed');
});

const node = (id: string, states: StateNodeView[] = [], transitions: StateNodeView['transitions'] = [], initial: string | null = null): StateNodeView => ({
  id,
  key: id.split('.').pop()!,
  type: states.length === 0 ? 'atomic' : 'compound',
  initial,
  tags: [],
  states,
  transitions,
});
const go = (event: string, targets: string[], guard: string | null = null) => ({ event, targets, guard, reenter: false });

t.test('a tiny machine: its edges and labels', async (t) => {
  const machine: MachineView = {
    id: 'tiny',
    root: node(
      'tiny',
      [
        node('tiny.idle', [], [go('go', ['tiny.busy.one']), go('poke', ['tiny.idle']), go('note', [])]),
        node('tiny.busy', [node('tiny.busy.one', [], [go('next', ['tiny.busy.two']), go('abort', ['tiny.idle'], 'allowed')]), node('tiny.busy.two', [], [go('always', ['tiny.busy.one'], 'again')])], [go('after 500ms', ['tiny.idle'])], 'one'),
      ],
      [go('reset', ['tiny.idle'])],
      'idle',
    ),
  };
  const chart = layoutMachine(machine);
  t.same(
    chart.edges.map((e) => [e.kind, e.from, e.to, e.label]).sort(),
    [
      ['initial', 'tiny', 'tiny.idle', ''],
      ['initial', 'tiny.busy', 'tiny.busy.one', ''],
      ['transition', 'tiny.busy', 'tiny.idle', 'after 500ms'],
      ['transition', 'tiny.busy.one', 'tiny.busy.two', 'next'],
      ['transition', 'tiny.busy.two', 'tiny.busy.one', 'always [again]'],
      ['transition', 'tiny.idle', 'tiny.busy', 'go → busy.one'],
    ].sort(),
    'one edge per pair of siblings; a target inside a sibling goes to the sibling and says where',
  );
  const labels = Object.fromEntries(chart.boxes.map((b) => [b.id, b.labels.map((l) => `${l.kind}: ${l.text}`)]));
  t.same(labels, {
    tiny: ['out: reset → idle'],
    'tiny.idle': ['self: poke ↻', 'internal: note'],
    'tiny.busy': [],
    'tiny.busy.one': ['out: abort [allowed] → idle'],
    'tiny.busy.two': [],
  });
  t.same(
    chart.boxes.map((b) => [b.id, b.depth, b.initial, b.parent]),
    [
      ['tiny', 0, false, null],
      ['tiny.idle', 1, true, 'tiny'],
      ['tiny.busy', 1, false, 'tiny'],
      ['tiny.busy.one', 2, true, 'tiny.busy'],
      ['tiny.busy.two', 2, false, 'tiny.busy'],
    ],
  );
  const idle = chart.boxes[1]!;
  const busy = chart.boxes[2]!;
  t.ok(idle.y + idle.height <= busy.y, 'the graph runs top to bottom: the initial state above the one it leads to');
});

t.test('which received event a transition names', async (t) => {
  t.ok(eventMatches('endpoint.stop', 'endpoint.stop'));
  t.notOk(eventMatches('endpoint.stop', 'endpoint.start'));
  t.ok(eventMatches('done', 'xstate.done.actor.0.listener.starting'));
  t.ok(eventMatches('done', 'xstate.done.state.listener.stopping'));
  t.notOk(eventMatches('done', 'xstate.error.actor.0.listener.starting'));
  t.ok(eventMatches('error', 'xstate.error.actor.0.listener.starting'));
  t.ok(eventMatches('after drainLimit', 'xstate.after.drainLimit.listener.stopping.draining.bounded'));
  t.ok(eventMatches('after 500ms', 'xstate.after.500.tiny.busy'));
  t.notOk(eventMatches('after drainLimit', 'xstate.after.closingLimit.supervisor.closing'));
  t.notOk(eventMatches('always', 'endpoint.stop'), 'an eventless transition is never the event');
});
