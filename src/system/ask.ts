// Request and reply between a thin route and an actor: the route sends one event carrying a fresh
// request id and awaits the actor's emitted reply with that id, bounded by a timeout and the
// request's AbortSignal. No decision is taken here.
import { randomUUID } from 'node:crypto';
import type { Actor, AnyStateMachine, EventFromLogic } from 'xstate';

export class AskTimeout extends Error {
  override name = 'AskTimeout';
}

/** Omit over each member of a union (plain Omit merges the union first). */
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export async function ask<TMachine extends AnyStateMachine, TReply extends { requestId: string }>(
  actor: Actor<TMachine>,
  replyType: string,
  event: DistributiveOmit<EventFromLogic<TMachine>, 'requestId'>,
  options: { timeoutMs: number; signal?: AbortSignal },
): Promise<TReply | undefined> {
  const requestId = randomUUID();
  return new Promise<TReply | undefined>((resolve, reject) => {
    let done = false;
    const finish = (fn: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      subscription.unsubscribe();
      options.signal?.removeEventListener('abort', onAbort);
      fn();
    };
    const subscription = actor.on(replyType, (emitted: unknown) => {
      const candidate = emitted as TReply;
      if (candidate.requestId === requestId) finish(() => resolve(candidate));
    });
    /** The reply did not come in time: the route answers with what the status shows. */
    const timer = setTimeout(() => finish(() => resolve(undefined)), options.timeoutMs);
    const onAbort = () => finish(() => reject(new AskTimeout('the client went away')));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    actor.send({ ...event, requestId } as EventFromLogic<TMachine>);
  });
}
