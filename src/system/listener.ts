// The inference listener's adapter (spec 3.1): the real actors behind the listener machine's
// placeholders (bind the HTTP listener, discard the waiting jobs, let running answers finish, close
// by force on SIGTERM's drain limit, unload the workers), and the writer of what the machine
// decides is remembered. The HTTP listener itself is built above this layer (src/compose.ts hands
// its builder in), so this layer knows no HTTP framework.
import type { AddressInfo } from 'node:net';
import { fromPromise, waitFor, type Actor } from 'xstate';
import { SYSTEM_IDS } from '../../machines/ids.js';
import { listenerMachine, type ListenerAddress } from '../../machines/listener/index.js';
import type { JobRecord, SupervisorEmitted, supervisorMachine } from '../../machines/supervisor/index.js';
import type { EndpointStore } from '../store/endpoint.js';
import { ask } from './ask.js';
import type { Logger } from './observe/log.js';
import type { SupervisorActor } from './scheduler.js';
import { isListenError, listenProblem } from './listenProblem.js';

export type ListenerActor = Actor<typeof listenerMachine>;

/** What the service needs of an HTTP listener. */
export interface HttpListener {
  listen(options: { host: string; port: number }): Promise<unknown>;
  close(): Promise<void>;
  readonly server: { address(): AddressInfo | string | null; closeAllConnections(): void; closeIdleConnections(): void };
}

/** How often a stopping listener ends the connections that have fallen idle. */
const IDLE_SWEEP_MS = 200;

/** The address a listening app is bound to (the real port when it was asked for port 0). */
export function boundAddress(app: HttpListener | undefined): { host: string; port: number } | undefined {
  const address = app?.server.address();
  return address && typeof address === 'object' ? { host: address.address, port: address.port } : undefined;
}

/** Jobs that hold a reservation for a request or a test (a warm preload is no answer to wait for). */
export const runningJobs = (jobs: Record<string, JobRecord>) => Object.values(jobs).filter((j) => j.phase === 'running' && j.spec.source !== 'preload').length;

/** One supervisor request of the stop sequence, answered by `supervisor.reply`. */
export async function askSupervisor(supervisor: SupervisorActor, event: { type: 'endpoint.discard' } | { type: 'workers.unloadAll' }, timeoutMs: number): Promise<void> {
  const replied = await ask<typeof supervisorMachine, Extract<SupervisorEmitted, { type: 'supervisor.reply' }>>(supervisor, 'supervisor.reply', event, { timeoutMs });
  if (!replied) throw new Error(`the supervisor did not answer ${event.type} within ${timeoutMs} ms`);
}

export interface InferenceListenerDeps {
  /** Builds the inference listener (a new one for every start). */
  build: () => Promise<HttpListener>;
  /** The root actor, once it exists (the listener machine is its child). */
  supervisor: () => SupervisorActor;
  log: Logger;
  /** How long the unload of every worker may take after the drain (SIGTERM's drain limit plus a minute). */
  unloadTimeoutMs: number;
}

/** The bound inference listener, and the listener machine's real actors around it. */
export class InferenceListener {
  #app: HttpListener | undefined;
  #closing: Promise<void> | undefined;

  constructor(private readonly deps: InferenceListenerDeps) {}

  address(): { host: string; port: number } | undefined {
    return boundAddress(this.#app);
  }

  /** The listener machine with these actors in place of its placeholders. */
  logic() {
    const { deps } = this;
    return listenerMachine.provide({
      actors: {
        openListener: fromPromise<void, ListenerAddress>(async ({ input }) => {
          const app = await deps.build();
          try {
            await app.listen({ host: input.host, port: input.port });
          } catch (error) {
            await app.close();
            if (!isListenError(error)) throw error;
            throw new Error(
              listenProblem(error, {
                port: input.port,
                portFix: "save another port while the listener is stopped (the console's Change port, or POST /api/v1/endpoint/config)",
                hostFix: 'listen on 127.0.0.1 (the default) or an address of this machine',
              }),
              { cause: error },
            );
          }
          this.#app = app;
          this.#closing = undefined;
          deps.supervisor().send({ type: 'endpoint.opened' });
          deps.log.info({ host: input.host, port: this.address()?.port }, 'inference listener started');
        }),
        discardWaiting: fromPromise(async () => {
          await askSupervisor(deps.supervisor(), { type: 'endpoint.discard' }, 15_000);
        }),
        closeListener: fromPromise(async () => {
          const app = this.#app;
          this.#closing ??= app?.close();
          // A keep-alive connection that falls idle once its answer is over would hold the close
          // open until the client hangs up: each is ended as soon as it is idle.
          const idle = setInterval(() => app?.server.closeIdleConnections(), IDLE_SWEEP_MS);
          try {
            await this.#closing;
          } finally {
            clearInterval(idle);
          }
          // The admin chat and image tests run on the same workers: they finish too before the unload.
          await waitFor(deps.supervisor(), (s) => runningJobs(s.context.jobs) === 0);
        }),
        forceClose: fromPromise(async () => {
          deps.log.warn('answers still running after the drain limit: closing their connections');
          this.#app?.server.closeAllConnections();
          await this.#closing;
        }),
        unloadWorkers: fromPromise(async () => {
          await askSupervisor(deps.supervisor(), { type: 'workers.unloadAll' }, deps.unloadTimeoutMs);
          this.#app = undefined;
          deps.log.info('inference listener stopped; workers unloaded');
        }),
      },
    });
  }
}

/** The supervisor's listener child (it exists once the supervisor has started; it is gone once the service has ended). */
export const listenerOf = (supervisor: SupervisorActor) => supervisor.system.get(SYSTEM_IDS.listener) as ListenerActor | undefined;

/**
 * Machines decide what is remembered; this writes it to `endpoint.json` whenever the listener
 * machine changes it, and keeps since when a stop is in progress (for the status).
 */
export function watchListener(listener: ListenerActor, endpoint: EndpointStore, log: Logger): { stopSince(): string | null } {
  let remembered = listener.getSnapshot().context.remembered;
  let stopSince: string | null = null;
  listener.subscribe({
    next: (snapshot) => {
      const stopping = snapshot.matches('stopping');
      if (stopping && stopSince === null) stopSince = new Date().toISOString();
      else if (!stopping) stopSince = null;
      const next = snapshot.context.remembered;
      if (next === remembered) return;
      remembered = next;
      endpoint.update({ running: next.running, host: next.host, port: next.port }).catch((error: unknown) => {
        log.error({ err: error, file: endpoint.file }, 'cannot write the endpoint record');
      });
    },
    error: (error) => log.error({ err: error }, 'listener actor failed'),
  });
  return { stopSince: () => stopSince };
}
