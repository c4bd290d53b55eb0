// A running worker lifecycle machine (machines/worker/lifecycle.ts) with a simulated clock and a
// simulated engine process: the tests send the supervisor's commands and the engine's reports
// and read the machine's state, its reports and the signals the engine got.
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import type { EngineCommand, EngineInput, LaunchBase, LifecycleEmitted, LifecycleEvent, LifecycleInput, lifecycleMachine } from '../../machines/worker/lifecycle.js';

export function lifecycleHarness<L extends LaunchBase, K extends string>(machine: ReturnType<typeof lifecycleMachine<L, K>>, input: LifecycleInput = {}) {
  const clock = new SimulatedClock();
  const commands: string[] = [];
  const engines: Array<EngineInput<L>> = [];
  let send: ((event: LifecycleEvent<L>) => void) | undefined;
  const engine = fromCallback<EngineCommand, EngineInput<L>, LifecycleEvent<L>>(({ input: engineInput, sendBack, receive }) => {
    engines.push(engineInput);
    send = sendBack;
    receive((command) => commands.push(command.type));
    return () => commands.push('cleanup');
  });
  const actor = createActor(machine.provide({ actors: { engine } }), { clock, input });
  const emitted: Array<LifecycleEmitted<K>> = [];
  actor.on('*', (event) => emitted.push(event as LifecycleEmitted<K>));
  actor.start();
  return {
    clock,
    commands,
    engines,
    emitted,
    actor,
    state: () => JSON.stringify(actor.getSnapshot().value),
    engine: (event: LifecycleEvent<L>) => send?.(event),
  };
}
