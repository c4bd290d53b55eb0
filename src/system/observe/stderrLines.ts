// Each worker kind's recent stderr lines for the operator console (`GET /api/v1/workers/<kind>/stderr`):
// bounded (the last STDERR_LINES lines of a kind, each cut to STDERR_LINE_CHARS characters), in RAM
// only, never logged, and redacted line by line before they are kept. The rule (docs/operations.md,
// "A worker's stderr"):
//
// 1. A line that can carry a prompt or an answer is withheld whole: a JSON body (`{"` or `[{`, as
//    llama-server prints requests and responses at its verbose levels), a chat template's markers
//    (`<|im_start|>`, `[INST]`, `<start_of_turn>`, `<s>`), a transcript segment
//    (`[00:00:01.000 --> …]`), and a content field with a value that is not a plain number
//    (`prompt: …`, `formatted prompt = …`, `text: …`, `hyp: …`; `prompt eval time = 12 ms` stays).
// 2. Quoted text ("…" or '…', as engines quote tokens, words and file contents) becomes "…".
// 3. Secrets become [redacted]: the value after api-key, authorization, bearer, password, secret or
//    token, and any long opaque run (32+ hex digits, or 40+ base64 characters) such as a key.
// 4. What is left is cut to STDERR_LINE_CHARS characters.
//
// A worker may add its own filter (the image worker drops every line that quotes its prompt).
import { StringDecoder } from 'node:string_decoder';
import type { StderrLineView, WorkerStderrView } from './console.types.js';

export const STDERR_LINES = 200;
export const STDERR_LINE_CHARS = 300;
/** An unfinished line longer than this is taken as a line of its own (a process that never writes a newline). */
const PENDING_CHARS = 4 * STDERR_LINE_CHARS;

export const WITHHELD = '[line withheld: it may quote a prompt or an answer]';

const CONTENT_LINE = [
  /\{\s*"|\[\s*\{/,
  /<\|[A-Za-z_]+\|>|\[\/?INST\]|<\/?start_of_turn>|<\/?s>|<\/?think>/i,
  /\[\d{2}:\d{2}:\d{2}[.,]\d{3}\s*-->/,
  /\b(?:prompt|content|messages?|input|text|answer|completion|output|grammar|hyp|hypothesis|transcript|transcription)\b\s*[:=](?!\s*-?\d[\d.]*\s*(?:[,;)]|ms\b|s\b|tokens?\b|$))/i,
];
const QUOTED = /"(?:[^"\\]|\\.)*"|'(?:[^'\\\s]|\\.)(?:[^'\\]|\\.)*'/g;
const SECRET_VALUE = /\b(api[-_ ]?key(?:[-_]file)?|authorization|bearer|password|secret|token)(\s*[:=]\s*|\s+)(?!\d+\b)(?:bearer\s+)?[^\s,;]+/gi;
const OPAQUE = /\b[A-Fa-f0-9]{32,}\b|[A-Za-z0-9+/_-]{40,}={0,2}/g;

/** One stderr line as the console may show it (the rule above), or WITHHELD. */
export function redactStderrLine(line: string): string {
  const text = line.replace(/\r$/, '');
  if (CONTENT_LINE.some((pattern) => pattern.test(text))) return WITHHELD;
  const redacted = text.replace(QUOTED, '"…"').replace(SECRET_VALUE, '$1$2[redacted]').replace(OPAQUE, '[redacted]');
  return redacted.length > STDERR_LINE_CHARS ? `${redacted.slice(0, STDERR_LINE_CHARS - 1)}…` : redacted;
}

/** One worker kind's recent stderr lines, fed the process's chunks as they come. */
export class StderrLines {
  readonly #lines: StderrLineView[] = [];
  #seq = 0;
  #pending = '';
  #decoder = new StringDecoder('utf8');
  #generation = 0;
  /** The running start's own filter (null: the line is dropped). */
  #filter: ((line: string) => string | null) | undefined;

  constructor(readonly limit = STDERR_LINES) {}

  /** A new process of this kind starts: what is unfinished of the last one is ended. */
  begin(generation: number, filter?: (line: string) => string | null): void {
    this.#end();
    this.#generation = generation;
    this.#filter = filter;
  }

  /** A chunk of the process's stderr. */
  push(chunk: Buffer): void {
    this.#pending += this.#decoder.write(chunk);
    for (;;) {
      const at = this.#pending.search(/\r?\n|\r(?!$)/);
      if (at < 0) break;
      const line = this.#pending.slice(0, at);
      this.#pending = this.#pending.slice(at).replace(/^(\r?\n|\r)/, '');
      this.#keep(line);
    }
    while (this.#pending.length > PENDING_CHARS) {
      this.#keep(this.#pending.slice(0, PENDING_CHARS));
      this.#pending = this.#pending.slice(PENDING_CHARS);
    }
  }

  /** The kept lines, oldest first. */
  lines(): StderrLineView[] {
    return this.#lines.map((line) => ({ ...line }));
  }

  #end(): void {
    const rest = this.#pending + this.#decoder.end();
    this.#pending = '';
    this.#decoder = new StringDecoder('utf8');
    if (rest.trim() !== '') this.#keep(rest);
  }

  #keep(raw: string): void {
    if (raw.trim() === '') return;
    const own = this.#filter ? this.#filter(raw) : raw;
    const text = own === null ? WITHHELD : redactStderrLine(own);
    this.#seq += 1;
    this.#lines.push({ seq: this.#seq, at: new Date().toISOString(), generation: this.#generation, text });
    if (this.#lines.length > this.limit) this.#lines.splice(0, this.#lines.length - this.limit);
  }
}

export const STDERR_KINDS = ['chat', 'image', 'tts', 'stt', 'enhancer'] as const;
export type StderrKind = (typeof STDERR_KINDS)[number];

/** Every worker kind's lines. */
export class WorkerStderr {
  readonly #kinds = new Map<StderrKind, StderrLines>(STDERR_KINDS.map((kind) => [kind, new StderrLines()]));

  of(kind: StderrKind): StderrLines {
    return this.#kinds.get(kind)!;
  }

  view(kind: StderrKind): WorkerStderrView {
    return { kind, lines: this.of(kind).lines(), limit: STDERR_LINES, line_chars: STDERR_LINE_CHARS };
  }
}
