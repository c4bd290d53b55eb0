// The one process protocol of every engine (llama-server for chat and the prompt enhancer, sd-cli,
// pocketsphinx and whisper.cpp, a speech server, and the engines that keep no process: espeak-ng,
// whisper-cli). A worker machine's `engine` actor is `engineActor(hooks)`: the hooks say what to
// run and when it is ready; the protocol is written once here:
//
// - `prepare()` resolves the program, port and command line; it may find the engine cannot run
//   (a runtime missing: reported at once) or needs no process (ready at once).
// - The process is spawned with WORKER_PROCESS, recorded for the next start's sweep
//   (ProcessRecord: its pid file and the tag in its environment), and reported with
//   `engine.spawned` (pid, port). It is ready when `answers(port)` says so (polled) or when the
//   hooks call `ready()` (a line it printed), or when it exits as the hooks accept (an image
//   written).
// - `engine.stop` sends SIGTERM, `engine.kill` SIGKILL, to its process group where it has one (the
//   machine times the grace). A stop before there is a process reports `stopped` at once, and what
//   the preparation made is dropped once it has answered.
// - When the process ends, its output tail (RAM only, never logged) and the cgroup's OOM kill
//   count before and after are diagnosed (src/system/diagnose.ts): `engine.exited` carries the
//   likely cause; a failure the hooks named themselves (`fail()`) wins over the diagnosis.
// - Each start reports its end once and cleans up once; nothing is reported after the actor stops
//   (the machine moved on), and the actor's stop kills a process still running.
import type { Options, Result, ResultPromise } from 'execa';
import { fromCallback, type EventObject } from 'xstate';
import type { EngineCommand, EngineInput, LaunchBase, LifecycleEvent } from '../../machines/worker/lifecycle.js';
import type { ExitReport } from '../../machines/worker.types.js';
import { readOomKills } from '../adapters/memory.js';
import { startWorker, type WorkerCommand } from '../adapters/parentDeath.js';
import type { WorkerKind } from '../system/diagnose.js';
import type { Logger } from '../system/observe/log.js';
import type { StderrLines } from '../system/observe/stderrLines.js';
import { ProcessRecord } from './leftovers.js';
import { endReport, Tail, WORKER_PROCESS } from './process.js';

/** What an engine actor sends its machine. */
/** `engine.ready`'s `loadMs`: from the start's preparation to ready, as measured here (the supervisor's swap bound reads it). */
export type EngineEvent = { type: 'engine.spawned'; pid: number; port?: number } | { type: 'engine.ready'; loadMs?: number } | { type: 'engine.exited'; report: ExitReport };

/** How much of a process's output is kept for the diagnosis (RAM only). */
const TAIL_BYTES = 16 * 1024;
const READY_POLL_MS = 100;

/** A process to run. */
export interface EngineSpawn {
  command: WorkerCommand;
  /** Over WORKER_PROCESS (env, cwd, stdin); `env` gets the record's tag added. */
  options: Options & { env: NodeJS.ProcessEnv };
  port?: number;
  /** Signalled and recorded as its whole process group (a wrapper and what it started). */
  group?: boolean;
}

/** What `prepare` found: a process to run, an engine ready without one, or why it cannot run. */
export type Prepared = EngineSpawn | { ready: true } | { unable: { cause: string; message: string } };

/** What the hooks may do to the running start. */
export interface EngineHandle {
  /** The engine takes jobs now. */
  ready(): void;
  /** Ends the process with this failure as its report (the diagnosis is not asked). */
  fail(message: string): void;
  /** Keeps output for the diagnosis (for the hooks that feed the tail themselves). */
  keep(chunk: Buffer): void;
  /** The start is over or being stopped: the hooks should stop waiting. */
  readonly over: boolean;
}

