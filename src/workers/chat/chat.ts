// The chat worker adapter: runs the chat worker machine (machines/chatWorker) with the real
// llama-server actor, forwards its reports to the supervisor, carries the supervisor's unload
// commands to it, and gives routes the connection of a loaded start.
//
// The supervisor sends the machine its `worker.start` with the grant that starts the worker (the
// job's profile snapshot, the memory check's plan); every job of that start (granted while it
// loads or once loaded) waits for `loaded` with the grant's generation. Keys stay in this adapter's memory (never in a machine's context,
// which the inspector shows) and in their 0600 file while the process lives.
import http from 'node:http';
import type { Actor } from 'xstate';
import { chatWorkerMachine } from '../../../machines/chatWorker/index.js';
import { WORKER_IDS } from '../../../machines/ids.js';
import type { StoredProfile } from '../../store/profile.schema.js';
import { connectionOf, LifecycleWorker, type WorkerDeps } from '../lifecycle.js';
import { llamaServerActor } from './llamaServer.js';

export type ChatWorkerActor = Actor<typeof chatWorkerMachine>;
export type ChatProfile = Extract<StoredProfile, { category: 'chat' }>;

/** What a route needs to talk to a loaded start. */
export interface ChatConnection {
  generation: number;
  port: number;
  key: string;
  /** Keep-alive connections for buffered answers; a stream always takes a fresh connection. */
  agent: http.Agent;
  /** The profile name the worker answers under. */
  name: string;
}

/** The worker start went away before it was ready (unloaded, failed, or replaced). */
export class WorkerGone extends Error {
  override name = 'WorkerGone';
}

/** The chat worker keeps its key and pid files in the runtime folder: it is required here. */
export type ChatWorkerDeps = WorkerDeps & { runtimeDir: string };

export class ChatWorker extends LifecycleWorker<ReturnType<ChatWorkerActor['getSnapshot']>> {
  readonly #keys: Map<number, string>;
  readonly #agents = new Map<number, http.Agent>();

  constructor(deps: ChatWorkerDeps) {
    const keys = new Map<number, string>();
    const logic = chatWorkerMachine.provide({
      actors: { engine: llamaServerActor({ lookup: deps.lookup, runtimeDir: deps.runtimeDir, env: deps.env, log: deps.log, keys, stderr: deps.workers.stderr.of('chat') }) },
    });
    super(logic, 'chat', connectionOf(deps, 'chat worker', WORKER_IDS.chat), (reason) => new WorkerGone(reason));
    this.#keys = keys;
  }

  protected override attached(actor: this['actor']): void {
    // Connections of starts that ended are closed.
    actor.subscribe((snapshot) => {
      const live = snapshot.matches('unloaded') ? null : (snapshot.context.launch?.generation ?? null);
      for (const [generation, agent] of this.#agents) {
        if (generation === live) continue;
        agent.destroy();
        this.#agents.delete(generation);
      }
    });
  }

  protected override gpus(): string[] {
    return this.actor.getSnapshot().context.launch?.gpus ?? [];
  }

  /** Resolves with the connection once the start `generation` is loaded; rejects when it ends first or `signal` aborts. */
  async connect(generation: number, signal?: AbortSignal): Promise<ChatConnection> {
    await this.ready(generation, signal);
    const connection = this.connection(generation);
    if (!connection) throw new WorkerGone('the chat worker is loaded but its key is gone');
    return connection;
  }

  /** The connection of a loaded start, or undefined when it is not the current one. */
  connection(generation: number): ChatConnection | undefined {
    const { context } = this.actor.getSnapshot();
    const key = this.#keys.get(generation);
    if (context.launch?.generation !== generation || context.port === null || key === undefined) return undefined;
    let agent = this.#agents.get(generation);
    if (!agent) {
      // Idle connections are dropped after 2 s, before llama-server's own 5 s keep-alive limit, so
      // a request never goes out on a connection the worker is closing.
      agent = new http.Agent({ keepAlive: true, maxSockets: Math.max(1, context.launch.slots) * 2, timeout: 2_000 });
      this.#agents.set(generation, agent);
    }
    return { generation, port: context.port, key, agent, name: context.launch.name };
  }

  /**
   * Asks the start `generation` for its slots (GET /slots). llama-server answers that from the main
   * loop that also samples every slot's tokens, so an answer says the loop goes round; a loop held
   * by one slot's grammar never answers. Resolves true with the answer, false when the start is
   * not the current one or its connection fails; stays pending while the loop is held, until
   * `signal` aborts (then the request is ended and it resolves false).
   */
  probe(generation: number, signal: AbortSignal): Promise<boolean> {
    const connection = this.connection(generation);
    if (!connection || signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const request = http.get({ host: '127.0.0.1', port: connection.port, path: '/slots', agent: false, headers: { authorization: `Bearer ${connection.key}` } }, (response) => {
        response.resume();
        signal.removeEventListener('abort', end);
        resolve(true);
      });
      const end = () => {
        request.destroy();
        resolve(false);
      };
      request.on('error', end);
      signal.addEventListener('abort', end, { once: true });
    });
  }

  override stop(): void {
    super.stop();
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}
