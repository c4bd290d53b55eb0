// What the operator console's state-chart view reads: the machine definitions walked into plain
// data (`describeMachine`), and the running actors of those machines as an inspection observer
// sees them (`ChartFeed`). The feed is always on, whatever SERVICE_DECK_INSPECT says; it keeps
// only what is safe to show: state ids, values, statuses and the type and sender of the last
// events, never an event's payload or an actor's context (prompts, audio, images, secrets).
import { EventEmitter } from 'eventemitter3';
import { StateMachine, type AnyStateMachine, type InspectionEvent } from 'xstate';
import type { ActorEventView, ActorView, MachineView, StateNodeView, TransitionView } from './console.types.js';

/** The parts of an XState v5 state node the view reads. */
interface NodeLike {
  id: string;
  key: string;
  type: StateNodeView['type'];
  tags: string[];
  states: Record<string, NodeLike>;
  initial?: { target?: readonly NodeLike[] };
  transitions: Map<string, TransitionLike[]>;
  always?: TransitionLike[];
}

interface TransitionLike {
  eventType: string;
  target?: readonly NodeLike[] | undefined;
  guard?: unknown;
  reenter?: boolean;
}

export const ACTOR_EVENT_LIMIT = 25;

/** `xstate.done.actor.<id>` → done, `xstate.after.<delay>.<state>` → `after 30000ms`, … */
export function eventLabel(eventType: string): string {
  if (eventType.startsWith('xstate.done.')) return 'done';
  if (eventType.startsWith('xstate.error.')) return 'error';
  const after = /^xstate\.after\.([^.]+)\./.exec(eventType);
  if (after?.[1] !== undefined) return /^\d+$/.test(after[1]) ? `after ${after[1]}ms` : `after ${after[1]}`;
  return eventType;
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  // An arrow function written as `guard: (…) => …` takes the name `guard`: it has no name of its own.
  if (typeof guard === 'function') return guard.name && guard.name !== 'guard' ? guard.name : 'inline';
  if (typeof guard === 'object' && typeof (guard as { type?: unknown }).type === 'string') return (guard as { type: string }).type;
  return 'inline';
}

function transitionView(event: string, transition: TransitionLike): TransitionView {
  return {
    event,
    targets: (transition.target ?? []).map((node) => node.id),
    guard: guardName(transition.guard),
    reenter: transition.reenter ?? false,
  };
}

function nodeView(node: NodeLike): StateNodeView {
  const transitions: TransitionView[] = [];
  for (const [eventType, list] of node.transitions) for (const t of list) transitions.push(transitionView(eventLabel(eventType), t));
  for (const t of node.always ?? []) transitions.push(transitionView('always', t));
  const states = Object.values(node.states);
  return {
    id: node.id,
    key: node.key,
    type: node.type,
    initial: states.length > 0 && node.type === 'compound' ? (node.initial?.target?.[0]?.key ?? null) : null,
    tags: [...node.tags],
    states: states.map(nodeView),
    transitions,
  };
}

/** A machine definition (the same logic the actors run) as plain data for the console. */
export function describeMachine(logic: AnyStateMachine): MachineView {
  return { id: logic.id, root: nodeView(logic.root as unknown as NodeLike) };
}

const isMachine = (logic: unknown): logic is AnyStateMachine => logic instanceof StateMachine;

/** What the feed reads of an actor (an inspection event's actorRef or sourceRef). */
interface RefLike {
  id: string;
  systemId?: string;
  logic?: unknown;
}

const actorName = (ref: unknown): string | null => (ref ? ((ref as RefLike).systemId ?? (ref as RefLike).id) : null);

/**
 * The time now as ISO text, made once per millisecond: one chat request brings the feed a few
 * dozen inspection events within the same millisecond (the hot path).
 */
const isoNow = (() => {
  let ms = NaN;
  let text = '';
  return (): string => {
    const now = Date.now();
    if (now !== ms) {
      ms = now;
      text = new Date(now).toISOString();
    }
    return text;
  };
})();

