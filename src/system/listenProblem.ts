// Why a listener could not open, in words that name the cause and the fix: the admin
// listener's failure ends the start with this one line, the inference listener's is its `error`
// in the status object. Node's own message ("listen EADDRINUSE: address already in use …") names
// neither the fix nor which of the service's listeners it was.

/** An error of `server.listen()`: Node sets its syscall, code, address and port. */
interface ListenErrno extends Error {
  syscall?: string;
  code?: string;
  address?: string;
  port?: number;
}

/** Whether `error` is a failed `listen()`. */
export function isListenError(error: unknown): error is ListenErrno {
  return error instanceof Error && (error as ListenErrno).syscall === 'listen';
}

/**
 * The cause and the fix of a failed listen, e.g. "port 8110 is in use (EADDRINUSE): stop what uses
 * it, or start with --ui-port <port>". `portFix` says how to choose another port, `hostFix` another
 * address.
 */
export function listenProblem(error: unknown, fix: { port: number; portFix: string; hostFix: string }): string {
  const code = isListenError(error) ? (error.code ?? '') : '';
  const port = fix.port;
  switch (code) {
    case 'EADDRINUSE':
      return `port ${port} is in use (EADDRINUSE): stop what uses it (\`ss -ltnp 'sport = :${port}'\` shows which program), or ${fix.portFix}`;
    case 'EACCES':
      return port < 1024
        ? `port ${port} needs root (EACCES: ports below 1024 are privileged): ${fix.portFix} from 1024 up`
        : `port ${port} may not be opened by this user (EACCES: a security policy refuses it): ${fix.portFix}`;
    case 'EADDRNOTAVAIL':
      return `the address ${isListenError(error) ? (error.address ?? '') : ''} is not one of this machine's (EADDRNOTAVAIL): ${fix.hostFix}`;
    default:
      return error instanceof Error ? error.message : String(error);
  }
}

/** A start that failed for a reason the operator can fix: the command prints its one line and exits 1. */
export class StartFailure extends Error {
  override name = 'StartFailure';
  /** The system error's code of the cause (`EADDRINUSE`), for callers that tell causes apart. */
  readonly code: string | undefined;
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
    this.code = isListenError(options.cause) ? options.cause.code : undefined;
  }
}
