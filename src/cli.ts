// The `service-deck` command (CONTRACT section 1): serve, demo, set-password, rotate-token,
// rotate-metrics-token, install/update (the installation step: the inference port range, spec 8),
// and the admin commands status, profiles, enhancers, extensions and models, which talk to the
// running service on loopback or read the state directory of a stopped one (src/cli/). Every
// command names the state directory it acted on; a bad option, command or argument prints the
// usage on stderr and exits 2.
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, parsePort, parsePortRange, type CliOptions } from './config.js';
import { ensurePrivateDir, StateFileError } from './store/files.js';
import { MIN_PASSWORD_LENGTH, SecretStore, WeakSecretError } from './store/secrets.js';
import { CliError, UsageError } from './cli/errors.js';
import { readNewPassword, type CredentialSource } from './cli/password.js';
import { isListenError, listenProblem, StartFailure } from './system/listenProblem.js';

const USAGE = `usage: service-deck <command> [options]

commands:
  serve                                run the service in the foreground
  demo                                 set up the embedded default and serve it
  set-password                         read the operator password from standard input
  rotate-token                         print a new API token once (the old one stops working)
  rotate-metrics-token                 print a new scrape token for GET /metrics once (the old
                                       one stops working)
  install, update [--api-ports A-B] [--api-port P]
                                       the installation step, at the first install and at every
                                       update, while the service is stopped: saves the inference
                                       port range (and port) in endpoint.json for every later
                                       start, and checks the saved port against the range
  status                               the service: inference listener and port, workers with
                                       state and memory, queue, blocked profiles and why
  profiles [list]                      every profile: category, publication, blockers
  profiles show <id|name>              one profile with its parameters
  profiles create --file FILE          create a profile from JSON: name, category, params
  profiles edit <id|name> --file FILE  replace a profile by the JSON in FILE (as profiles show
                                       --json wrote it; name and category may be left out)
  profiles set <id|name> KEY=VALUE...  change fields, e.g. params.context=8192 name=talker
                                       (a VALUE that is JSON is taken as JSON)
  profiles delete <id|name>            delete a profile (unpublished first)
  profiles publish <id|name>           publish a profile
  profiles unpublish <id|name>         unpublish a profile
  enhancers [list]                     the prompt enhancers: where each task's install stands
  enhancers install <t2i|i2i>          download a task's enhancer in the service and follow it
                                       (Ctrl-C stops following; the download goes on)
  enhancers cancel                     stop the running install (its partial files are removed)
  extensions [list]                    what goes beyond the specification, each off by default:
                                       responses (POST /v1/responses, OpenAI's Responses API)
  extensions enable <name>             turn an extension on (from the next request, kept across
                                       restarts)
  extensions disable <name>            turn an extension off again
  models [list]                        the model files in the model folders: size, format, facts
                                       and the memory forecast
  models hub <owner/name> [--revision R] [--forecast PATH]
                                       a hub repository's files with their sizes, or one file's
                                       facts and forecast from its header (no download)
  models pull <owner/name> <path> [--revision R]
                                       download a file into the model folder in the service and
                                       follow it (Ctrl-C stops following; the download goes on)
  models profile <file> --name N [--context C]
                                       make an unpublished profile of a listed file: chat for a
                                       GGUF (the largest context that fits), stt for whisper
  models cancel <pull id>              stop a running pull (its partial file is removed)
  Changing profiles, enhancers, extensions and models needs the running service; status,
  profiles list and show, and extensions list also read the state directory of a stopped one.

options:
  --state-dir DIR    state directory (default $SERVICE_DECK_STATE_DIR or ~/.local/state/service-deck)
  --ui-host HOST     admin listener address (default 127.0.0.1)
  --ui-port PORT     admin listener port (default 8110)
  --api-ports A-B    ports the inference listener may use: install and update save the range for
                     every later start; serve uses it for this run only (default: the saved
                     range, else $SERVICE_DECK_API_PORTS, else 1024-65535)
  --api-port PORT    inference port of the first start (default $SERVICE_DECK_API_PORT or 8120);
                     later starts keep the port saved in endpoint.json (install and update save it)
  --json             status, profiles, enhancers, extensions and models: JSON on stdout
  --file FILE        profiles create and edit: the profile as JSON (- for standard input)
  --password-stdin   status, profiles, enhancers, extensions and models: read the operator
                     password from stdin (else $SERVICE_DECK_ADMIN_PASSWORD, else asked on a
                     terminal)
  --revision R       models hub and pull: the branch or commit (default main)
  --forecast PATH    models hub: the facts and forecast of this file of the repository
  --name N           models profile: the profile's name, the one clients ask for
  --context C        models profile: the context in tokens (default: the largest that fits)
  -h, --help         this text
`;

