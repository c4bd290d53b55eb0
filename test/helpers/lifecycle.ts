// A running worker lifecycle machine (machines/worker/lifecycle.ts) with a simulated clock and a
// simulated engine process: the tests send the supervisor's commands and the engine's reports
// and read the machine's state, its reports and the signals the engine got.
import type { Test } from 'tap';
import { createActor, fromCallback, SimulatedClock } from 'xstate';
import type { EngineCommand, EngineInput, LaunchBase, LifecycleEmitted, LifecycleEvent, LifecycleInput, lifecycleMachine } from '../../machines/worker/lifecycle.js';

export function lifecycleHarness<L extends LaunchBase, K extends string>(machine: ReturnType<typeof lifecycleMachine<L, K>>, input: LifecycleInput = {}) {
  const clock = new SimulatedClock();
  const commands: string[] = [];
  const engines: Array<EngineInput<L>> = [];
  let send: ((event: LifecycleEvent) => void) | undefined;
  const engine = fromCallback<EngineCommand, EngineInput<L>, LifecycleEvent>(({ input: engineInput, sendBack, receive }) => {
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
    engine: (event: LifecycleEvent) => send?.(event),
  };
}

/**
 * An unload on the supervisor's command, as every worker machine does it: SIGTERM, no SIGKILL
 * before the grace, SIGKILL at the grace, unloaded once the process is gone, the reason kept for
 * the status, and no `worker.exited` (an unload we asked for is not an exit).
 */
export function expectUnload<L extends LaunchBase, K extends string>(
  t: Test,
  h: ReturnType<typeof lifecycleHarness<L, K>>,
  reason: string,
  graceMs: number,
  generation = 1,
): void {
  t.ok(h.actor.getSnapshot().can({ type: 'worker.unload', generation, reason }), 'the unload names this start');
  h.actor.send({ type: 'worker.unload', generation, reason });
  t.equal(h.state(), '{"running":"unloading"}');
  t.same(h.commands, ['engine.stop'], 'SIGTERM first');
  h.clock.increment(graceMs - 1);
  t.same(h.commands, ['engine.stop'], 'no SIGKILL before the grace');
  h.clock.increment(1);
  t.same(h.commands, ['engine.stop', 'engine.kill'], 'SIGKILL after the grace');
  h.engine({ type: 'engine.exited', report: { exitCode: null, signal: 'SIGKILL', cause: 'stopped', message: 'stopped' } });
  t.equal(h.state(), '"unloaded"');
  t.equal(h.actor.getSnapshot().context.last, reason, 'the status keeps why');
  t.notOk(h.emitted.some((e) => e.type === 'worker.exited'), 'an unload we asked for is not an exit');
}

/**
 * Counts the subscriptions opened on `actor` from now on and not yet closed (each wait of a job on
 * a worker's machine subscribes): a wait that ended must have closed its own.
 */
export function countSubscriptions<S>(actor: { subscribe: (listener: (snapshot: S) => void) => { unsubscribe(): void } }): () => number {
  const subscribe = actor.subscribe.bind(actor);
  let open = 0;
  actor.subscribe = (listener) => {
    const subscription = subscribe(listener);
    open += 1;
    let closed = false;
    return {
      unsubscribe: () => {
        if (!closed) open -= 1;
        closed = true;
        subscription.unsubscribe();
      },
    };
  };
  return () => open;
}
