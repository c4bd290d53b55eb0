// Worker processes die with the service, by two means that cover each other:
//
// 1. The worker itself: it is started as `setpriv --pdeathsig KILL -- <program> <args>`.
//    util-linux's setpriv asks the kernel (PR_SET_PDEATHSIG) to send the process SIGKILL when the
//    thread that spawned it ends, then execs the program: the pid, the command line
//    (/proc/<pid>/cmdline) and the environment are the worker's own, so the leftover sweeps still
//    know it. Node spawns child processes from its main thread, whose end is the service's end, a
//    SIGKILL or an OOM kill included. The signal survives exec, not fork.
//
// 2. Whatever the worker starts itself (a speech server command `sh -c 'server … & wait'` and the
//    server behind it): each worker runs in its own process group (a new session, `detached`), and
//    a watchdog holds the group's number. The watchdog is one small `/bin/sh` per service process
//    (WATCHDOG_SCRIPT below, `service-deck-watchdog` in ps), in a session of its own, deaf to
//    SIGHUP, SIGINT and SIGTERM, reading lines `+ <group>` / `- <group>` from a pipe whose only
//    writer is the service. When the service ends, however it ends, the kernel closes that pipe;
//    the watchdog reads end-of-file, sends SIGKILL to every group still registered and exits. No
//    polling, no cgroup (cgroup v2 is not writable in most containers, this one included), nothing
//    that outlives the service.
//
// A worker's group is registered right after its spawn and released when the worker has exited:
// then the service itself sends SIGKILL to the group, so a grandchild left behind by a worker that
// ended (a normal unload, a wrapper that exited, a crash) does not linger either. A group's number
// is its worker's pid, which the kernel gives out again only once the group is empty: the kill
// reaches the worker's own processes or no one. What is not covered: a service killed in the
// instant between a spawn and setpriv's prctl or the group's registration, and a watchdog killed
// on its own (a new one is started at the next worker start and told every live group). The next
// start's sweep (src/workers/leftovers.ts) stays the net for these.
//
// setpriv is found by SERVICE_DECK_SETPRIV (a path), else on PATH; it must know --pdeathsig
// (util-linux 2.33 or newer), which one run of it proves. Without one the service logs at its start
// that only the watchdog ends its workers. SERVICE_DECK_SETPRIV=off turns both off: workers start
// as they are, in the service's process group (the tests of the next-start sweep use it).
import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { execa, type Options, type ResultPromise } from 'execa';
import { findCommand, isExecutableFile } from './runtimes.js';

export const SETPRIV_VARIABLE = 'SERVICE_DECK_SETPRIV';

/** Whether the setting turns the binding of workers to the service's life off. */
export const bindingOff = (env: NodeJS.ProcessEnv) => env[SETPRIV_VARIABLE] === 'off';

/** The launcher found for each setting (variable and PATH): resolved and proven once. */
const found = new Map<string, Promise<string | undefined>>();

async function provenLauncher(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  if (bindingOff(env)) return undefined;
  const binary = await findCommand(env[SETPRIV_VARIABLE] || 'setpriv', env);
  if (!binary) return undefined;
  const probe = await execa(binary, ['--pdeathsig', 'KILL', '--', binary, '--version'], { env: { PATH: env.PATH ?? '' }, extendEnv: false, reject: false, timeout: 10_000, stdin: 'ignore' });
  return probe.exitCode === 0 ? binary : undefined;
}

/** The setpriv that binds workers to the service's life, or undefined when there is none. */
export function parentDeathLauncher(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  const key = `${env[SETPRIV_VARIABLE] ?? ''}\0${env.PATH ?? ''}`;
  let launcher = found.get(key);
  if (!launcher) {
    launcher = provenLauncher(env).catch(() => undefined);
    found.set(key, launcher);
  }
  return launcher;
}

/** A worker's command line, and whether it runs in its own process group that the watchdog ends. */
export interface WorkerCommand {
  file: string;
  args: string[];
  grouped: boolean;
}

