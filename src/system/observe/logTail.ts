// The recent log lines for the operator console: a pino destination beside the real one that
// keeps the last lines as pino wrote them (already redacted), parsed, and tells who listens about
// each new one (`GET /api/v1/logs`, the `log` events of `GET /api/v1/events`).
import { EventEmitter } from 'eventemitter3';
import type { LogLineView } from './console.types.js';

export const LOG_TAIL_LINES = 500;

/** pino's level names and numbers. */
export const LOG_LEVELS = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 } as const;
export type LogLevelName = keyof typeof LOG_LEVELS;

/** Fields every line has (or that say nothing): left out of `fields`. */
const OWN_FIELDS = new Set(['time', 'level', 'msg', 'service', 'pid', 'hostname']);

export class LogTail extends EventEmitter<{ line: [line: LogLineView] }> {
  readonly #lines: LogLineView[] = [];
  #seq = 0;

  constructor(readonly size = LOG_TAIL_LINES) {
    super();
  }

  /** pino's destination interface: one serialized line (JSON and a newline). */
  write(text: string): void {
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    const fields: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(record)) if (!OWN_FIELDS.has(key)) fields[key] = value;
    this.#seq += 1;
    const line: LogLineView = {
      seq: this.#seq,
      time: typeof record.time === 'number' ? record.time : Date.now(),
      level: typeof record.level === 'number' ? record.level : LOG_LEVELS.info,
      msg: typeof record.msg === 'string' ? record.msg : '',
      fields,
    };
    this.#lines.push(line);
    if (this.#lines.length > this.size) this.#lines.splice(0, this.#lines.length - this.size);
    this.emit('line', line);
  }

  /** The last `limit` lines at `level` or above, oldest first. */
  lines(options: { level?: LogLevelName; limit?: number } = {}): LogLineView[] {
    const min = LOG_LEVELS[options.level ?? 'trace'];
    const kept = this.#lines.filter((line) => line.level >= min);
    return kept.slice(Math.max(0, kept.length - (options.limit ?? this.size)));
  }
}
