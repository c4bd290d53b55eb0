// A test helper: walks a real XState machine definition (`machine.root`) into the plain
// MachineView the state-chart view draws, so the layout is tested on the machines the service runs.
// The page itself never imports xstate: the service sends it this shape (GET /api/v1/machines).
import type { AnyStateMachine, AnyStateNode } from 'xstate';
import type { MachineView, StateNodeView, TransitionView } from '../../src/system/console.types.js';

interface TransitionLike {
  eventType: string;
  target?: readonly AnyStateNode[] | undefined;
  guard?: unknown;
  reenter: boolean;
  delay?: unknown;
}

/** `xstate.done.actor.0.listener.starting` → `done`, `xstate.after.drainLimit.…` → `after drainLimit`. */
function eventOf(transition: TransitionLike): string {
  const type = transition.eventType;
  if (type.startsWith('xstate.after.')) {
    const delay = transition.delay;
    return `after ${typeof delay === 'number' ? `${delay}ms` : String(delay)}`;
  }
  if (type.startsWith('xstate.done.')) return 'done';
  if (type.startsWith('xstate.error.')) return 'error';
  return type;
}

function guardOf(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object' && 'type' in guard && typeof guard.type === 'string') return guard.type;
  return 'inline';
}

function transitionView(transition: TransitionLike, event = eventOf(transition)): TransitionView {
  return {
    event,
    targets: (transition.target ?? []).map((node) => node.id),
    guard: guardOf(transition.guard),
    reenter: transition.reenter,
  };
}

function nodeView(node: AnyStateNode): StateNodeView {
  const transitions: TransitionView[] = [];
  for (const list of node.transitions.values()) for (const transition of list) transitions.push(transitionView(transition as TransitionLike));
  for (const transition of node.always ?? []) transitions.push(transitionView(transition as TransitionLike, 'always'));
  const initial = node.type === 'compound' ? (node.initial.target[0]?.key ?? null) : null;
  return {
    id: node.id,
    key: node.key,
    type: node.type,
    initial,
    tags: [...node.tags],
    states: Object.values(node.states).map(nodeView),
    transitions,
  };
}

export function machineView(machine: AnyStateMachine): MachineView {
  return { id: machine.id, root: nodeView(machine.root) };
}