/** Which engine it is: the same for every start. */
export interface EngineInfo {
  worker: WorkerKind;
  /** How the logs and reports name it ("chat worker"). */
  name: string;
  log: Logger;
  /** The runtime folder for the process records (none: the process is not recorded). */
  runtimeDir: string | undefined;
  /** A start failure's detail may quote the command line (a prompt): only its name is logged. */
  privateCommand?: boolean;
  /** Where the process's stderr lines are kept for the console, redacted (src/system/observe/stderrLines.ts). */
  stderr?: StderrLines;
}

/** What one start runs; `engineActor` asks for them with each start's launch. */
export interface StartHooks {
  prepare(): Promise<Prepared>;
  /** The process runs: watch its output (both streams go to the tail unless `tail` says stderr). */
  spawned?(child: ResultPromise, engine: EngineHandle): void;
  /** Polled after the spawn until true: the engine answers on its port. */
  answers?(port: number, engine: EngineHandle): Promise<boolean>;
  /** Instead of the diagnosis when the process ended: 'ready' (its work is done), a report, or undefined. */
  exitedAs?(result: Result, stopRequested: boolean): Promise<'ready' | ExitReport | undefined>;
  /** Which output the tail keeps by itself: both streams (the default) or stderr only. */
  tail?: 'both' | 'stderr';
  /** The tail as the diagnosis reads it (the image worker takes the prompt out). */
  tailText?(text: string): string;
  /** The start is over (ended, stopped, or the actor gone): forget what it left (keys, links). Called once, never while `prepare` runs. */
  cleanup?(): void;
}

/** The engine actor of a worker machine: each start runs the hooks made for its launch. */
export function engineActor<L extends LaunchBase, E extends EventObject = LifecycleEvent>(info: EngineInfo, hooks: (launch: L) => StartHooks) {
  return fromCallback<EngineCommand, EngineInput<L>, E>(({ input, sendBack, receive }) => runEngine({ ...info, ...hooks(input.launch) }, input.launch, (event) => sendBack(event as E), receive));
}

