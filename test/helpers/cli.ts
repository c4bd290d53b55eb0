// The real `service-deck` command (bin/service-deck.js over the built dist/) run to its end, for the
// tests of the admin commands: its stdout, stderr and exit code; and the operator password's hash
// made cheap, so that each command's login is quick on a busy machine.
import { spawn } from 'node:child_process';
import { randomBytes, scryptSync } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Test } from 'tap';
import { writeJsonAtomic } from '../../src/store/files.js';
import { PASSWORD, type Built } from './build.js';
import { BIN } from './spawn.js';

export const ROOT = path.resolve(path.dirname(BIN), '..');

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (at most 60 s) in `cwd` (the checkout) with only PATH, HOME and `env`; `input` is its standard input. */
export function run(t: Test, command: string[], env: NodeJS.ProcessEnv, input = '', cwd = ROOT): Promise<Ran> {
  const [program = process.execPath, ...args] = command;
  const child = spawn(program, args, { cwd, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: 'pipe' });
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  t.teardown(() => {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  child.stdin.end(input);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

/** `service-deck <args>` run to its end. */
export const cli = (t: Test, args: string[], env: NodeJS.ProcessEnv, input?: string, cwd?: string) => run(t, [process.execPath, BIN, ...args], env, input, cwd);

/**
 * Stores the operator password's scrypt hash at a lower cost (N = 2^10 instead of 2^15). The service
 * checks a password with the parameters its stored hash carries, so each command's login here still
 * goes through scrypt, in about 1 ms instead of 100 to 250 ms on 2 busy cores. The change ends the
 * sessions opened before it (a password change does), so the helper's own session logs in again.
 */
export async function cheapPasswordCheck(b: Built): Promise<void> {
  const file = path.join(b.stateDir, 'secrets.json');
  const secrets = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  const salt = randomBytes(16);
  const hash = scryptSync(PASSWORD, salt, 32, { N: 2 ** 10, r: 8, p: 1 });
  secrets.passwordHash = ['scrypt', 2 ** 10, 8, 1, salt.toString('base64'), hash.toString('base64')].join('$');
  await writeJsonAtomic(file, secrets);
  await b.login();
}

export const noStack = (t: Test, ran: Ran) => t.notMatch(ran.stdout + ran.stderr, /\n\s+at .+:\d+:\d+/, 'no stack trace');
