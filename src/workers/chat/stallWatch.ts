// The stall watch of one chat request. llama-server samples every slot's tokens on one loop, so a
// request whose grammar explodes (a JSON schema over what grammarCost.ts lets through, or one it
// cannot judge) holds every other chat on that worker, and closing its connection does not free
// the loop: only a restart does. The watch tells such a request from a slow one by asking the
// worker: a request that got no token for `stallMs` has its worker probed (GET /slots, answered by
// that loop); an answer means the loop goes round (a long prompt, a long buffered answer) and the
// watch waits on; no answer within `stallMs` more means it is held, and the lease says so to the
// supervisor, which restarts the worker when others wait for it (the request then fails with
// 502 worker_failed and this message) and does nothing otherwise; the watch says it again every
// `stallMs` while it lasts.
import type { Lease } from '../../system/scheduler.js';

/** Whether the worker's loop answers (true), or the worker is gone (false); pending while the loop is held. */
export type Probe = (signal: AbortSignal) => Promise<boolean>;

/** Where the first report of a held worker is logged for the operator. */
export type StallLog = { warn: (fields: object, message: string) => void };

export class StallWatch {
  readonly #probe: Probe;
  readonly #lease: Pick<Lease, 'stalled' | 'jobId'>;
  readonly #stallMs: number;
  readonly #log: StallLog;
  #reported = false;
  readonly #ended = new AbortController();
  #timer: NodeJS.Timeout | undefined;
  /** A token came since the last look (set per chunk: a plain write on the relay's path). */
  #seen = false;
  #anyToken = false;
  /** When the last token came (the request's start before the first). */
  #since = Date.now();
  /** Which probe is current: a late answer of an earlier one changes nothing. */
  #probes = 0;

  constructor(probe: Probe, lease: Pick<Lease, 'stalled' | 'jobId'>, stallMs: number, log: StallLog) {
    this.#probe = probe;
    this.#lease = lease;
    this.#stallMs = stallMs;
    this.#log = log;
    this.#wait();
  }

  /** A token (a chunk of the worker's stream, or a buffered answer's arrival) came. */
  token(): void {
    this.#seen = true;
    this.#anyToken = true;
  }

  /** The request is over: no more probes, and a pending one is ended. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#ended.abort();
  }

  /** Whether a token came since the last look; the look notes the time. */
  #working(): boolean {
    if (!this.#seen) return false;
    this.#seen = false;
    this.#since = Date.now();
    return true;
  }

  #wait(): void {
    this.#timer = setTimeout(() => (this.#working() ? this.#wait() : this.#ask()), this.#stallMs);
  }

  #ask(): void {
    const probe = ++this.#probes;
    void this.#probe(this.#ended.signal).then((answered) => {
      if (probe !== this.#probes || this.#ended.signal.aborted) return;
      clearTimeout(this.#timer);
      // A worker that is gone is not held: its own end fails the request.
      if (!answered) return;
      this.#wait();
    });
    const remind = () => {
      if (this.#working()) {
        this.#probes += 1;
        this.#wait();
        return;
      }
      const seconds = Math.round((Date.now() - this.#since) / 1000);
      if (!this.#reported) {
        this.#reported = true;
        this.#log.warn(
          { component: 'chat', job_id: this.#lease.jobId, no_token_s: seconds },
          'the chat worker answers no status probe while a request waits for a token: one answer holds it, and it is restarted as soon as another request waits for it',
        );
      }
      this.#lease.stalled(
        `The chat worker gave a request no ${this.#anyToken ? '' : 'first '}token for ${seconds} s and answered no status probe while other requests waited: ` +
          'one answer held it, so it was restarted. The likely cause is the grammar of a response_format, text.format or tool schema it could not follow; a request without one can be sent again.',
      );
      this.#timer = setTimeout(remind, this.#stallMs);
    };
    this.#timer = setTimeout(remind, this.#stallMs);
  }
}
