// The real `engine` actor of the chat worker machine: one llama-server process per start.
//
// - Spawned with the stored parameters and the fixed backend defaults (machines/chatWorker/args.ts)
//   on a free loopback port, with `--api-key-file` naming a fresh short-lived key in a 0600 file
//   under the state's runtime folder (spec 5 rule 3). The file is removed when the process ends.
// - Ready when `/health` answers 200 (it answers 503 while the model loads).
// - `engine.stop` sends SIGTERM, `engine.kill` SIGKILL (the machine times the grace period).
// - When the process ends, the output tail (kept in RAM only, never logged) and the cgroup's
//   oom_kill count before and after are diagnosed (src/system/diagnose.ts): the machine reports
//   the likely cause, and only the matching line is ever shown as evidence.
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import type { ResultPromise } from 'execa';
import { fromCallback } from 'xstate';
import { serverArgs, type ChatLaunch, type EngineCommand } from '../../../machines/chatWorker/index.js';
import type { ServerPlace } from '../../../machines/chatWorker/args.js';
import type { LifecycleEvent } from '../../../machines/worker/lifecycle.js';
import { readOomKills } from '../../adapters/memory.js';
import { diesWithService, startWorker } from '../../adapters/parentDeath.js';
import { resolveRuntime, runtimeMissingMessage, type RuntimeLookup } from '../../adapters/runtimes.js';
import { diagnoseExit } from '../../system/diagnose.js';
import type { Logger } from '../../system/observe/log.js';
import { workerEnv, WORKER_PROCESS, freePort, Tail } from '../process.js';

/** How much of the process's output is kept for the diagnosis (RAM only). */
const TAIL_BYTES = 16 * 1024;
const HEALTH_POLL_MS = 100;

export interface ServerDeps {
  lookup: RuntimeLookup;
  /** The state's runtime folder (0700) for the key files. */
  runtimeDir: string;
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** Where each start's key is kept for the requests (never in a machine's context, never logged). */
  keys: Map<number, string>;
}

/**
 * At the service's start: chat workers that an earlier run of the service left behind (it was
 * killed before it could end them) are ended, and their key and pid files removed. A pid counts
 * as ours only while its command line names a key file in this runtime folder, so a reused pid
 * of some other process is never signalled.
 */
export async function sweepLeftovers(runtimeDir: string, log: Logger): Promise<number> {
  let ended = 0;
  const names = await readdir(runtimeDir).catch(() => [] as string[]);
  const prefixOf = (name: string) => SERVER_KINDS.find((kind) => name.startsWith(`${kind}-`));
  for (const name of names.filter((n) => prefixOf(n) !== undefined && n.endsWith('.pid'))) {
    const pid = Number((await readFile(path.join(runtimeDir, name), 'utf8').catch(() => '')).trim());
    if (!Number.isInteger(pid) || pid <= 1) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.split('\0').some((arg) => arg.startsWith(`${runtimeDir}${path.sep}${prefixOf(name)}-`))) continue;
    try {
      process.kill(pid, 'SIGKILL');
      ended += 1;
    } catch {
      // Gone meanwhile.
    }
  }
  await Promise.all(names.filter((n) => prefixOf(n) !== undefined).map((n) => rm(path.join(runtimeDir, n), { force: true })));
  if (ended > 0) log.warn({ count: ended }, 'ended llama-server workers (chat, prompt enhancer) left behind by an earlier run of the service');
  return ended;
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

/** The workers that run on llama-server; each names its key and pid files. */
const SERVER_KINDS = ['chat', 'enhancer'] as const;

/** Which worker a llama-server actor serves: its kind, how the status names it, its command line. */
export interface ServerRole<L extends ChatLaunch> {
  kind: (typeof SERVER_KINDS)[number];
  name: string;
  args: (launch: L, place: ServerPlace) => string[];
}

export const CHAT_SERVER: ServerRole<ChatLaunch> = { kind: 'chat', name: 'chat worker', args: serverArgs };

