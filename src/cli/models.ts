// `service-deck models list | hub | pull | profile | cancel`: the model files of the running service
// and a hub's, through its admin API (CONTRACT section 10). `list` shows every file in the model
// folders with its facts and the memory check's forecast; `hub` a repository's files, or one file's
// facts and forecast read from its header; `pull` starts a download in the service and follows it
// until the file is there (exit 0, with the command that makes a profile of it), failed or
// cancelled (exit 1); `profile` makes an unpublished profile of a listed file; `cancel` stops a
// pull. The download is the service's: a Ctrl-C here stops only the following.
import path from 'node:path';
import type { Config } from '../config.js';
import type { ProfileView } from '../store/profile.schema.js';
import type { ModelFileView, ModelFilesView } from '../system/models/modelFiles.js';
import type { ModelFacts } from '../system/models/modelForecast.js';
import type { HubFilesView, HubForecastView } from '../system/models/modelHub.js';
import type { AdminSession } from './admin.js';
import { CliError, UsageError } from './errors.js';
import { pollUntil, untilCtrlC } from './follow.js';
import type { CredentialSource } from './password.js';
import { onTarget, targetLine, type Target } from './target.js';

export const MODEL_COMMANDS = ['list', 'hub', 'pull', 'profile', 'cancel'] as const;
type ModelCommand = (typeof MODEL_COMMANDS)[number];

/** The options only `models` takes, by the subcommands that take each. */
export const MODEL_OPTIONS = { revision: ['hub', 'pull'], forecast: ['hub'], name: ['profile'], context: ['profile'] } as const satisfies Record<string, readonly ModelCommand[]>;
export type ModelOptions = Partial<Record<keyof typeof MODEL_OPTIONS, string>>;

/** A download the service runs (CONTRACT section 10, `GET /api/v1/model-pulls`). */
export interface PullView {
  id: string;
  repo: string;
  revision: string;
  path: string;
  state: 'downloading' | 'done' | 'failed' | 'cancelled';
  bytes_done: number;
  bytes_total: number | null;
  error: string | null;
  /** The file's absolute path once done. */
  file: string | null;
  rate_bytes_per_s: number | null;
  /** Waiting for a download slot: other pulls run. */
  waiting: boolean;
}

export type ModelArgs =
  | { command: 'list' }
  | { command: 'hub'; repo: string; revision: string | undefined; forecast: string | undefined }
  | { command: 'pull'; repo: string; path: string; revision: string | undefined }
  | { command: 'profile'; file: string; name: string; context: number | undefined }
  | { command: 'cancel'; id: string };

const WORDS: Record<ModelCommand, readonly string[]> = { list: [], hub: ['<owner/name>'], pull: ['<owner/name>', '<path>'], profile: ['<file>'], cancel: ['<pull id>'] };

/** Checks the words and options after `models`: the subcommand (list by default), its arguments and options. */
export function parseModelArgs(args: string[], options: ModelOptions): ModelArgs {
  const [word = 'list', ...rest] = args;
  const command = MODEL_COMMANDS.find((c) => c === word);
  if (!command) throw new UsageError(`models: unknown subcommand "${word}" (one of ${MODEL_COMMANDS.join(', ')})`);
  for (const [option, takers] of Object.entries(MODEL_OPTIONS)) {
    if (options[option as keyof ModelOptions] !== undefined && !(takers as readonly string[]).includes(command)) throw new UsageError(`models ${command} takes no --${option}`);
  }
  const wanted = WORDS[command];
  if (rest.length < wanted.length) throw new UsageError(`models ${command} needs ${wanted.join(' ')}`);
  if (rest.length > wanted.length) {
    throw new UsageError(wanted.length === 0 ? `models ${command} takes no argument (got "${rest[0]}")` : `models ${command}: unexpected argument "${rest[wanted.length]}"`);
  }
  const [first = '', second = ''] = rest;
  switch (command) {
    case 'list':
      return { command };
    case 'hub':
      return { command, repo: first, revision: options.revision, forecast: options.forecast };
    case 'pull':
      return { command, repo: first, path: second, revision: options.revision };
    case 'cancel':
      return { command, id: first };
    case 'profile': {
      if (options.name === undefined) throw new UsageError('models profile needs --name NAME (the name clients will ask for)');
      let context: number | undefined;
      if (options.context !== undefined) {
        context = Number(options.context);
        if (!/^\d+$/.test(options.context) || !Number.isSafeInteger(context)) throw new UsageError(`models profile: --context must be a whole number of tokens (got "${options.context}")`);
      }
      return { command, file: first, name: options.name, context };
    }
  }
}