/**
 * The command that runs `program args` as a worker that dies with the service: through setpriv
 * where there is one, as it is without (and when the program is missing, so that its spawn error
 * stays its own (ENOENT) rather than setpriv's exit 127). Start it with startWorker.
 */
export async function diesWithService(program: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<WorkerCommand> {
  const launcher = await parentDeathLauncher(env);
  const grouped = !bindingOff(env);
  return launcher && (await isExecutableFile(program))
    ? { file: launcher, args: ['--pdeathsig', 'KILL', '--', program, ...args], grouped }
    : { file: program, args: [...args], grouped };
}

/**
 * Reads `+ <group>` and `- <group>` lines until end-of-file (the service is gone), then kills every
 * group still registered. `kill -s KILL -- -<group>` is the POSIX form that dash, bash and busybox
 * all read as a process group.
 */
export const WATCHDOG_SCRIPT = `trap '' HUP INT TERM PIPE
groups=' '
while read -r op group; do
  case $group in ''|*[!0-9]*) continue ;; esac
  case $op in
    +) groups="$groups$group " ;;
    -) case $groups in *" $group "*) groups="\${groups%% $group *} \${groups#* $group }" ;; esac ;;
  esac
done
for group in $groups; do kill -s KILL -- "-$group" 2>/dev/null; done
`;

/** The watchdog's name in the process list (its argv[0]). */
export const WATCHDOG_NAME = 'service-deck-watchdog';

/** The service's watchdog: started with the first grouped worker, started again if it was killed. */
class GroupWatchdog {
  readonly #groups = new Set<number>();
  #child: ChildProcess | undefined;

  /** The running watchdog, started (and told every live group) when there is none. */
  #watchdog(): ChildProcess | undefined {
    if (this.#child) return this.#child;
    let child: ChildProcess;
    try {
      child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT], { argv0: WATCHDOG_NAME, detached: true, stdio: ['pipe', 'ignore', 'ignore'], env: {} });
    } catch {
      return undefined;
    }
    const gone = () => {
      if (this.#child === child) this.#child = undefined;
    };
    child.once('error', gone);
    child.once('exit', gone);
    child.stdin?.on('error', gone);
    // Neither the watchdog nor its pipe keeps the service's event loop alive.
    child.unref();
    (child.stdin as Socket | null)?.unref();
    this.#child = child;
    for (const group of this.#groups) child.stdin?.write(`+ ${group}\n`);
    return child;
  }

  /** The pid of the running watchdog (tests and diagnostics). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  watch(group: number): void {
    const watchdog = this.#watchdog();
    this.#groups.add(group);
    watchdog?.stdin?.write(`+ ${group}\n`);
  }

  release(group: number): void {
    if (!this.#groups.delete(group)) return;
    this.#child?.stdin?.write(`- ${group}\n`);
  }
}

const watchdog = new GroupWatchdog();

/** The pid of this service's watchdog, while one runs. */
export function watchdogPid(): number | undefined {
  return watchdog.pid;
}

/**
 * Spawns a worker command (from diesWithService) with execa. A grouped one gets its own process
 * group, watched while it lives; when it has ended, whatever is left of its group is killed and the
 * group released.
 */
export function startWorker<O extends Options>(command: WorkerCommand, options: O): ResultPromise<O> {
  // `detached` changes nothing in the result's type: the casts only tell TypeScript so.
  const child = execa(command.file, command.args, command.grouped ? { ...options, detached: true } : options) as unknown as ResultPromise<O>;
  const group = child.pid;
  if (!command.grouped || group === undefined) return child;
  watchdog.watch(group);
  const ended = () => {
    try {
      process.kill(-group, 'SIGKILL');
    } catch {
      // The group is empty: nothing was left behind.
    }
    watchdog.release(group);
  };
  // On the worker's exit, not on its promise: that waits for its output pipes, which a grandchild
  // left behind may hold open.
  (child as unknown as ChildProcess).once('exit', ended);
  return child;
}