export function llamaServerActor<L extends ChatLaunch = ChatLaunch>(deps: ServerDeps, role: ServerRole<L> = CHAT_SERVER as unknown as ServerRole<L>) {
  const worker = role.kind;
  return fromCallback<EngineCommand, { launch: L }, LifecycleEvent<L>>(({ input, sendBack, receive }) => {
    const { launch } = input;
    const generation = launch.generation;
    const keyFile = path.join(deps.runtimeDir, `${worker}-${generation}-${process.pid}.key`);
    const pidFile = path.join(deps.runtimeDir, `${worker}-${generation}-${process.pid}.pid`);
    const tail = new Tail(TAIL_BYTES);
    let child: ResultPromise | undefined;
    let stopped = false;
    let exited = false;
    let stopRequested = false;
    let pendingSignal: NodeJS.Signals | undefined;
    const dropKey = () => {
      deps.keys.delete(generation);
      return Promise.all([rm(keyFile, { force: true }), rm(pidFile, { force: true })]).catch(() => undefined);
    };

    receive((command) => {
      const signal = command.type === 'engine.kill' ? 'SIGKILL' : 'SIGTERM';
      stopRequested = true;
      if (child?.pid !== undefined && !exited) child.kill(signal);
      else pendingSignal = signal;
    });

    const exit = (exitCode: number | null, signal: string | null, extra: string) => {
      if (exited) return;
      exited = true;
      void dropKey();
      void readOomKills()
        .catch(() => null)
        .then((after) => {
          const diagnosis = diagnoseExit({
            worker,
            exitCode,
            signal,
            oomKillsBefore: before,
            oomKillsAfter: after,
            outputTail: `${tail.text()}${extra}`,
            expected: stopRequested,
          });
          if (!stopRequested) deps.log.warn({ worker, generation, exit_code: exitCode, signal, cause: diagnosis.cause, evidence: diagnosis.evidence }, `${role.name} ended`);
          if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode, signal, cause: diagnosis.cause, message: diagnosis.message } });
        });
    };

    let before: number | null = null;
    const run = async () => {
      const binary = await resolveRuntime('llama-server', deps.lookup);
      if (!binary) {
        exited = true;
        const message = runtimeMissingMessage(role.name, ['llama-server'], deps.lookup.env, 'llama-server is not installed (run scripts/build-llama.sh or set SERVICE_DECK_LLAMA_SERVER)');
        if (!stopped) sendBack({ type: 'engine.exited', report: { exitCode: null, signal: null, cause: 'runtime_missing', message } });
        return;
      }
      const [port, oom] = await Promise.all([freePort(), readOomKills().catch(() => null)]);
      before = oom;
      const key = randomBytes(24).toString('base64url');
      await writeFile(keyFile, `${key}\n`, { mode: 0o600, flag: 'w' });
      deps.keys.set(generation, key);
      const command = await diesWithService(binary, role.args(launch, { port, keyFile }), deps.env);
      if (stopped || pendingSignal === 'SIGKILL' || pendingSignal === 'SIGTERM') {
        await dropKey();
        stopRequested = true;
        exit(null, null, '');
        return;
      }
      const env: NodeJS.ProcessEnv = { ...workerEnv(deps.env), CUDA_VISIBLE_DEVICES: launch.gpus.join(',') };
      child = startWorker(command, { ...WORKER_PROCESS, env });
      child.stdout?.on('data', (chunk: Buffer) => tail.push(chunk));
      child.stderr?.on('data', (chunk: Buffer) => tail.push(chunk));
      void child.then((result) => {
        const spawnError = result.failed && result.exitCode === undefined && !result.signal ? `\n${result.shortMessage}` : '';
        exit(result.exitCode ?? null, result.signal ?? null, spawnError);
      });
      if (child.pid === undefined) return;
      // Found by the next start of the service if this one is killed before it can end the worker.
      await writeFile(pidFile, `${child.pid}\n`, { mode: 0o600 }).catch(() => undefined);
      if (!stopped) sendBack({ type: 'engine.spawned', pid: child.pid, port });
      deps.log.info({ worker, generation, pid: child.pid, port, profile: launch.profileId }, `${role.name} started`);
      while (!exited && !stopped && !stopRequested) {
        const status = await healthStatus(port);
        if (status === 200) {
          if (!stopped && !exited) sendBack({ type: 'engine.ready' });
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, HEALTH_POLL_MS));
      }
    };
    run().catch((error: unknown) => {
      deps.log.error({ err: error, worker, generation }, `${role.name} could not be started`);
      if (child?.pid !== undefined && !exited) child.kill('SIGKILL');
      else exit(null, null, `\n${(error as Error).message}`);
    });

    return () => {
      stopped = true;
      if (child?.pid !== undefined && !exited) child.kill('SIGKILL');
      void dropKey();
    };
  });
}
