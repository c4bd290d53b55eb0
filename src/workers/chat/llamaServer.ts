// The `engine` actor of the chat worker machine and of the prompt enhancer: one llama-server
// process per start (the process protocol itself is src/workers/engine.ts).
//
// - Spawned with the stored parameters and the fixed backend defaults (machines/chatWorker/args.ts)
//   on a free loopback port, with `--api-key-file` naming a fresh short-lived key in a 0600 file
//   under the state's runtime folder (spec 5 rule 3). The file is removed when the start ends.
// - Ready when `/health` answers 200 (it answers 503 while the model loads).
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { serverArgs, type ChatLaunch } from '../../../machines/chatWorker/index.js';
import type { ServerPlace } from '../../../machines/chatWorker/args.js';
import { diesWithService } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage, type RuntimeLookup } from '../../adapters/runtimes.js';
import type { Logger } from '../../system/observe/log.js';
import { engineActor, type StartHooks } from '../engine.js';
import type { StderrLines } from '../../system/observe/stderrLines.js';
import { workerEnv, freePort } from '../process.js';

export interface ServerDeps {
  lookup: RuntimeLookup;
  /** The state's runtime folder (0700) for the key files. */
  runtimeDir: string;
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** Where each start's key is kept for the requests (never in a machine's context, never logged). */
  keys: Map<number, string>;
  /** Where the process's stderr lines are kept for the console (redacted). */
  stderr?: StderrLines;
}

/** One GET of /health: its status code, or 0 when nothing answered. */
export function healthStatus(port: number, timeoutMs = 2000): Promise<number> {
  return new Promise((resolve) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/health', agent: false, timeout: timeoutMs }, (response) => {
      response.resume();
      resolve(response.statusCode ?? 0);
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(0));
  });
}

/** Which worker a llama-server actor serves: its kind, how the status names it, its command line. */
export interface ServerRole<L extends ChatLaunch> {
  kind: 'chat' | 'enhancer';
  name: string;
  args: (launch: L, place: ServerPlace) => string[];
}

export const CHAT_SERVER: ServerRole<ChatLaunch> = { kind: 'chat', name: 'chat worker', args: serverArgs };

export function llamaServerActor<L extends ChatLaunch = ChatLaunch>(deps: ServerDeps, role: ServerRole<L> = CHAT_SERVER as unknown as ServerRole<L>) {
  return engineActor<L>({ worker: role.kind, name: role.name, log: deps.log, runtimeDir: deps.runtimeDir, ...(deps.stderr ? { stderr: deps.stderr } : {}) }, (launch): StartHooks => {
    const { generation } = launch;
    const keyFile = path.join(deps.runtimeDir, `${role.kind}-${generation}-${process.pid}.key`);
    return {
      prepare: async () => {
        const binary = await resolveRuntime('llama-server', deps.lookup);
        if (!binary) {
          const message = runtimeMissingMessage(role.name, ['llama-server'], deps.lookup.env, 'llama-server is not installed (run scripts/build-llama.sh or set SERVICE_DECK_LLAMA_SERVER)');
          return { unable: { cause: 'runtime_missing', message } };
        }
        const port = await freePort();
        const key = randomBytes(24).toString('base64url');
        await writeFile(keyFile, `${key}\n`, { mode: 0o600, flag: 'w' });
        deps.keys.set(generation, key);
        const command = await diesWithService(binary, role.args(launch, { port, keyFile }), deps.env);
        return { command, port, options: { env: { ...workerEnv(deps.env), CUDA_VISIBLE_DEVICES: launch.gpus.join(',') } } };
      },
      answers: async (port) => (await healthStatus(port)) === 200,
      cleanup: () => {
        deps.keys.delete(generation);
        void rm(keyFile, { force: true }).catch(() => undefined);
      },
    };
  });
}