/** One start of an engine, as `engineActor` runs it; returns the actor's stop. */
export function runEngine(
  hooks: EngineInfo & StartHooks,
  launch: LaunchBase,
  sendBack: (event: EngineEvent) => void,
  receive: (listener: (command: EngineCommand) => void) => void,
): () => void {
  const { worker } = hooks;
  const { generation } = launch;
  const tail = new Tail(TAIL_BYTES);
  let child: ResultPromise | undefined;
  let group = false;
  /** The actor was stopped: nothing more is reported. */
  let stopped = false;
  /** The process is gone. */
  let exited = false;
  /** The end of this start was reported (or the actor stopped). */
  let reported = false;
  let stopRequested = false;
  /** Why we ended it ourselves, reported as its failure. */
  let failure: string | undefined;
  let oomBefore: number | null = null;
  /** `prepare()` has not answered yet: what it makes is not known, so its cleanup waits for it. */
  let preparing = true;
  let cleanedUp = false;

  const send = (event: EngineEvent) => {
    if (!stopped && !reported) sendBack(event);
  };
  /** Forgets what the start made, once, and only when the preparation is over (a stop during it is cleaned after it). */
  const cleanup = () => {
    if (preparing || cleanedUp) return;
    cleanedUp = true;
    hooks.cleanup?.();
  };
  const end = (report: ExitReport) => {
    if (reported) return;
    send({ type: 'engine.exited', report });
    reported = true;
    cleanup();
  };
  const signal = (name: NodeJS.Signals) => {
    if (!child?.pid || exited) return;
    if (group) {
      try {
        process.kill(-child.pid, name);
        return;
      } catch {
        // No group (any longer): the process itself.
      }
    }
    child.kill(name);
  };
  const began = performance.now();
  const ready = () => send({ type: 'engine.ready', loadMs: Math.round(performance.now() - began) });
  const handle: EngineHandle = {
    ready: () => {
      if (!exited && !stopRequested) ready();
    },
    fail: (message) => {
      failure = message;
      stopRequested = true;
      signal('SIGKILL');
    },
    keep: (chunk) => tail.push(chunk),
    get over() {
      return stopped || reported || exited || stopRequested;
    },
  };

  receive((command) => {
    stopRequested = true;
    if (child && !exited) signal(command.type === 'engine.kill' ? 'SIGKILL' : 'SIGTERM');
    // No process (yet, any more, or ever): nothing is left to end.
    else end({ exitCode: child ? 0 : null, signal: null, cause: 'stopped', message: `The ${hooks.name} was stopped as requested.` });
  });

  const run = async () => {
    const prepared = await hooks.prepare().finally(() => {
      preparing = false;
    });
    // The stop was reported when it came; what the preparation made goes now.
    if (stopped || stopRequested) return cleanup();
    if ('unable' in prepared) return end({ exitCode: null, signal: null, ...prepared.unable });
    if ('ready' in prepared) return ready();
    oomBefore = await readOomKills().catch(() => null);
    if (stopped || stopRequested) return cleanup();
    group = prepared.group === true;
    const record = hooks.runtimeDir ? new ProcessRecord(hooks.runtimeDir, worker, generation) : undefined;
    child = startWorker(prepared.command, { ...WORKER_PROCESS, ...prepared.options, env: { ...prepared.options.env, ...record?.env() } });
    if (child.pid !== undefined) void record?.write(child.pid, group);
    if (hooks.tail !== 'stderr') child.stdout?.on('data', (chunk: Buffer) => tail.push(chunk));
    child.stderr?.on('data', (chunk: Buffer) => tail.push(chunk));
    // The console's lines: the start's own filter first (the image worker's prompt), then the redaction.
    const { stderr, tailText } = hooks;
    if (stderr) {
      stderr.begin(generation, tailText ? (line) => tailText(line) || null : undefined);
      child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
    }
    hooks.spawned?.(child, handle);
    void child.then(async (result) => {
      exited = true;
      void record?.remove();
      const instead = await hooks.exitedAs?.(result, stopRequested);
      if (instead === 'ready') return ready();
      if (instead) return end(instead);
      const exitCode = result.exitCode ?? null;
      const exitSignal = result.signal ?? null;
      if (failure) return end({ exitCode, signal: exitSignal, cause: 'unclear', message: failure });
      const spawnError = result.failed && result.exitCode === undefined && !result.signal ? `\n${result.shortMessage}` : '';
      const text = `${tail.text()}${spawnError}`;
      const { report, evidence } = await endReport(worker, result, { oomKillsBefore: oomBefore, outputTail: hooks.tailText ? hooks.tailText(text) : text, expected: stopRequested });
      if (!stopRequested) hooks.log.warn({ worker, generation, exit_code: exitCode, signal: exitSignal, cause: report.cause, evidence }, `${hooks.name} ended`);
      return end(report);
    });
    if (child.pid === undefined) return undefined;
    send({ type: 'engine.spawned', pid: child.pid, ...(prepared.port === undefined ? {} : { port: prepared.port }) });
    hooks.log.info({ worker, generation, pid: child.pid, ...(prepared.port === undefined ? {} : { port: prepared.port }), profile: launch.profileId }, `${hooks.name} started`);
    const { answers } = hooks;
    if (!answers || prepared.port === undefined) return undefined;
    while (!handle.over) {
      if (await answers(prepared.port, handle)) return handle.ready();
      await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
    }
    return undefined;
  };
  run().catch((error: unknown) => {
    if (hooks.privateCommand) hooks.log.error({ worker, generation, error: (error as Error).name }, `${hooks.name} could not be started`);
    else hooks.log.error({ err: error, worker, generation }, `${hooks.name} could not be started`);
    if (child && !exited) return signal('SIGKILL');
    end({ exitCode: null, signal: null, cause: 'unclear', message: `The ${hooks.name} could not be started${hooks.privateCommand ? '' : `: ${(error as Error).message}`}.` });
    // A stop during a preparation that failed: its end was reported already, what it made goes now.
    return cleanup();
  });

  return () => {
    stopped = true;
    if (child && !exited) signal('SIGKILL');
    reported = true;
    cleanup();
  };
}
