// Server-sent events as the workers write them (the WHATWG event-stream format): an event ends at a
// blank line, a line ends with LF or CRLF, and an event's data is its `data:` lines, each less
// the field name and one leading space, joined by LF. llama-server writes LF only; a worker that
// writes CRLF is read the same, by the relay (whole events, passed on as they came) and by the
// chat test (each event's data).

const LF = 0x0a;
const CR = 0x0d;

/** Where the first blank line at or after `from` starts and ends (LF LF, or LF CR LF), or undefined. */
export function nextBlankLine(bytes: Buffer, from = 0): { at: number; end: number } | undefined {
  for (let i = bytes.indexOf(LF, from); i >= 0 && i < bytes.length - 1; i = bytes.indexOf(LF, i + 1)) {
    if (bytes[i + 1] === LF) return { at: i, end: i + 2 };
    if (bytes[i + 1] === CR && bytes[i + 2] === LF) return { at: i, end: i + 3 };
  }
  return undefined;
}

/** The index just past the last blank line that ends before `before` (0: none), so an event starts there. */
export function eventStart(bytes: Buffer, before: number): number {
  for (let i = bytes.lastIndexOf(LF, before - 1); i > 0; i = bytes.lastIndexOf(LF, i - 1)) {
    if (bytes[i - 1] === LF) return i + 1;
    if (bytes[i - 1] === CR && bytes[i - 2] === LF) return i + 1;
  }
  return 0;
}

/** The index just past the last blank line in `bytes`: everything before it is whole events (0: none yet). */
export function wholeEventsEnd(bytes: Buffer): number {
  return eventStart(bytes, bytes.length);
}

/** An event's data: its `data:` lines less the field name and one leading space, joined by LF. */
export function eventData(event: string): string {
  return event
    .split('\n')
    .map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line))
    .filter((line) => line.startsWith('data:'))
    .map((line) => (line.startsWith('data: ') ? line.slice(6) : line.slice(5)))
    .join('\n');
}

/** Reads a stream chunk by chunk and hands each whole event's data (never empty) to `onEvent`. */
export class SseReader {
  #pending: Buffer = Buffer.alloc(0);
  constructor(readonly onEvent: (data: string) => void) {}

  push(chunk: Buffer): void {
    const bytes = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    let from = 0;
    for (let blank = nextBlankLine(bytes, from); blank; blank = nextBlankLine(bytes, from)) {
      const data = eventData(bytes.subarray(from, blank.at).toString('utf8'));
      from = blank.end;
      if (data !== '') this.onEvent(data);
    }
    this.#pending = Buffer.from(bytes.subarray(from));
  }
}
