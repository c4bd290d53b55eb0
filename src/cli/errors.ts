// What the `service-deck` command reports without a stack trace: a usage error (a bad option,
// command or argument: the message and the usage text, exit 2) and a plain failure (exit 1).

export class UsageError extends Error {
  override name = 'UsageError';
}

export class CliError extends Error {
  override name = 'CliError';
}