const MIB = 2 ** 20;
const GIB = 2 ** 30;

/** A size in GiB from 1 GiB on, else in MiB. */
export function size(bytes: number): string {
  return bytes >= GIB ? `${(bytes / GIB).toFixed(1)} GiB` : `${(bytes / MIB).toFixed(1)} MiB`;
}

/** A parameter count as people write it: 1.5B, 494M, 12K. */
function parameters(count: number): string {
  for (const [unit, scale] of [['T', 1e12], ['B', 1e9], ['M', 1e6], ['K', 1e3]] as const) if (count >= scale) return `${Number((count / scale).toFixed(1))}${unit}`;
  return String(count);
}

/** A model's facts in a few words: architecture, parameters, quantization, context; what the header does not say is left out. */
export function factsText(facts: ModelFacts): string {
  return [
    facts.architecture,
    facts.parameters === null ? null : `${parameters(facts.parameters)} parameters`,
    facts.quantization,
    facts.context_length === null ? null : `${facts.context_length} tokens`,
  ]
    .filter((part): part is string => part !== null)
    .join(', ');
}

/** One model file in a line: path, size, format and facts, then the forecast's sentence or the error. */
export function fileLine(file: ModelFileView): string {
  const facts = file.facts ? `, ${factsText(file.facts)}` : '';
  const tail = file.forecast ? `: ${file.forecast.summary}` : file.error ? `: error: ${file.error}` : '';
  return `${file.path} (${size(file.bytes)}, ${file.format}${facts})${tail}`;
}

/** A pull's progress in one line, for a terminal that rewrites it in place (percent, MiB of MiB, MiB/s) or a log. */
export function pullLine(pull: PullView): string {
  const head = `${pull.repo}/${pull.path}`;
  switch (pull.state) {
    case 'done':
      return `${head}: done, ${size(pull.bytes_done)}`;
    case 'failed':
    case 'cancelled':
      return `${head}: ${pull.state}${pull.error ? `: ${pull.error}` : ''}`;
    case 'downloading': {
      if (pull.waiting) return `${head}: waiting for a download slot`;
      const done = (pull.bytes_done / MIB).toFixed(1);
      const bytes = pull.bytes_total ? `${Math.floor((100 * pull.bytes_done) / pull.bytes_total)}% ${done} MiB of ${(pull.bytes_total / MIB).toFixed(1)} MiB` : `${done} MiB`;
      const rate = pull.rate_bytes_per_s ? `, ${(pull.rate_bytes_per_s / MIB).toFixed(1)} MiB/s` : '';
      return `${head}: ${bytes}${rate}`;
    }
  }
}

