// Worker processes die with the service (issue 15 item 9): a worker is started as
// `setpriv --pdeathsig KILL -- <program> <args>`. util-linux's setpriv asks the kernel
// (PR_SET_PDEATHSIG) to send the process SIGKILL when the thread that spawned it ends, then execs
// the program: the pid, the command line (/proc/<pid>/cmdline) and the environment are the
// worker's own, so the leftover sweeps still know it. Node spawns child processes from its main
// thread, whose end is the service's end, a SIGKILL or an OOM kill included; no GPU memory, port
// or key file stays held by a worker of a dead service.
//
// The signal survives exec (of anything but a set-user-ID program), not fork: processes a worker
// starts itself (the children of a speech server command's wrapper) are not covered, and a
// service killed in the instant between spawn and setpriv's prctl misses it too. The next start's
// sweeps (sweepLeftovers in src/workers/llamaServer.ts, src/workers/leftovers.ts) stay the net.
//
// setpriv is found by SERVICE_DECK_SETPRIV (a path, or `off`: workers start as they are), else on
// PATH; it must know --pdeathsig (util-linux 2.33 or newer), which one run of it proves. Without
// one the service logs at its start that workers may outlive a killed service.
import { execa } from 'execa';
import { findCommand, isExecutableFile } from './runtimes.js';

export const SETPRIV_VARIABLE = 'SERVICE_DECK_SETPRIV';

/** The launcher found for each setting (variable and PATH): resolved and proven once. */
const found = new Map<string, Promise<string | undefined>>();

async function provenLauncher(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  const setting = env[SETPRIV_VARIABLE];
  if (setting === 'off') return undefined;
  const binary = await findCommand(setting || 'setpriv', env);
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

/**
 * The command that runs `program args` as a worker that dies with the service: as it is without a
 * launcher, and also when the program is missing, so that its spawn error stays its own (ENOENT)
 * rather than setpriv's exit 127.
 */
export async function diesWithService(program: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<[string, string[]]> {
  const launcher = await parentDeathLauncher(env);
  return launcher && (await isExecutableFile(program)) ? [launcher, ['--pdeathsig', 'KILL', '--', program, ...args]] : [program, [...args]];
}
