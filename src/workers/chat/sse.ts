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

/** The most an event may hold (1 MiB): the relay passes a longer unfinished one on as it is, a reader drops it. */
export const EVENT_LIMIT = 1024 * 1024;

/**
 * Reads a stream chunk by chunk and hands each whole event's data (never empty) to `onEvent`. Each
 * byte is searched for a blank line once: a new chunk is searched with the two bytes before it (a
 * blank line may begin there), and the bytes of an unfinished event are kept as the chunks that
 * came, joined once when its end comes. An event longer than `limit` is dropped up to its end,
 * and `onOverflow` is told (so what a reader holds stays bounded whatever the stream sends).
 */
export class SseReader {
  #parts: Buffer[] = [];
  #length = 0;
  /** The last two bytes read: a blank line that ends in the next chunk may begin here. */
  #edge: Buffer = Buffer.alloc(0);
  /** Dropping an event over the limit until its end. */
  #dropping = false;

  constructor(
    readonly onEvent: (data: string) => void,
    readonly options: { limit?: number; onOverflow?: () => void } = {},
  ) {}

  /** The bytes of the unfinished event held now. */
  get pending(): number {
    return this.#length;
  }

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const edge = this.#edge;
    const probe = edge.length > 0 ? Buffer.concat([edge, chunk]) : chunk;
    this.#edge = Buffer.from(probe.subarray(-2));
    const first = nextBlankLine(probe);
    if (!first) {
      this.#keep(chunk);
      return;
    }
    // The held event ends in this chunk (its blank line may have begun in the bytes before it:
    // then the event keeps a line end or two, which its data ignores).
    const ends = Math.max(0, first.at - edge.length);
    if (!this.#dropping) this.#emit(Buffer.concat([...this.#parts, chunk.subarray(0, ends)]));
    this.#parts = [];
    this.#length = 0;
    this.#dropping = false;
    let from = first.end - edge.length;
    for (let blank = nextBlankLine(chunk, from); blank; blank = nextBlankLine(chunk, from)) {
      this.#emit(chunk.subarray(from, blank.at));
      from = blank.end;
    }
    if (from < chunk.length) this.#keep(chunk.subarray(from));
  }

  #emit(event: Buffer): void {
    const data = eventData(event.toString('utf8'));
    if (data !== '') this.onEvent(data);
  }

  /** Holds the start of an unfinished event (a copy: the chunk's buffer is not pinned), unless it is over the limit. */
  #keep(bytes: Buffer): void {
    if (this.#dropping) return;
    if (this.#length + bytes.length > (this.options.limit ?? EVENT_LIMIT)) {
      this.#parts = [];
      this.#length = 0;
      this.#dropping = true;
      this.options.onOverflow?.();
      return;
    }
    this.#parts.push(Buffer.from(bytes));
    this.#length += bytes.length;
  }
}