/** A profile name from a file's name: its stem, with what a name may not hold replaced by `-`. */
export function suggestedName(file: string): string {
  const stem = path.basename(file).replace(/\.(gguf|bin)$/i, '').replace(/-0*1-of-\d+$/, '');
  const name = stem.replace(/[^A-Za-z0-9._:/-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 128);
  return name === '' ? 'model' : name;
}

/** A word for a POSIX shell: as it is when it is plain, else in single quotes. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** What a terminal or a log shows of a pull as it goes: the line in place, or a line when the state or the tenth changes. */
export interface PullDisplay {
  show(pull: PullView): void;
  /** Ends the line in place, if any. */
  end(): void;
}

export function pullDisplay(out: { write(text: string): unknown; isTTY?: boolean }): PullDisplay {
  if (out.isTTY) {
    let shown = false;
    return {
      // \r back to the line's start, \x1b[K clears what a longer line before left.
      show: (pull) => ((shown = true), out.write(`\r${pullLine(pull)}\x1b[K`)),
      end: () => void (shown && out.write('\n')),
    };
  }
  let last = '';
  return {
    show: (pull) => {
      const tenth = pull.bytes_total ? Math.floor((10 * pull.bytes_done) / pull.bytes_total) : 0;
      const mark = `${pull.state} ${pull.waiting} ${tenth}`;
      if (mark !== last) out.write(`${pullLine(pull)}\n`);
      last = mark;
    },
    end: () => undefined,
  };
}

function running(target: Target, command: ModelCommand): AdminSession {
  if (target.running) return target.session;
  throw new CliError(`models ${command} needs the running service, and the service of ${target.stateDir} is not running: start it (service-deck serve), then run this again`);
}

const pullsOf = async (session: AdminSession) => (await session.call<{ pulls: PullView[] }>('GET', '/api/v1/model-pulls')).pulls;

/** Starts the pull, follows it to its end, and says what is next; the exit code. */
async function pull(session: AdminSession, args: Extract<ModelArgs, { command: 'pull' }>, print: (line: string) => void, display: PullDisplay): Promise<{ code: number; pull: PullView }> {
  const started = await session.call<PullView>('POST', '/api/v1/model-pulls', { repo: args.repo, revision: args.revision ?? 'main', path: args.path });
  const read = async () => {
    const found = (await pullsOf(session)).find((p) => p.id === started.id);
    if (!found) throw new CliError(`the service no longer lists pull ${started.id}`);
    return found;
  };
  const end = await untilCtrlC((stop) => pollUntil(read, (p) => display.show(p), (p) => p.state !== 'downloading', stop)).finally(() => display.end());
  if (end === null) {
    print(`stopped following; the pull goes on in the service (service-deck models cancel ${started.id} stops it)`);
    return { code: 130, pull: started };
  }
  if (end.state !== 'done') throw new CliError(`the pull of ${end.repo}/${end.path} ended ${end.state}${end.error ? `: ${end.error}` : ''}`);
  return { code: 0, pull: end };
}

export async function modelsCommand(config: Config, args: string[], options: { json: boolean; credential: CredentialSource } & ModelOptions): Promise<number> {
  const parsed = parseModelArgs(args, options);
  return onTarget(config, options.credential, `service-deck models ${parsed.command}`, async (target) => {
    const session = running(target, parsed.command);
    const print = (line: string) => void process.stdout.write(`${line}\n`);
    /** --json: the answer with the state directory and the service, and the exit code. */
    const json = (answer: object, code = 0) => {
      print(JSON.stringify({ state_dir: target.stateDir, service: target.service, ...answer }, null, 2));
      return code;
    };
    if (!options.json) print(targetLine(target));
    switch (parsed.command) {
      case 'list': {
        const listed = await session.call<ModelFilesView>('GET', '/api/v1/model-files');
        if (options.json) return json(listed);
        for (const file of listed.files) print(fileLine(file));
        if (listed.files.length === 0) print('no model files in the model folders (SERVICE_DECK_MODEL_DIRS, default <state>/models)');
        for (const problem of listed.problems) print(`problem: ${problem}`);
        return 0;
      }
      case 'hub': {
        const query = new URLSearchParams({ repo: parsed.repo, revision: parsed.revision ?? 'main' });
        if (parsed.forecast !== undefined) {
          query.set('path', parsed.forecast);
          const remote = await session.call<HubForecastView>('GET', `/api/v1/model-hub/forecast?${query}`);
          if (options.json) return json(remote);
          print(`${parsed.repo}/${parsed.forecast} at ${query.get('revision')}: ${factsText(remote.facts)}${remote.facts.chat_template ? ', with a chat template' : ''}`);
          print(remote.forecast ? `forecast: ${remote.forecast.summary}` : `no forecast: ${remote.error ?? 'the header lacks what the memory check needs'}`);
          return 0;
        }
        const listed = await session.call<HubFilesView>('GET', `/api/v1/model-hub/files?${query}`);
        if (options.json) return json(listed);
        print(`${listed.repo} at ${listed.revision}: ${listed.files.length} file${listed.files.length === 1 ? '' : 's'}`);
        for (const file of listed.files) print(`  ${file.path} (${size(file.bytes)}, ${file.format})`);
        return 0;
      }
      case 'pull': {
        if (options.json) {
          const ended = await pull(session, parsed, () => undefined, { show: () => undefined, end: () => undefined });
          return json({ pull: ended.pull }, ended.code);
        }
        const ended = await pull(session, parsed, print, pullDisplay(process.stdout));
        if (ended.code !== 0 || ended.pull.file === null) return ended.code;
        print(`the file: ${ended.pull.file}`);
        print(`next: service-deck models profile ${shellWord(ended.pull.file)} --name ${shellWord(suggestedName(ended.pull.file))}`);
        return 0;
      }
      case 'profile': {
        const body = { path: path.resolve(parsed.file), name: parsed.name, ...(parsed.context === undefined ? {} : { context: parsed.context }) };
        const profile = await session.call<ProfileView>('POST', '/api/v1/model-files/profile', body);
        if (options.json) return json({ profile });
        const context = profile.category === 'chat' ? `, context ${profile.params.context} tokens` : '';
        print(`created profile ${profile.id}: ${profile.name} (${profile.category}${context}), not published`);
        print(`publish it: service-deck profiles publish ${shellWord(profile.name)}`);
        return 0;
      }
      case 'cancel': {
        const cancelled = await session.call<PullView>('POST', `/api/v1/model-pulls/${encodeURIComponent(parsed.id)}/cancel`, {});
        if (options.json) return json({ pull: cancelled });
        print(pullLine(cancelled));
        return 0;
      }
    }
  });
}