async function openSecrets(options: CliOptions): Promise<{ store: SecretStore; stateDir: string }> {
  const config = configOf(options);
  await ensurePrivateDir(config.stateDir);
  return { store: (await SecretStore.open(config.stateDir)).store, stateDir: config.stateDir };
}

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        'state-dir': { type: 'string' },
        'ui-host': { type: 'string' },
        'ui-port': { type: 'string' },
        'api-ports': { type: 'string' },
        'api-port': { type: 'string' },
        json: { type: 'boolean' },
        'password-stdin': { type: 'boolean' },
        file: { type: 'string' },
        revision: { type: 'string' },
        forecast: { type: 'string' },
        name: { type: 'string' },
        context: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    // node:util's parseArgs names the option in its message (ERR_PARSE_ARGS_*).
    throw new UsageError((error as Error).message.split('. To specify')[0] ?? '');
  }
}

/** A value parsed by src/config.ts; a bad one is a usage error. */
function parsed<T>(parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    throw error instanceof ConfigError ? new UsageError(error.message) : error;
  }
}

/** The configuration from the options and the environment; a bad value is a usage error. */
const configOf = (options: CliOptions) => parsed(() => loadConfig(options));

/** Commands that take no words after their name. */
function noArguments(command: string, rest: string[]): void {
  if (rest.length > 0) throw new UsageError(`${command}: unexpected argument "${rest[0]}"`);
}

