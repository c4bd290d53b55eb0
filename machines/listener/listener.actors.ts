// Placeholder actors of the listener machine. The system gives the real ones with
// `listenerMachine.provide({ actors })`; tests give simulated ones. Every promise actor receives
// the invocation's AbortSignal.
import { fromPromise } from 'xstate';
import type { ListenerAddress } from './listener.types.js';

const notProvided = (name: string) => new Error(`listener actor ${name} was not provided`);

export const listenerActors = {
  /** Binds the inference listener to the address; rejects when it cannot (port in use). */
  openListener: fromPromise<void, ListenerAddress>(async () => {
    throw notProvided('openListener');
  }),
  /** Rejects every request still waiting in the queue with `endpoint_stopped`. */
  discardWaiting: fromPromise<void>(async () => {
    throw notProvided('discardWaiting');
  }),
  /** Stops accepting connections and resolves once every running answer has finished. */
  closeListener: fromPromise<void>(async () => {
    throw notProvided('closeListener');
  }),
  /** Ends the connections of answers still running after the drain limit. */
  forceClose: fromPromise<void>(async () => {
    throw notProvided('forceClose');
  }),
  /** Unloads every worker: own processes get SIGTERM; TTS and STT workers are unloaded too. */
  unloadWorkers: fromPromise<void>(async () => {
    throw notProvided('unloadWorkers');
  }),
};
