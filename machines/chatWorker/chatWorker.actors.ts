// Placeholder actors of the chat worker. The system provides the real llama-server process actor
// (src/workers/llamaServer.ts) with `chatWorkerMachine.provide({ actors })`; tests provide
// simulated ones.
import { fromCallback } from 'xstate';
import type { ChatLaunch, ChatWorkerEvent, ServerCommand } from './chatWorker.types.js';

export interface ServerInput {
  launch: ChatLaunch;
}

export const chatWorkerActors = {
  /**
   * The llama-server process of one start: spawns it with the launch's stored parameters and the
   * fixed backend defaults, sends `server.spawned` (pid, port), `server.ready` once `/health`
   * answers 200 and `server.exited` (with a diagnosis) when it ends. Takes `server.stop` (SIGTERM)
   * and `server.kill` (SIGKILL); its cleanup kills what is left and removes the key file.
   */
  server: fromCallback<ServerCommand, ServerInput, ChatWorkerEvent>(() => {
    throw new Error('chat worker actor server was not provided');
  }),
};
