// `service-deck enhancers [list|install <t2i|i2i>|cancel]`: the prompt enhancers of the running
// service through its admin API (CONTRACT section 8). `install` starts the download in the service
// and follows it: a line per file and per tenth of it, until the task is installed (exit 0), failed
// or cancelled (exit 1). The download is the service's: a Ctrl-C here stops only the following, and
// `enhancers cancel` stops the download.
import type { Config } from '../config.js';
import type { InstallView } from '../system/observe/console.types.js';
import { ENHANCER_TASKS, type EnhancerTask } from '../store/enhancers.js';
import type { AdminSession } from './admin.js';
import { CliError, UsageError } from './errors.js';
import { FOLLOW_INTERVAL_MS, pollUntil, untilCtrlC } from './follow.js';
import type { CredentialSource } from './password.js';
import { onTarget, targetLine, type Target } from './target.js';

export const ENHANCER_COMMANDS = ['list', 'install', 'cancel'] as const;
type EnhancerCommand = (typeof ENHANCER_COMMANDS)[number];

type Installs = Record<EnhancerTask, InstallView>;

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

function bytesOf(view: InstallView): string {
  if (view.bytes_total === null || view.bytes_total === 0) return mib(view.bytes_done);
  return `${mib(view.bytes_done)} of ${mib(view.bytes_total)} (${Math.floor((100 * view.bytes_done) / view.bytes_total)}%)`;
}

/** One task in a line: its repository, state, bytes and error. */
export function installLine(task: EnhancerTask, view: InstallView): string {
  const head = `${task}: ${view.repo} ${view.state}`;
  // Before its first file the install asks the hub for the sizes and checks the disk space.
  if (view.state === 'installing' && view.file === null) return `${head}: checking the files on the hub and the free disk space`;
  const file = view.file ? ` ${view.file}` : '';
  const bytes = view.state === 'not_installed' && view.bytes_done === 0 ? '' : `, ${bytesOf(view)}`;
  return `${head}${file}${bytes}${view.error ? `: ${view.error}` : ''}`;
}

function running(target: Target, command: EnhancerCommand): AdminSession {
  if (target.running) return target.session;
  throw new CliError(
    `enhancers ${command} needs the running service, and the service of ${target.stateDir} is not running: start it (service-deck serve), then run this again`,
  );
}

const installsOf = (session: AdminSession) => session.call<Installs>('GET', '/api/v1/prompt-enhancers');

/**
 * Follows an install until it is no longer `installing`, printing a line when the file changes and
 * at each tenth of a file's bytes; stops early (null) when `stop` aborts.
 */
export function follow(
  read: () => Promise<InstallView>,
  print: (line: string) => void,
  task: EnhancerTask,
  stop: AbortSignal,
  intervalMs = FOLLOW_INTERVAL_MS,
): Promise<InstallView | null> {
  let last = '';
  const show = (view: InstallView) => {
    const tenth = view.bytes_total ? Math.floor((10 * view.bytes_done) / view.bytes_total) : 0;
    const mark = `${view.state} ${view.file ?? ''} ${tenth}`;
    if (mark !== last) print(installLine(task, view));
    last = mark;
  };
  return pollUntil(read, show, (view) => view.state !== 'installing', stop, intervalMs);
}

async function install(session: AdminSession, task: EnhancerTask, print: (line: string) => void): Promise<number> {
  await session.call('POST', '/api/v1/prompt-enhancers/install', { task });
  // Ctrl-C ends the following, not the download: the session is closed and the command says so.
  const end = await untilCtrlC((stop) => follow(async () => (await installsOf(session))[task], print, task, stop));
  if (end === null) {
    print(`stopped following; the install goes on in the service (service-deck enhancers shows it, service-deck enhancers cancel stops it)`);
    return 130;
  }
  if (end.state === 'installed') return 0;
  throw new CliError(`the ${task} install ended ${end.state}${end.error ? `: ${end.error}` : ''}`);
}

/** Checks the words after `enhancers`: the subcommand (list by default) and the task of install. */
export function parseEnhancerArgs(args: string[]): { command: EnhancerCommand; task: EnhancerTask | undefined } {
  const [word = 'list', task, ...extra] = args;
  const command = ENHANCER_COMMANDS.find((c) => c === word);
  if (!command) throw new UsageError(`enhancers: unknown subcommand "${word}" (one of ${ENHANCER_COMMANDS.join(', ')})`);
  if (command !== 'install') {
    if (task !== undefined) throw new UsageError(`enhancers ${command} takes no argument (got "${task}")`);
    return { command, task: undefined };
  }
  const known = ENHANCER_TASKS.find((t) => t === task);
  if (!known) throw new UsageError(`enhancers install needs the task: ${ENHANCER_TASKS.join(' or ')}${task === undefined ? '' : ` (got "${task}")`}`);
  if (extra.length > 0) throw new UsageError(`enhancers install: unexpected argument "${extra[0]}"`);
  return { command, task: known };
}

export async function enhancersCommand(config: Config, args: string[], options: { json: boolean; credential: CredentialSource }): Promise<number> {
  const { command, task } = parseEnhancerArgs(args);
  return onTarget(config, options.credential, `service-deck enhancers ${command}`, async (target) => {
    const session = running(target, command);
    const print = (line: string) => void process.stdout.write(`${line}\n`);
    if (!options.json) print(targetLine(target));
    if (command === 'install' && task) {
      if (!options.json) return install(session, task, print);
      const code = await install(session, task, () => undefined);
      print(JSON.stringify({ state_dir: target.stateDir, service: target.service, ...(await installsOf(session)) }, null, 2));
      return code;
    }
    const installs = command === 'cancel' ? await session.call<Installs & { cancelled: boolean }>('POST', '/api/v1/prompt-enhancers/cancel', {}) : await installsOf(session);
    if (options.json) {
      print(JSON.stringify({ state_dir: target.stateDir, service: target.service, ...installs }, null, 2));
      return 0;
    }
    if ('cancelled' in installs) print(installs.cancelled ? 'cancelled the running install; its partial files are removed' : 'no install was running');
    for (const t of ENHANCER_TASKS) print(installLine(t, installs[t]));
    return 0;
  });
}
