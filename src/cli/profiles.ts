// `service-deck profiles [list|show|publish|unpublish]`: the profiles of a state directory with their
// publication and blockers. list and show work on a running service (admin API) and on a stopped
// one (its files, blockers computed by the catalog). publish and unpublish change what the running
// service serves, so they go through it: the service alone writes the publication (endpoint.json).
import type { Config } from '../config.js';
import type { ProfileView } from '../store/profile.schema.js';
import { CliError, UsageError } from './errors.js';
import type { CredentialSource } from './password.js';
import { onTarget, targetLine, type Target } from './target.js';

export const PROFILE_COMMANDS = ['list', 'show', 'publish', 'unpublish'] as const;
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
  if (profiles.length === 0) return ['no profiles yet (create them in the console or through POST /api/v1/profiles)'];
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

/** Publishes or unpublishes through the running service and says what changed. */
async function publish(target: Target, ref: string, enabled: boolean) {
  const verb = enabled ? 'publish' : 'unpublish';
  if (!target.running) {
    throw new CliError(
      `profiles ${verb} needs the running service, and the service of ${target.stateDir} is not running: start it (service-deck serve), then run this again`,
    );
  }
  const before = await listOf(target);
  const profile = find(before, ref, target.stateDir);
  const answer = await target.session.call<{ published: string[]; profile: ProfileView }>('POST', '/api/v1/endpoint/profile', { id: profile.id, enabled });
  const names = new Map(before.map((p) => [p.id, p.name]));
  const label = `${profile.name} (${profile.id}, ${profile.category})`;
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

async function run(target: Target, command: ProfileCommand, ref: string | undefined) {
  switch (command) {
    case 'list': {
      const profiles = await listOf(target);
      return { lines: formatList(profiles), json: { profiles } };
    }
    case 'show': {
      const profile = find(await listOf(target), ref ?? '', target.stateDir);
      return { lines: formatShow(profile), json: { profile } };
    }
    case 'publish':
    case 'unpublish':
      return publish(target, ref ?? '', command === 'publish');
  }
}

/** Checks the words after `profiles`: the subcommand (list by default) and the profile it names. */
export function parseProfileArgs(args: string[]): { command: ProfileCommand; ref: string | undefined } {
  const [word = 'list', ref, ...extra] = args;
  const command = PROFILE_COMMANDS.find((c) => c === word);
  if (!command) throw new UsageError(`profiles: unknown subcommand "${word}" (one of ${PROFILE_COMMANDS.join(', ')})`);
  if (command === 'list' && ref !== undefined) throw new UsageError(`profiles list takes no argument (got "${ref}")`);
  if (command !== 'list' && ref === undefined) throw new UsageError(`profiles ${command} needs a profile id or name`);
  if (extra.length > 0) throw new UsageError(`profiles ${command}: unexpected argument "${extra[0]}"`);
  return { command, ref };
}

export async function profilesCommand(config: Config, args: string[], options: { json: boolean; credential: CredentialSource }): Promise<number> {
  const { command, ref } = parseProfileArgs(args);
  await onTarget(config, options.credential, `service-deck profiles ${command}`, async (target) => {
    const result = await run(target, command, ref);
    const out = options.json
      ? `${JSON.stringify({ state_dir: target.stateDir, service: target.service, ...result.json }, null, 2)}\n`
      : `${[targetLine(target), ...result.lines].join('\n')}\n`;
    process.stdout.write(out);
  });
  return 0;
}
