// `service-deck extensions [list|enable <name>|disable <name>]`: the operator's switches for what
// goes beyond the specification (CONTRACT section 9), each off by default. `list` reads the running
// service's status, or the state directory's `endpoint.json` while it is stopped; `enable` and
// `disable` go through the running service's admin API, which writes the switch and serves by it
// from the next request.
import type { Config } from '../config.js';
import { EXTENSION_NAMES, type ExtensionName, type Extensions } from '../store/endpoint.js';
import { EXTENSION_FACTS } from '../system/extensions.js';
import type { EndpointStatus } from '../system/observe/console.types.js';
import { CliError, UsageError } from './errors.js';
import type { CredentialSource } from './password.js';
import { onTarget, targetLine } from './target.js';

export const EXTENSION_COMMANDS = ['list', 'enable', 'disable'] as const;
type ExtensionCommand = (typeof EXTENSION_COMMANDS)[number];

/** One extension in a line: its name, whether it is on, and what it serves. */
export function extensionLine(name: ExtensionName, on: boolean): string {
  const { title, route } = EXTENSION_FACTS[name];
  return `${name}: ${on ? 'on' : 'off'} (${route}, ${title}${on ? '' : '; 404 while off'})`;
}

/** Checks the words after `extensions`: the subcommand (list by default) and the extension of enable and disable. */
export function parseExtensionArgs(args: string[]): { command: ExtensionCommand; name: ExtensionName | undefined } {
  const [word = 'list', name, ...extra] = args;
  const command = EXTENSION_COMMANDS.find((c) => c === word);
  if (!command) throw new UsageError(`extensions: unknown subcommand "${word}" (one of ${EXTENSION_COMMANDS.join(', ')})`);
  if (command === 'list') {
    if (name !== undefined) throw new UsageError(`extensions list takes no argument (got "${name}")`);
    return { command, name: undefined };
  }
  const known = EXTENSION_NAMES.find((n) => n === name);
  if (!known) throw new UsageError(`extensions ${command} needs the extension: ${EXTENSION_NAMES.join(' or ')}${name === undefined ? '' : ` (got "${name}")`}`);
  if (extra.length > 0) throw new UsageError(`extensions ${command}: unexpected argument "${extra[0]}"`);
  return { command, name: known };
}

export async function extensionsCommand(config: Config, args: string[], options: { json: boolean; credential: CredentialSource }): Promise<number> {
  const { command, name } = parseExtensionArgs(args);
  return onTarget(config, options.credential, `service-deck extensions ${command}`, async (target) => {
    const print = (line: string) => void process.stdout.write(`${line}\n`);
    let extensions: Extensions;
    if (command === 'list') {
      extensions = target.running ? (await target.session.call<EndpointStatus>('GET', '/api/v1/endpoint')).extensions : target.endpoint.extensions;
    } else {
      if (!target.running) {
        throw new CliError(
          `extensions ${command} needs the running service, and the service of ${target.stateDir} is not running: start it (service-deck serve), then run this again`,
        );
      }
      ({ extensions } = await target.session.call<{ extensions: Extensions }>('POST', '/api/v1/endpoint/extensions', { [name as ExtensionName]: command === 'enable' }));
    }
    if (options.json) {
      print(JSON.stringify({ state_dir: target.stateDir, service: target.service, extensions }, null, 2));
      return 0;
    }
    print(targetLine(target));
    for (const n of EXTENSION_NAMES) print(extensionLine(n, extensions[n]));
    if (command !== 'list') print(`${name} is ${command === 'enable' ? 'on' : 'off'} from the next request, and stays so across restarts`);
    return 0;
  });
}
