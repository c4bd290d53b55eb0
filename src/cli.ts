// The `service-deck` command (CONTRACT section 1): serve, demo, set-password, rotate-token.
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, type CliOptions } from './config.js';
import { ensurePrivateDir, StateFileError } from './store/files.js';
import { MIN_PASSWORD_LENGTH, SecretStore, WeakSecretError } from './store/secrets.js';
import { serve } from './server.js';

const USAGE = `usage: service-deck <command> [options]

commands:
  serve          run the service in the foreground
  demo           set up the embedded default and serve it
  set-password   read the operator password from standard input
  rotate-token   print a new API token once (the old one stops working)

options:
  --state-dir DIR    state directory (default $SERVICE_DECK_STATE_DIR or ~/.local/state/service-deck)
  --ui-host HOST     admin listener address (default 127.0.0.1)
  --ui-port PORT     admin listener port (default 8110)
  --api-ports A-B    ports the inference listener may use (default 1024-65535)
`;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) return (await readStdin()).replace(/\r?\n$/, '');
  process.stderr.write('New operator password: ');
  process.stdin.setRawMode(true);
  let password = '';
  try {
    for await (const chunk of process.stdin) {
      for (const char of (chunk as Buffer).toString('utf8')) {
        if (char === '\r' || char === '\n') return password;
        if (char === '\u0003') throw new Error('cancelled');
        if (char === '\u007f') password = password.slice(0, -1);
        else password += char;
      }
    }
  } finally {
    process.stdin.setRawMode(false);
    process.stderr.write('\n');
  }
  return password;
}

async function openSecrets(options: CliOptions): Promise<SecretStore> {
  const config = loadConfig(options);
  await ensurePrivateDir(config.stateDir);
  return (await SecretStore.open(config.stateDir)).store;
}

export async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      'state-dir': { type: 'string' },
      'ui-host': { type: 'string' },
      'ui-port': { type: 'string' },
      'api-ports': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const options: CliOptions = {
    ...(values['state-dir'] ? { stateDir: values['state-dir'] } : {}),
    ...(values['ui-host'] ? { uiHost: values['ui-host'] } : {}),
    ...(values['ui-port'] ? { uiPort: values['ui-port'] } : {}),
    ...(values['api-ports'] ? { apiPorts: values['api-ports'] } : {}),
  };
  const command = positionals[0];
  if (values.help || command === undefined || command === 'help') {
    process.stdout.write(USAGE);
    return command === undefined && !values.help ? 2 : 0;
  }
  switch (command) {
    case 'serve':
      await serve(loadConfig(options));
      return -1;
    case 'demo': {
      const { setUpDemo } = await import('./demo.js');
      const config = loadConfig(options);
      const demo = await setUpDemo(config);
      await serve(config, { startEndpoint: true, banner: demo.banner });
      return -1;
    }
    case 'set-password': {
      const password = await readPassword();
      if (password.length < MIN_PASSWORD_LENGTH) {
        process.stderr.write(`service-deck: the password needs at least ${MIN_PASSWORD_LENGTH} characters\n`);
        return 1;
      }
      await (await openSecrets(options)).setPassword(password);
      process.stdout.write('service-deck: operator password saved (scrypt hash)\n');
      return 0;
    }
    case 'rotate-token': {
      const token = await (await openSecrets(options)).rotateToken();
      process.stdout.write(`${token}\n`);
      process.stderr.write('service-deck: new API token above (shown once); the old token no longer works\n');
      return 0;
    }
    default:
      process.stderr.write(`service-deck: unknown command "${command}"\n${USAGE}`);
      return 2;
  }
}

export function run(argv: string[]): void {
  main(argv).then(
    (code) => {
      if (code >= 0) process.exitCode = code;
    },
    (error: unknown) => {
      if (error instanceof StateFileError || error instanceof ConfigError || error instanceof WeakSecretError) {
        process.stderr.write(`service-deck: ${error.message}\n`);
      } else {
        process.stderr.write(`service-deck: ${(error as Error).stack ?? String(error)}\n`);
      }
      process.exit(1);
    },
  );
}
