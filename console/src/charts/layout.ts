// Lays out one machine definition (MachineView, as the service walks it) for the state-chart view.
// Pure: no DOM, so node runs it in the tests. Nested, bottom-up: every compound node lays out its
// children as one dagre graph with an edge per pair of siblings a transition joins; its box is that
// graph plus a title, its own labels and a padding. Graphs run top to bottom: left to right, the
// listener alone is 2,700 px wide with its edge labels, too wide for a console; top to bottom 820.
// Parallel regions sit side by side (stacked when that gets too wide), dashed.
//
// What is not an edge between siblings is a label inside the source box:
// - a target outside the source's parent: `event [guard] → path.of.target`;
// - a target inside the source itself (a parent entering one of its own children): the same;
// - a self transition: `event [guard] ↻`; a transition without target (actions only): `event [guard]`.
// A target that is a descendant of a sibling draws its edge to that sibling, and the line says
// which child it enters (`event → sibling.child`).
import { Graph, layout } from '@dagrejs/dagre';
import type { MachineView, StateNodeView } from '../../../src/system/observe/console.types.js';

export interface Point {
  x: number;
  y: number;
}

export type StateType = StateNodeView['type'];

/** One line of text inside a box, absolute top-left corner and size. */
export interface BoxLabel {
  /** The line as drawn (cut at METRICS.maxLabelChars). */
  text: string;
  /** The whole line, for its tooltip. */
  full: string;
  /** What the line shows: a target outside the parent (or inside the box), itself, or none. */
  kind: 'out' | 'self' | 'internal';
  event: string;
  guard: string | null;
  /** Full ids of the targets (empty for `internal`). */
  targets: string[];
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface ChartBox {
  /** The state node's full id. */
  id: string;
  key: string;
  /** The parent's id; null for the machine's root. */
  parent: string | null;
  x: number;
  y: number;
  width: number;
  height: number;
  type: StateType;
  /** The initial child of its parent. */
  initial: boolean;
  /** 0 for the root, 1 for its children, … */
  depth: number;
  /** Height of the title strip at the top of the box. */
  titleHeight: number;
  labels: BoxLabel[];
}

/** One transition an edge stands for. */
export interface EdgeTransition {
  event: string;
  guard: string | null;
  /** The real target (may be a descendant of the edge's `to`). */
  target: string;
}

export interface ChartEdge {
  id: string;
  kind: 'transition' | 'initial';
  /** Full id of the source box (for `initial`: the compound parent, drawn as a dot). */
  from: string;
  to: string;
  /** The lines of the label (one per transition, `event [guard]`), joined with a newline. */
  label: string;
  lines: string[];
  transitions: EdgeTransition[];
  points: Point[];
  /** Centre of the label. */
  labelAt: Point;
  labelWidth: number;
  labelHeight: number;
}

/** The initial pseudo-state of a compound node: a dot with an edge to the initial child. */
export interface InitialDot {
  parent: string;
  x: number;
  y: number;
  r: number;
}

export interface ChartLayout {
  width: number;
  height: number;
  boxes: ChartBox[];
  edges: ChartEdge[];
  dots: InitialDot[];
}

export interface LayoutOptions {
  /** Direction of each compound node's graph (default TB: it fits a console's width). */
  rankdir?: 'LR' | 'TB';
}

// Text is measured without a DOM: the chart draws it in a monospace font, so a character's width
// is a fixed fraction of the font size (0.6 em, a little more for bold).
export const METRICS = {
  titleFont: 12,
  labelFont: 10.5,
  titleChar: 12 * 0.64,
  labelChar: 10.5 * 0.62,
  lineHeight: 14,
  titleHeight: 24,
  padding: 10,
  minWidth: 72,
  /** Longer label lines are cut (the full text is the line's tooltip). */
  maxLabelChars: 46,
  dotRadius: 5,
  margin: 8,
  /** Parallel regions side by side up to this width, stacked beyond. */
  parallelRowMax: 900,
  regionGap: 14,
} as const;

const INITIAL_NODE = '\u0000initial';

/** A label before it is placed: its whole text, not yet cut. */
type LocalLabel = Pick<BoxLabel, 'text' | 'kind' | 'event' | 'guard' | 'targets'>;

/** An edge in its compound node's coordinates; `id` and `label` are added when it is placed. */
type LocalEdge = Omit<ChartEdge, 'id' | 'label'>;

/** A node laid out in its own coordinates (origin at its box's top-left corner). */
interface Local {
  node: StateNodeView;
  width: number;
  height: number;
  labels: LocalLabel[];
  /** Its transitions to siblings, drawn as edges by the parent's graph. */
  outgoing: { to: StateNodeView; transition: EdgeTransition }[];
  children: { local: Local; x: number; y: number }[];
  edges: LocalEdge[];
  dot: Point | null;
}

interface Index {
  byId: Map<string, StateNodeView>;
  parentOf: Map<string, StateNodeView | null>;
  /** Key path below the root: `stopping.forcing`. */
  pathOf: Map<string, string>;
}

function indexMachine(root: StateNodeView): Index {
  const byId = new Map<string, StateNodeView>();
  const parentOf = new Map<string, StateNodeView | null>();
  const pathOf = new Map<string, string>();
  const walk = (node: StateNodeView, parent: StateNodeView | null, path: string) => {
    byId.set(node.id, node);
    parentOf.set(node.id, parent);
    pathOf.set(node.id, path || node.key);
    for (const child of node.states) walk(child, node, path ? `${path}.${child.key}` : child.key);
  };
  walk(root, null, '');
  return { byId, parentOf, pathOf };
}

/** The child of `ancestor` on the way down to `id`, or null when `id` is not strictly below it. */
function childTowards(index: Index, ancestor: StateNodeView, id: string): StateNodeView | null {
  let current = index.byId.get(id);
  while (current) {
    const parent = index.parentOf.get(current.id) ?? null;
    if (parent === null) return null;
    if (parent.id === ancestor.id) return current;
    current = parent;
  }
  return null;
}

const clip = (text: string): string => (text.length > METRICS.maxLabelChars ? `${text.slice(0, METRICS.maxLabelChars - 1)}…` : text);
const labelWidth = (text: string): number => Math.ceil(clip(text).length * METRICS.labelChar);
const titleWidth = (text: string): number => Math.ceil(text.length * METRICS.titleChar);

/** `event [guard]`, the text every label and edge line starts with. */
export function transitionText(event: string, guard: string | null): string {
  return guard ? `${event} [${guard}]` : event;
}

/** Sorts a node's own transitions into sibling edges (returned) and labels (pushed on `labels`). */
function classify(index: Index, node: StateNodeView, labels: LocalLabel[]): { to: StateNodeView; transition: EdgeTransition }[] {
  const parent = index.parentOf.get(node.id) ?? null;
  const edges: { to: StateNodeView; transition: EdgeTransition }[] = [];
  for (const t of node.transitions) {
    const base = transitionText(t.event, t.guard);
    if (t.targets.length === 0) {
      labels.push({ text: base, kind: 'internal', event: t.event, guard: t.guard, targets: [] });
      continue;
    }
    for (const target of t.targets) {
      if (target === node.id) {
        labels.push({ text: `${base} ↻`, kind: 'self', event: t.event, guard: t.guard, targets: [target] });
        continue;
      }
      // A sibling (or something inside one) of a node whose parent is not parallel: an edge.
      const sibling = parent && parent.type !== 'parallel' ? childTowards(index, parent, target) : null;
      if (sibling && sibling.id !== node.id) {
        edges.push({ to: sibling, transition: { event: t.event, guard: t.guard, target } });
        continue;
      }
      labels.push({ text: `${base} → ${index.pathOf.get(target) ?? target}`, kind: 'out', event: t.event, guard: t.guard, targets: [target] });
    }
  }
  return edges;
}

function dedupe<T extends { text: string }>(items: T[]): T[] {
  const seen = new Set<string>();
  return items.filter((item) => (seen.has(item.text) ? false : (seen.add(item.text), true)));
}

function labelsBlock(labels: LocalLabel[]): { width: number; height: number } {
  if (labels.length === 0) return { width: 0, height: 0 };
  return { width: Math.max(...labels.map((l) => labelWidth(l.text))), height: labels.length * METRICS.lineHeight + 4 };
}

function edgeLine(index: Index, to: StateNodeView, t: EdgeTransition): string {
  const text = transitionText(t.event, t.guard);
  return t.target === to.id ? text : `${text} → ${index.pathOf.get(t.target) ?? t.target}`;
}

function measure(index: Index, node: StateNodeView, options: Required<LayoutOptions>): Local {
  const labels: LocalLabel[] = [];
  // A node's own sibling edges are drawn by its parent's graph.
  const outgoing = classify(index, node, labels);
  const own = dedupe(labels);
  const block = labelsBlock(own);
  const { padding, titleHeight } = METRICS;
  const title = titleWidth(node.key) + 2 * padding;

  if (node.states.length === 0) {
    const width = Math.max(METRICS.minWidth, title, block.width + 2 * padding);
    const height = own.length === 0 ? titleHeight + 10 : titleHeight + block.height + padding / 2;
    return { node, width, height, labels: own, outgoing, children: [], edges: [], dot: null };
  }

  const children = node.states.map((child) => measure(index, child, options));
  const graph = node.type === 'parallel' ? regions(children) : siblingGraph(index, node, children, options);
  const top = titleHeight + block.height + (block.height > 0 ? 4 : 0);
  const width = Math.max(title, block.width + 2 * padding, graph.width + 2 * padding);
  const height = top + graph.height + padding;
  const dx = (width - graph.width) / 2;
  const shift = (p: Point): Point => ({ x: p.x + dx, y: p.y + top });
  return {
    node,
    width,
    height,
    labels: own,
    outgoing,
    children: graph.children.map((c) => ({ local: c.local, ...shift(c) })),
    edges: graph.edges.map((e) => ({ ...e, points: e.points.map(shift), labelAt: shift(e.labelAt) })),
    dot: graph.dot ? shift(graph.dot) : null,
  };
}

interface Placed {
  width: number;
  height: number;
  children: { local: Local; x: number; y: number }[];
  edges: LocalEdge[];
  dot: Point | null;
}

/** Parallel regions: side by side, tops aligned; stacked when the row would get too wide. */
function regions(children: Local[]): Placed {
  const gap = METRICS.regionGap;
  const rowWidth = children.reduce((sum, c) => sum + c.width, 0) + gap * (children.length - 1);
  const placed: Placed['children'] = [];
  if (rowWidth <= METRICS.parallelRowMax) {
    let x = 0;
    for (const local of children) {
      placed.push({ local, x, y: 0 });
      x += local.width + gap;
    }
    return { width: rowWidth, height: Math.max(...children.map((c) => c.height)), children: placed, edges: [], dot: null };
  }
  let y = 0;
  const width = Math.max(...children.map((c) => c.width));
  for (const local of children) {
    placed.push({ local, x: (width - local.width) / 2, y });
    y += local.height + gap;
  }
  return { width, height: y - gap, children: placed, edges: [], dot: null };
}

interface DagreNode {
  width: number;
  height: number;
  x?: number;
  y?: number;
  [key: string]: unknown;
}
interface DagreEdge {
  width: number;
  height: number;
  labelpos: 'c';
  points?: Point[];
  x?: number;
  y?: number;
  [key: string]: unknown;
}

/** A compound node's children as one dagre graph: an edge per pair of siblings a transition joins. */
function siblingGraph(index: Index, node: StateNodeView, children: Local[], options: Required<LayoutOptions>): Placed {
  const g = new Graph<Record<string, unknown>, DagreNode, DagreEdge>({ multigraph: false });
  g.setGraph({ rankdir: options.rankdir, nodesep: 22, ranksep: 46, edgesep: 12, marginx: 0, marginy: 0 });
  g.setDefaultEdgeLabel(() => ({ width: 0, height: 0, labelpos: 'c' }));
  for (const child of children) g.setNode(child.node.id, { width: child.width, height: child.height });

  // Transitions between the same two siblings share one edge, one line each.
  const grouped = new Map<string, { from: string; to: StateNodeView; transitions: EdgeTransition[] }>();
  for (const child of children) {
    for (const { to, transition } of child.outgoing) {
      const key = `${child.node.id}\u0000${to.id}`;
      const entry = grouped.get(key) ?? { from: child.node.id, to, transitions: [] };
      entry.transitions.push(transition);
      grouped.set(key, entry);
    }
  }
  const edges: Omit<LocalEdge, 'points' | 'labelAt'>[] = [];
  for (const { from, to, transitions } of grouped.values()) {
    const lines = [...new Set(transitions.map((t) => clip(edgeLine(index, to, t))))];
    const edge = { kind: 'transition' as const, from, to: to.id, lines, transitions, labelWidth: Math.max(...lines.map(labelWidth)) + 6, labelHeight: lines.length * METRICS.lineHeight + 2 };
    edges.push(edge);
    g.setEdge(from, to.id, { width: edge.labelWidth, height: edge.labelHeight, labelpos: 'c' });
  }
  const initial = node.initial === null ? undefined : node.states.find((s) => s.key === node.initial);
  if (initial) {
    const d = METRICS.dotRadius * 2;
    g.setNode(INITIAL_NODE, { width: d, height: d });
    g.setEdge(INITIAL_NODE, initial.id, { width: 0, height: 0, labelpos: 'c', weight: 2 });
    edges.push({ kind: 'initial', from: node.id, to: initial.id, lines: [], transitions: [], labelWidth: 0, labelHeight: 0 });
  }

  layout(g);
  const size = g.graph() as { width?: number; height?: number };
  const corner = (id: string): Point => {
    const n = g.node(id);
    return { x: (n.x ?? 0) - n.width / 2, y: (n.y ?? 0) - n.height / 2 };
  };
  const dotNode = initial ? g.node(INITIAL_NODE) : undefined;
  return {
    width: size.width ?? 0,
    height: size.height ?? 0,
    children: children.map((local) => ({ local, ...corner(local.node.id) })),
    edges: edges.map((e) => {
      const label = g.edge(e.kind === 'initial' ? INITIAL_NODE : e.from, e.to);
      return { ...e, points: (label.points ?? []).map((p: Point) => ({ x: p.x, y: p.y })), labelAt: { x: label.x ?? 0, y: label.y ?? 0 } };
    }),
    dot: dotNode ? { x: dotNode.x ?? 0, y: dotNode.y ?? 0 } : null,
  };
}

/** Places a locally laid-out node at (ox, oy), appending its boxes, edges and dots. */
function place(local: Local, ox: number, oy: number, depth: number, parent: StateNodeView | null, out: ChartLayout): void {
  const { node } = local;
  const { padding, titleHeight, lineHeight } = METRICS;
  out.boxes.push({
    id: node.id,
    key: node.key,
    parent: parent?.id ?? null,
    x: ox,
    y: oy,
    width: local.width,
    height: local.height,
    type: node.type,
    initial: parent !== null && parent.initial === node.key,
    depth,
    titleHeight,
    labels: local.labels.map((l, i) => ({
      ...l,
      text: clip(l.text),
      full: l.text,
      x: ox + padding,
      y: oy + titleHeight + i * lineHeight,
      width: labelWidth(l.text),
      height: lineHeight,
    })),
  });
  const at = (p: Point): Point => ({ x: p.x + ox, y: p.y + oy });
  if (local.dot) out.dots.push({ parent: node.id, ...at(local.dot), r: METRICS.dotRadius });
  for (const e of local.edges) {
    out.edges.push({
      ...e,
      id: e.kind === 'initial' ? `${e.from} (initial)` : `${e.from} → ${e.to}`,
      label: e.lines.join('\n'),
      points: e.points.map(at),
      labelAt: at(e.labelAt),
    });
  }
  for (const child of local.children) place(child.local, ox + child.x, oy + child.y, depth + 1, node, out);
}

export function layoutMachine(machine: MachineView, options: LayoutOptions = {}): ChartLayout {
  const index = indexMachine(machine.root);
  const local = measure(index, machine.root, { rankdir: options.rankdir ?? 'TB' });
  const { margin } = METRICS;
  const out: ChartLayout = { width: Math.ceil(local.width + 2 * margin), height: Math.ceil(local.height + 2 * margin), boxes: [], edges: [], dots: [] };
  place(local, margin, margin, 0, null, out);
  return out;
}

/**
 * Whether the event type an actor received (as XState names it: `endpoint.stop`,
 * `xstate.done.actor.0.listener.starting`, `xstate.after.drainLimit.listener.…`) is the one a
 * transition of the definition names (`endpoint.stop`, `done`, `error`, `after drainLimit`).
 */
export function eventMatches(transitionEvent: string, received: string): boolean {
  if (transitionEvent === received) return true;
  if (transitionEvent === 'done') return received.startsWith('xstate.done.');
  if (transitionEvent === 'error') return received.startsWith('xstate.error.');
  if (transitionEvent.startsWith('after ')) {
    if (!received.startsWith('xstate.after.')) return false;
    const delay = transitionEvent.slice('after '.length).replace(/ms$/, '');
    return received.startsWith(`xstate.after.${delay}.`);
  }
  return false;
}