interface SnapshotLike {
  value?: unknown;
  status?: ActorView['status'];
  _nodes?: Array<{ id: string }>;
}

/**
 * The inspection observer behind `GET /api/v1/actors` and the `actor` events: one view per actor
 * of a state machine (promise and callback actors are left out), changed on each event it
 * receives and each snapshot it takes. Emits `actor` with the new view.
 */
export class ChartFeed extends EventEmitter<{ actor: [view: ActorView] }> {
  readonly #machines = new Map<string, MachineView>();
  readonly #described = new WeakMap<AnyStateMachine, MachineView>();
  readonly #actors = new Map<RefLike, ActorView>();
  /**
   * The active state nodes of each view's last snapshot, turned into ids only when the view is
   * read: the supervisor takes a snapshot on every reservation and release.
   */
  readonly #nodes = new WeakMap<ActorView, Array<{ id: string }>>();

  /** The view with its active state ids brought up to date. */
  #current(view: ActorView): ActorView {
    const nodes = this.#nodes.get(view);
    if (nodes) {
      view.active = nodes.map((node) => node.id);
      this.#nodes.delete(view);
    }
    return view;
  }

  /** Definitions known before an actor of theirs runs (compose.ts lists every machine). */
  constructor(definitions: AnyStateMachine[] = []) {
    super();
    for (const logic of definitions) this.#describe(logic);
  }

  #describe(logic: AnyStateMachine): MachineView {
    let view = this.#described.get(logic);
    if (!view) {
      view = describeMachine(logic);
      this.#described.set(logic, view);
    }
    this.#machines.set(view.id, view);
    return view;
  }

  /** The inspect callback: give it to every actor (it sees the actor's whole system). */
  readonly observe = (event: InspectionEvent): void => {
    const ref = event.actorRef as unknown as RefLike;
    let view = this.#actors.get(ref);
    // Only events and snapshots change a known view: the rest (actions, microsteps) return first.
    if (view && event.type !== '@xstate.event' && event.type !== '@xstate.snapshot') return;
    if (!view) {
      if (!isMachine(ref.logic)) return;
      view = { id: ref.id, machine: this.#describe(ref.logic).id, active: [], value: null, status: 'active', events: [], updated_at: isoNow() };
      this.#actors.set(ref, view);
    }
    // XState announces an actor before it registers its systemId.
    view.id = ref.systemId ?? ref.id;
    switch (event.type) {
      case '@xstate.event': {
        const entry: ActorEventView = { type: event.event.type, source: actorName(event.sourceRef), at: isoNow() };
        // In place: what leaves the feed is a copy (actors(), the `actor` event).
        view.events.push(entry);
        if (view.events.length > ACTOR_EVENT_LIMIT) view.events.shift();
        break;
      }
      case '@xstate.snapshot': {
        const snapshot = event.snapshot as SnapshotLike;
        view.value = snapshot.value ?? null;
        view.status = snapshot.status ?? 'active';
        this.#nodes.set(view, snapshot._nodes ?? []);
        break;
      }
      default:
        return;
    }
    view.updated_at = isoNow();
    // An ended actor without a systemId (a queue's expiry timer) is shown ending, marked gone so
    // that a page forgets it too, then forgotten.
    const gone = view.status !== 'active' && ref.systemId === undefined;
    if (gone) this.#actors.delete(ref);
    // A copy for the listeners (the open event streams), only when there is one.
    if (this.listenerCount('actor') > 0) {
      const copy = structuredClone(this.#current(view));
      this.emit('actor', gone ? { ...copy, gone: true } : copy);
    }
  };

  /** Every actor of a machine it has seen, the long-lived (with a systemId) and those still running. */
  actors(): ActorView[] {
    return [...this.#actors.values()].map((view) => structuredClone(this.#current(view)));
  }

  /** Every machine definition it knows, by machine id. */
  machines(): Record<string, MachineView> {
    return Object.fromEntries(this.#machines);
  }
}
