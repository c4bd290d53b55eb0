// `service-deck profiles [list|show|create|edit|set|delete|publish|unpublish]`: the profiles of a
// state directory with their publication and blockers. list and show work on a running service
// (admin API) and on a stopped one (its files, blockers computed by the catalog). The others change
// what the running service holds or serves, so they go through its profile CRUD and publication
// routes (CONTRACT section 4): the service alone writes profiles/ and endpoint.json. An edit sends
// the revision it was read at, so a change made meanwhile (in the console) is refused, not lost.
import { readFile } from 'node:fs/promises';
import type { Config } from '../config.js';
import type { ProfileView } from '../store/profile.schema.js';
import { CliError, UsageError } from './errors.js';
import { readStdin, type CredentialSource } from './password.js';
import { onTarget, targetLine, type Target } from './target.js';

export const PROFILE_COMMANDS = ['list', 'show', 'create', 'edit', 'set', 'delete', 'publish', 'unpublish'] as const;
type ProfileCommand = (typeof PROFILE_COMMANDS)[number];

async function listOf(target: Target): Promise<ProfileView[]> {
  if (!target.running) return target.profiles();
  return (await target.session.call<{ profiles: ProfileView[] }>('GET', '/api/v1/profiles')).profiles;
}

/** The profile a command names: by id first, else by its (unique) name. */
function find(profiles: ProfileView[], ref: string, stateDir: string): ProfileView {
  const found = profiles.find((p) => p.id === ref) ?? profiles.find((p) => p.name === ref);
  if (!found) throw new CliError(`no profile with the id or name "${ref}" in ${stateDir} (service-deck profiles list shows them)`);
  return found;
}

const stateOf = (p: ProfileView) => (p.blockers.length === 0 ? 'ready' : `blocked: ${p.blockers.join('; ')}`);

/** Rows in columns as wide as their widest cell; the last column runs on. */
function table(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  '));
}

function formatList(profiles: ProfileView[]): string[] {
  if (profiles.length === 0) return ['no profiles yet (create one with service-deck profiles create --file profile.json, in the console or through POST /api/v1/profiles)'];
  return table([['ID', 'NAME', 'CATEGORY', 'PUBLISHED', 'STATE'], ...profiles.map((p) => [p.id, p.name, p.category, p.published ? 'yes' : 'no', stateOf(p)])]);
}

function formatShow(p: ProfileView): string[] {
  const indent = (text: string) => text.split('\n').map((line) => `  ${line}`);
  return [
    `id:         ${p.id}`,
    `name:       ${p.name}`,
    `category:   ${p.category}`,
    `revision:   ${p.revision}`,
    `published:  ${p.published ? 'yes' : 'no'}`,
    `executable: ${p.executable ? 'yes' : 'no'}`,
    ...(p.blockers.length > 0 ? ['blockers:', ...p.blockers.map((b) => `  - ${b}`)] : []),
    ...(p.notices.length > 0 ? ['notices:', ...p.notices.map((n) => `  - ${n}`)] : []),
    'params:',
    ...indent(JSON.stringify(p.params, null, 2)),
    ...(p.prompt_enhancer ? ['prompt_enhancer:', ...indent(JSON.stringify(p.prompt_enhancer, null, 2))] : []),
  ];
}

/** The running service's session; a command that changes something refuses a stopped service. */
function running(target: Target, command: ProfileCommand): Extract<Target, { running: true }> {
  if (target.running) return target;
  throw new CliError(
    `profiles ${command} needs the running service, and the service of ${target.stateDir} is not running: start it (service-deck serve), then run this again`,
  );
}

const labelOf = (p: Pick<ProfileView, 'id' | 'name' | 'category'>) => `${p.name} (${p.id}, ${p.category})`;

