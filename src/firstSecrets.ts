// The secrets that a first start makes and shows once (CONTRACT section 1): the API token when
// SERVICE_DECK_API_TOKEN gave none, and the demo's operator password when none is stored.
//
// They are made only once the start has succeeded (the admin listener bound, the inference
// listener's start settled), right before they are printed. A start that fails before that point
// (a busy port, a damaged state file) has stored no secret, so the next start makes them and shows
// them: a failed first start never leaves an operator with secrets that nobody saw.
// Only their hashes are stored, as always: no plaintext secret is ever written to disk, not even
// for a while, so there is no file of secrets to protect or to clean up.
import { randomPassword, type SecretStore } from './store/secrets.js';

export interface FirstSecrets {
  password?: string;
  token?: string;
}

/**
 * Makes and stores what is missing: the API token always, the operator password when `password`
 * asks for it (the demo). What another process (`service-deck set-password`, `rotate-token`)
 * stored meanwhile is kept.
 */
export async function issueFirstSecrets(secrets: SecretStore, want: { password: boolean }): Promise<FirstSecrets> {
  await secrets.refresh();
  const issued: FirstSecrets = {};
  if (!secrets.hasToken) issued.token = await secrets.rotateToken();
  if (want.password && !secrets.hasPassword) {
    const password = randomPassword();
    await secrets.setPassword(password);
    issued.password = password;
  }
  return issued;
}

/**
 * The secrets in a framed block, so that they stand out from the log lines around them; with how
 * to recover when they are lost. Empty when nothing was issued.
 */
export function secretsBlock(issued: FirstSecrets, stateDir: string): string[] {
  const lines: string[] = [];
  if (issued.password !== undefined) lines.push(`operator password (shown once): ${issued.password}`);
  if (issued.token !== undefined) lines.push(`new API token (shown once, only its hash is stored): ${issued.token}`);
  if (lines.length === 0) return [];
  const rule = '─'.repeat(78);
  return [
    `┌${rule}`,
    '│ service-deck: copy these now, they are shown only this once',
    '│',
    ...lines.map((line) => `│ ${line}`),
    '│',
    `│ Lost them? For the state directory ${stateDir}:`,
    '│   service-deck set-password   sets a new operator password (read from standard input)',
    '│   service-deck rotate-token   prints a new API token (the old one stops working)',
    `└${rule}`,
  ];
}