export async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parse(argv);
  const options: CliOptions = {
    ...(values['state-dir'] ? { stateDir: values['state-dir'] } : {}),
    ...(values['ui-host'] ? { uiHost: values['ui-host'] } : {}),
    ...(values['ui-port'] ? { uiPort: values['ui-port'] } : {}),
    ...(values['api-ports'] ? { apiPorts: values['api-ports'] } : {}),
    ...(values['api-port'] ? { apiPort: values['api-port'] } : {}),
  };
  const [command, ...rest] = positionals;
  if (values.help || command === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (command === undefined) throw new UsageError('no command given');
  const credential: CredentialSource = { passwordStdin: values['password-stdin'] ?? false, env: process.env };
  const json = values.json ?? false;
  const modelOptions = { revision: values.revision, forecast: values.forecast, name: values.name, context: values.context };
  const stray = Object.entries(modelOptions).find(([, value]) => value !== undefined)?.[0];
  if (stray !== undefined && command !== 'models') throw new UsageError(`--${stray} belongs to the models command`);
  switch (command) {
    // The service's modules load only for the commands that need them: usage and help stay quick.
    case 'serve': {
      noArguments(command, rest);
      const { serve } = await import('./server.js');
      await serve(configOf(options));
      return -1;
    }
    case 'demo': {
      noArguments(command, rest);
      const [{ setUpDemo }, { serve }] = await Promise.all([import('./demo.js'), import('./server.js')]);
      const config = configOf(options);
      const demo = await setUpDemo(config);
      await serve(config, { startEndpoint: true, generatePassword: true, banner: demo.banner });
      return -1;
    }
    case 'set-password': {
      noArguments(command, rest);
      const password = await readNewPassword();
      if (password.length < MIN_PASSWORD_LENGTH) {
        process.stderr.write(`service-deck: the password needs at least ${MIN_PASSWORD_LENGTH} characters\n`);
        return 1;
      }
      const { store, stateDir } = await openSecrets(options);
      await store.setPassword(password);
      process.stdout.write(`service-deck: operator password saved (scrypt hash) in state directory ${stateDir}\n`);
      return 0;
    }
    case 'rotate-token': {
      noArguments(command, rest);
      const { store, stateDir } = await openSecrets(options);
      const token = await store.rotateToken();
      process.stdout.write(`${token}\n`);
      process.stderr.write(`service-deck: new API token above (shown once) for state directory ${stateDir}; the old token no longer works\n`);
      return 0;
    }
    case 'rotate-metrics-token': {
      noArguments(command, rest);
      const { store, stateDir } = await openSecrets(options);
      const token = await store.rotateMetricsToken();
      process.stdout.write(`${token}\n`);
      process.stderr.write(
        `service-deck: new scrape token for GET /metrics above (shown once) for state directory ${stateDir}; the old one no longer works. Send it as \`Authorization: Bearer <token>\` (Prometheus: authorization.credentials_file)\n`,
      );
      return 0;
    }
    case 'install':
    case 'update': {
      noArguments(command, rest);
      const { installCommand } = await import('./cli/install.js');
      // The range and the port are this command's to save, not a range for this process.
      const { apiPorts, apiPort, ...others } = options;
      return installCommand(configOf(others), {
        ...(apiPorts ? { apiPorts: parsed(() => parsePortRange(apiPorts)) } : {}),
        ...(apiPort ? { apiPort: parsed(() => parsePort(apiPort, '--api-port')) } : {}),
      });
    }
    case 'status': {
      noArguments(command, rest);
      const { statusCommand } = await import('./cli/status.js');
      return statusCommand(configOf(options), { json, credential });
    }
    case 'enhancers': {
      const { enhancersCommand } = await import('./cli/enhancers.js');
      return enhancersCommand(configOf(options), rest, { json, credential });
    }
    case 'extensions': {
      const { extensionsCommand } = await import('./cli/extensions.js');
      return extensionsCommand(configOf(options), rest, { json, credential });
    }
    case 'models': {
      const { modelsCommand } = await import('./cli/models.js');
      return modelsCommand(configOf(options), rest, { json, credential, ...modelOptions });
    }
    case 'profiles': {
      const { profilesCommand } = await import('./cli/profiles.js');
      return profilesCommand(configOf(options), rest, { json, credential, file: values.file });
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

/**
 * A failure as one line that names the cause and, where it is known, the fix: never a
 * stack trace. A listener that could not open (the inspector's, say) is named by its address.
 */
export function failureLine(error: unknown): string {
  if (error instanceof CliError || error instanceof StateFileError || error instanceof WeakSecretError || error instanceof ConfigError || error instanceof StartFailure) {
    return error.message;
  }
  if (isListenError(error)) {
    const problem = listenProblem(error, {
      port: error.port ?? 0,
      portFix: 'choose another port (docs/operations.md lists the options and variables of every port)',
      hostFix: 'listen on 127.0.0.1 (the default) or an address of this machine',
    });
    return `the service could not start: cannot listen on ${error.address ?? ''}:${error.port ?? ''}: ${problem}`;
  }
  const code = (error as { code?: unknown }).code;
  const message = error instanceof Error ? error.message : String(error);
  return `failed: ${message}${typeof code === 'string' && !message.includes(code) ? ` (${code})` : ''} (SERVICE_DECK_LOG_LEVEL=debug shows the stack)`;
}

export function run(argv: string[]): void {
  main(argv).then(
    (code) => {
      if (code >= 0) process.exitCode = code;
    },
    (error: unknown) => {
      if (error instanceof UsageError) {
        process.stderr.write(`service-deck: ${error.message}\n${USAGE}`);
        process.exit(2);
      }
      process.stderr.write(`service-deck: ${failureLine(error)}\n`);
      // The stack is for a developer: shown only when the log level asks for detail.
      if (/^(debug|trace)$/.test(process.env.SERVICE_DECK_LOG_LEVEL ?? '') && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
      process.exit(1);
    },
  );
}
