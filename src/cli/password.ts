// The operator password as the `service-deck` command reads it. From a terminal it asks without
// echo; otherwise it reads standard input whole and drops one trailing newline. The command never
// stores it: `set-password` stores only its scrypt hash, the admin commands send it once to log in.
import { CliError } from './errors.js';

export async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

const withoutNewline = (text: string) => text.replace(/\r?\n$/, '');

/** Asks on the terminal (stderr) and reads a line without echo: backspace edits, Ctrl-C cancels. */
async function askWithoutEcho(prompt: string): Promise<string> {
  process.stderr.write(prompt);
  process.stdin.setRawMode(true);
  let password = '';
  try {
    for await (const chunk of process.stdin) {
      for (const char of (chunk as Buffer).toString('utf8')) {
        if (char === '\r' || char === '\n') return password;
        if (char === '\u0003') throw new CliError('cancelled');
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

/** A new password for `set-password`: asked on a terminal, else standard input. */
export async function readNewPassword(): Promise<string> {
  return process.stdin.isTTY ? askWithoutEcho('New operator password: ') : withoutNewline(await readStdin());
}

export interface CredentialSource {
  /** `--password-stdin`: standard input holds the password. */
  passwordStdin: boolean;
  env: NodeJS.ProcessEnv;
}

/**
 * The password to log in to the running service with: `--password-stdin`, else
 * `SERVICE_DECK_ADMIN_PASSWORD`, else asked on a terminal. `why` says what needs it and where.
 */
export async function operatorPassword(source: CredentialSource, why: string): Promise<string> {
  if (source.passwordStdin) return withoutNewline(await readStdin());
  const fromEnv = source.env.SERVICE_DECK_ADMIN_PASSWORD;
  if (fromEnv) return fromEnv;
  if (process.stdin.isTTY) return askWithoutEcho('Operator password: ');
  throw new CliError(`${why}: give the operator password through SERVICE_DECK_ADMIN_PASSWORD or --password-stdin, or run the command from a terminal`);
}