/** Publishes or unpublishes through the running service and says what changed. */
async function publish(target: Target, ref: string, enabled: boolean) {
  const verb = enabled ? 'publish' : 'unpublish';
  const { session } = running(target, verb);
  const before = await listOf(target);
  const profile = find(before, ref, target.stateDir);
  const answer = await session.call<{ published: string[]; profile: ProfileView }>('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled });
  const names = new Map(before.map((p) => [p.id, p.name]));
  const label = labelOf(profile);
  const lines = [profile.published === enabled ? `${label} was already ${verb}ed` : `${verb}ed ${label}`];
  for (const gone of before.filter((p) => p.published && p.id !== profile.id && !answer.published.includes(p.id))) {
    lines.push(`unpublished ${gone.name} (${gone.id}): at most one image profile is published`);
  }
  if (enabled && answer.profile.blockers.length > 0) {
    lines.push(`it stays out of the model lists until its blockers are gone: ${answer.profile.blockers.join('; ')}`);
  }
  lines.push(`published now: ${answer.published.map((id) => names.get(id) ?? id).join(', ') || 'none'}`);
  return { lines, json: { published: answer.published, profile: answer.profile } };
}

/**
 * `key=value` words of `profiles set`: a dotted path into the profile (`name`, `params.context`)
 * and a value read as JSON when it is JSON (`8192`, `true`, `["English"]`), else as the text itself.
 */
export function parseAssignment(word: string): { path: string[]; value: unknown } {
  const at = word.indexOf('=');
  const path = word.slice(0, Math.max(at, 0)).split('.');
  if (at <= 0 || path.some((key) => key === '')) throw new UsageError(`profiles set: "${word}" is not key=value (e.g. params.context=8192)`);
  // Names every plain object has are no profile field: they would reach the object's prototype.
  const inherited = path.find((key) => key in Object.prototype || key === 'prototype');
  if (inherited !== undefined) throw new UsageError(`profiles set: "${inherited}" is not a profile field`);
  const text = word.slice(at + 1);
  try {
    return { path, value: JSON.parse(text) as unknown };
  } catch {
    return { path, value: text };
  }
}

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The profile with each assignment applied: objects on the way are copied, missing ones made. */
function assign(profile: Json, assignments: Array<{ path: string[]; value: unknown }>): Json {
  const root: Json = structuredClone(profile);
  for (const { path, value } of assignments) {
    let node = root;
    for (const key of path.slice(0, -1)) {
      const next = node[key];
      if (next !== undefined && !isObject(next)) throw new CliError(`profiles set ${path.join('.')}: ${key} is not an object in this profile`);
      node = next ?? (node[key] = {});
    }
    node[path.at(-1) ?? ''] = value;
  }
  return root;
}

/** The profile a file holds (`-`: standard input), as JSON; what is wrong with it is said plainly. */
async function readProfileFile(file: string): Promise<Json> {
  const where = file === '-' ? 'standard input' : file;
  let text: string;
  try {
    text = file === '-' ? await readStdin() : await readFile(file, 'utf8');
  } catch (error) {
    throw new CliError(`cannot read ${where}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new CliError(`${where} is not JSON: ${(error as Error).message}`);
  }
  if (!isObject(value)) throw new CliError(`${where} holds no profile object (a JSON object with name, category and params)`);
  return value;
}

/** `--json` gives the profile as the service answered; the text names it and shows it whole. */
function changed(first: string, profile: ProfileView) {
  const published = profile.published ? 'published' : 'unpublished (service-deck profiles publish puts it in the model lists)';
  return { lines: [`${first}; ${published}`, ...formatShow(profile)], json: { profile } };
}

/** Creates a profile from the file's JSON (what POST /api/v1/profiles takes). */
async function create(target: Target, body: Json) {
  const profile = await running(target, 'create').session.call<ProfileView>('POST', '/api/v1/profiles', body);
  return changed(`created ${labelOf(profile)} at revision ${profile.revision}`, profile);
}

/**
 * Replaces a profile by `body` (PUT): the name and category it leaves out stay as they are, and the
 * revision is the one the file carries (as `profiles show --json` wrote it), else the one read now.
 */
async function replace(target: Target, command: ProfileCommand, ref: string, edit: (current: ProfileView) => Json) {
  const { session } = running(target, command);
  const current = find(await listOf(target), ref, target.stateDir);
  const body = { name: current.name, category: current.category, revision: current.revision, ...edit(current) };
  const profile = await session.call<ProfileView>('PUT', `/api/v1/profiles/${encodeURIComponent(current.id)}`, body);
  return changed(`updated ${labelOf(profile)} from revision ${String(body.revision)} to ${profile.revision}`, profile);
}

async function remove(target: Target, ref: string) {
  const { session } = running(target, 'delete');
  const profile = find(await listOf(target), ref, target.stateDir);
  await session.call('DELETE', `/api/v1/profiles/${encodeURIComponent(profile.id)}`);
  const lines = [`deleted ${labelOf(profile)}${profile.published ? ', which was published: it left the model lists' : ''}`];
  return { lines, json: { deleted: profile } };
}

interface ProfileArgs {
  command: ProfileCommand;
  ref: string | undefined;
  /** `--file` of create and edit. */
  file: string | undefined;
  /** What the file holds, read before the login so that a bad file needs no password. */
  body?: Json;
  /** The `key=value` words of set. */
  assignments: Array<{ path: string[]; value: unknown }>;
}

async function run(target: Target, args: ProfileArgs) {
  const ref = args.ref ?? '';
  switch (args.command) {
    case 'list': {
      const profiles = await listOf(target);
      return { lines: formatList(profiles), json: { profiles } };
    }
    case 'show': {
      const profile = find(await listOf(target), ref, target.stateDir);
      return { lines: formatShow(profile), json: { profile } };
    }
    case 'create':
      return create(target, args.body ?? {});
    case 'edit':
      return replace(target, 'edit', ref, () => args.body ?? {});
    case 'set':
      return replace(target, 'set', ref, (current) => assign(current, args.assignments));
    case 'delete':
      return remove(target, ref);
    case 'publish':
    case 'unpublish':
      return publish(target, ref, args.command === 'publish');
  }
}

/**
 * Checks the words after `profiles`: the subcommand (list by default), the profile it names, and
 * `--file` (create and edit only, where it is needed).
 */
export function parseProfileArgs(args: string[], file: string | undefined): ProfileArgs {
  const [word = 'list', ref, ...extra] = args;
  const command = PROFILE_COMMANDS.find((c) => c === word);
  if (!command) throw new UsageError(`profiles: unknown subcommand "${word}" (one of ${PROFILE_COMMANDS.join(', ')})`);
  const takesFile = command === 'create' || command === 'edit';
  if (takesFile && file === undefined) throw new UsageError(`profiles ${command} needs --file FILE (a JSON profile; - reads standard input)`);
  if (!takesFile && file !== undefined) throw new UsageError(`profiles ${command} takes no --file`);
  if ((command === 'list' || command === 'create') && ref !== undefined) throw new UsageError(`profiles ${command} takes no argument (got "${ref}")`);
  if (command !== 'list' && command !== 'create' && ref === undefined) throw new UsageError(`profiles ${command} needs a profile id or name`);
  if (command === 'set') {
    if (extra.length === 0) throw new UsageError('profiles set needs at least one key=value after the profile (e.g. params.context=8192)');
    return { command, ref, file, assignments: extra.map(parseAssignment) };
  }
  if (extra.length > 0) throw new UsageError(`profiles ${command}: unexpected argument "${extra[0]}"`);
  return { command, ref, file, assignments: [] };
}

export async function profilesCommand(
  config: Config,
  words: string[],
  options: { json: boolean; credential: CredentialSource; file: string | undefined },
): Promise<number> {
  const args = parseProfileArgs(words, options.file);
  if (args.file === '-' && options.credential.passwordStdin) {
    throw new UsageError(`profiles ${args.command}: --file - and --password-stdin both read standard input; give the password in SERVICE_DECK_ADMIN_PASSWORD`);
  }
  if (args.file !== undefined) args.body = await readProfileFile(args.file);
  await onTarget(config, options.credential, `service-deck profiles ${args.command}`, async (target) => {
    const result = await run(target, args);
    const out = options.json
      ? `${JSON.stringify({ state_dir: target.stateDir, service: target.service, ...result.json }, null, 2)}\n`
      : `${[targetLine(target), ...result.lines].join('\n')}\n`;
    process.stdout.write(out);
  });
  return 0;
}
