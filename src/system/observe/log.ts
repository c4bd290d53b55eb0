// The one pino logger, writing to stdout and to the console's log tail (src/system/observe/logTail.ts).
// Access lines carry method, route, status, duration and request id; nothing logs a header, a
// body, a query string, a token, a cookie, a password, a prompt, an answer or any other content a
// client sent (a JSON schema, tool definitions): a worker's error text is logged without what it
// quotes of the request (workerErrorDetail, src/workers/chat/chatRequest.ts).
// The redaction below is a second line of defence for anything that is logged by mistake.
import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';

/** Field names whose values never reach a log or the inspector. */
export const SENSITIVE_KEYS = new Set([
  'authorization',
  'cookie',
  'set-cookie',
  'x-csrf-token',
  'password',
  'token',
  'apikey',
  'api_key',
  'secret',
  'sessionkey',
  'csrftoken',
  'prompt',
  'messages',
  'input',
  'content',
  'text',
  'answer',
  'choices',
  'delta',
  'audio',
  'image',
  'images',
  'file',
  'b64_json',
  'revised_prompt',
  'suggestion',
  'original',
  'body',
  'payload',
  // What else a chat request carries that the client wrote: its schema, its tools, their calls.
  'response_format',
  'json_schema',
  'tools',
  'tool_calls',
  'functions',
  'grammar',
  // What a Responses API request and answer carry beside `input`: the instructions, the output
  // items, a function call's arguments and a tool's output.
  'instructions',
  'output',
  'output_text',
  'arguments',
]);

const REDACT_PATHS = [...SENSITIVE_KEYS].flatMap((key) =>
  /^[a-z_]+$/.test(key) ? [key, `*.${key}`, `req.headers.${key}`] : [`headers["${key}"]`, `req.headers["${key}"]`],
);

/** How lines reach stdout: pino's JSON, one object a line, or pino-pretty's readable lines. */
export type LogFormat = 'json' | 'pretty';

/** The format in force: `auto` is pretty on a terminal, JSON otherwise (a pipe, a file, journald). */
export function resolveLogFormat(setting: LogFormat | 'auto', terminal: boolean): LogFormat {
  return setting === 'auto' ? (terminal ? 'pretty' : 'json') : setting;
}

/**
 * pino-pretty as a stream in front of `destination`: one readable line per record (time, level,
 * message, then the other fields), colored when `colorize`. The console's tail still gets JSON.
 */
function prettyStream(destination: Flushable, colorize: boolean): DestinationStream {
  const stream = pretty({
    destination: destination as unknown as NodeJS.WritableStream,
    colorize,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,service',
  });
  // Each line goes through pino-pretty at once (its stream is synchronous up to the destination),
  // so flushing the destination flushes every line written before.
  return Object.assign(stream, { flush: (cb: (error?: Error | null) => void) => flushOf(destination, cb) });
}

function flushOf(destination: Flushable, cb: (error?: Error | null) => void): void {
  if (destination.flush) destination.flush(cb);
  else cb();
}

/**
 * The logger: stdout (or `destination`), and the console's log tail when one is given. Each line
 * is serialized and redacted once, then written to both; `format: 'pretty'` makes stdout's lines
 * readable (the tail keeps JSON).
 */
export function createLogger(options: { level: string; destination?: DestinationStream; tail?: DestinationStream; format?: LogFormat; colorize?: boolean }): Logger {
  const raw = options.destination ?? pino.destination({ fd: 1, sync: false });
  const destination = options.format === 'pretty' ? prettyStream(raw, options.colorize ?? false) : raw;
  return pino(
    {
      level: options.level,
      base: { service: 'service-deck' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    },
    options.tail ? both(destination, options.tail) : destination,
  );
}

type Flushable = DestinationStream & { flush?: (cb: (error?: Error | null) => void) => void };

/** Both streams take every line the logger writes (its level decides); `log.flush()` still flushes stdout. */
function both(destination: Flushable, tail: DestinationStream): DestinationStream {
  const streams = pino.multistream([
    { stream: destination, level: 'trace' },
    { stream: tail, level: 'trace' },
  ]);
  return Object.assign(streams, { flush: (cb: (error?: Error | null) => void) => flushOf(destination, cb) });
}

export type { Logger };

/** A copy of `value` with every sensitive field, binary and long text replaced: safe to log or inspect. */
export function sanitize(value: unknown, depth = 0): unknown {
  if (value === null || typeof value === 'number' || typeof value === 'boolean' || value === undefined) return value;
  if (typeof value === 'string') return value.length > 200 ? `${value.slice(0, 200)}…[${value.length} chars]` : value;
  if (typeof value === 'function' || typeof value === 'symbol' || typeof value === 'bigint') return `[${typeof value}]`;
  if (depth > 6) return '[depth]';
  if (Buffer.isBuffer(value) || ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return `[binary ${(value as ArrayBuffer).byteLength} bytes]`;
  if (Array.isArray(value)) return value.slice(0, 50).map((item) => sanitize(item, depth + 1));
  if (value instanceof Error) return { name: value.name, message: sanitize(value.message) };
  if (typeof (value as { getSnapshot?: unknown }).getSnapshot === 'function') return `[actor ${(value as { id?: string }).id ?? ''}]`;
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
    out[key] = SENSITIVE_KEYS.has(key.toLowerCase()) ? '[redacted]' : sanitize(inner, depth + 1);
  }
  return out;
}
