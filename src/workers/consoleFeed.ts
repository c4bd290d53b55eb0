// What `GET /api/v1/events` streams to the operator console (ConsoleEvents in
// src/system/observe/console.types.ts): on connect one of each as a snapshot, then each change. The
// sources are watched only while at least one stream is open, and what is costly (the status
// with its GPU and RAM probe) is computed once per change and sent to every stream:
//
// - `status`: at most one every 500 ms after an actor, a profile (created, saved or deleted), a
//   publication, an extension or the counters changed, and one every 5 s (RAM and GPUs change on their own); `audio-policy` with it when the
//   view differs from the last one sent.
// - `actor`: each change of an actor of a machine (the chart feed).
// - `log`: each log line (the log tail).
// - `chat-test`, `image-test`: the current test job, at most one every 50 ms while it changes; the
//   image test without its image (`has_image` says whether there is one).
// - `enhancers`: the prompt enhancers' installs (at most one every 250 ms while one downloads) and
//   the last preview.
// - `pulls`: the model pulls, as `GET /api/v1/model-pulls` (at most one every 250 ms while they
//   download).
// - `request`: each answered inference request (the recent-requests view; the snapshot sends the
//   kept ones, oldest first).
import { PassThrough } from 'node:stream';
import type { ConsoleEvents, ImageTestJob } from '../system/observe/console.types.js';
import type { Service } from '../service.js';

export type ConsoleEventName = keyof ConsoleEvents;

/** One open stream: how an event reaches it, and how it is ended (the admin listener closes). */
export interface ConsoleStream {
  send<K extends ConsoleEventName>(name: K, data: ConsoleEvents[K]): void;
  end(): void;
}

export interface ConsoleFeedTiming {
  /** At most one status per this many ms after a change. */
  statusMs: number;
  /** A status this often whatever changed (RAM, GPUs). */
  statusTickMs: number;
  /** At most one chat-test or image-test event per this many ms. */
  testMs: number;
  /** A `: keep-alive` comment this often on every stream. */
  keepAliveMs: number;
}

/** The parts of the service the feed watches and reads. */
export type ConsoleFeedParts = Pick<
  Service,
  'status' | 'audio' | 'charts' | 'logs' | 'log' | 'counters' | 'profiles' | 'extensions' | 'recent' | 'chatTests' | 'imageTests' | 'enhancers' | 'enhancerPreviews' | 'pulls'
>;

export const CONSOLE_FEED_TIMING: ConsoleFeedTiming = { statusMs: 500, statusTickMs: 5_000, testMs: 50, keepAliveMs: 15_000 };
/** At most one `enhancers` (or `pulls`) event this often while an install (a pull) reports progress. */
const ENHANCERS_MS = 250;

/** What `GET /api/v1/prompt-enhancers` answers: each task's install and the last preview. */
export const enhancersView = (service: Pick<Service, 'enhancers' | 'enhancerPreviews'>) => ({ ...service.enhancers.view(), preview: service.enhancerPreviews.last() });

/** How many recent log lines a new stream gets. */
export const CONSOLE_LOG_LINES = 200;

/** The image test job as the stream shows it: its image left out. */
export function imageTestView(job: ImageTestJob | null): (Omit<ImageTestJob, 'b64_png'> & { b64_png: null; has_image: boolean }) | null {
  return job ? { ...job, b64_png: null, has_image: job.b64_png !== null } : null;
}

/**
 * Runs `run` after `poke()`, at most once every `ms`: pokes while one is pending or running are
 * folded into it (one more run follows a poke that came while it ran).
 */
class Coalesced {
  #timer: NodeJS.Timeout | undefined;
  #last = -Infinity;
  #running = false;
  #again = false;
  #on = false;

  constructor(
    readonly ms: number,
    readonly run: () => void | Promise<void>,
  ) {}

  start(): void {
    this.#on = true;
  }

  poke(): void {
    if (!this.#on) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    if (this.#timer) return;
    this.#timer = setTimeout(() => void this.#fire(), Math.max(0, this.#last + this.ms - Date.now()));
  }

  async #fire(): Promise<void> {
    this.#timer = undefined;
    this.#running = true;
    this.#last = Date.now();
    try {
      await this.run();
    } finally {
      this.#running = false;
      if (this.#again) {
        this.#again = false;
        this.poke();
      }
    }
  }

  stop(): void {
    this.#on = false;
    this.#again = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

export class ConsoleFeed {
  readonly #streams = new Set<ConsoleStream>();
  readonly #detach: Array<() => void> = [];
  readonly #status: Coalesced;
  readonly #chatTest: Coalesced;
  readonly #imageTest: Coalesced;
  readonly #enhancers: Coalesced;
  readonly #pulls: Coalesced;
  #lastAudio = '';
  #closed = false;

  constructor(
    private readonly service: ConsoleFeedParts,
    readonly timing: ConsoleFeedTiming = CONSOLE_FEED_TIMING,
  ) {
    this.#status = new Coalesced(timing.statusMs, () => this.#sendStatus());
    this.#chatTest = new Coalesced(timing.testMs, () => this.#broadcast('chat-test', { job: service.chatTests.current() }));
    this.#imageTest = new Coalesced(timing.testMs, () => this.#broadcast('image-test', { job: imageTestView(service.imageTests.current()) }));
    this.#enhancers = new Coalesced(ENHANCERS_MS, () => this.#broadcast('enhancers', enhancersView(service)));
    this.#pulls = new Coalesced(ENHANCERS_MS, () => this.#broadcast('pulls', { pulls: service.pulls.list() }));
  }

  /** Open streams (tests look at it). */
  get size(): number {
    return this.#streams.size;
  }

  /**
   * Sends the snapshot to a new stream, then adds it; resolves with its removal. Nothing can come
   * between the snapshot and the first change: after the awaited parts, all is synchronous.
   */
  async open(stream: ConsoleStream): Promise<() => void> {
    const { service } = this;
    const [status, audio] = await Promise.all([service.status(), service.audio.view()]);
    if (this.#closed) {
      stream.end();
      return () => {};
    }
    stream.send('status', status);
    stream.send('audio-policy', audio);
    this.#lastAudio = JSON.stringify(audio);
    for (const actor of service.charts.actors()) stream.send('actor', actor);
    for (const line of service.logs.lines({ limit: CONSOLE_LOG_LINES })) stream.send('log', line);
    stream.send('chat-test', { job: service.chatTests.current() });
    stream.send('image-test', { job: imageTestView(service.imageTests.current()) });
    stream.send('enhancers', enhancersView(service));
    stream.send('pulls', { pulls: service.pulls.list() });
    for (const record of service.recent.list()) stream.send('request', record);
    this.#streams.add(stream);
    if (this.#streams.size === 1) this.#attach();
    return () => this.#remove(stream);
  }

  /** Ends every open stream (the admin listener is closing); later streams end at once. */
  close(): void {
    this.#closed = true;
    for (const stream of [...this.#streams]) {
      this.#remove(stream);
      stream.end();
    }
  }

  #remove(stream: ConsoleStream): void {
    if (!this.#streams.delete(stream)) return;
    if (this.#streams.size === 0) this.#detachAll();
  }

  #broadcast<K extends ConsoleEventName>(name: K, data: ConsoleEvents[K]): void {
    for (const stream of this.#streams) stream.send(name, data);
  }

  async #sendStatus(): Promise<void> {
    try {
      const [status, audio] = await Promise.all([this.service.status(), this.service.audio.view()]);
      this.#broadcast('status', status);
      const text = JSON.stringify(audio);
      if (text !== this.#lastAudio) this.#broadcast('audio-policy', audio);
      this.#lastAudio = text;
    } catch (error) {
      this.service.log.warn({ err: error }, 'console feed: the status could not be read');
    }
  }

  #attach(): void {
    const { service } = this;
    const status = () => this.#status.poke();
    const chatTest = () => this.#chatTest.poke();
    const imageTest = () => this.#imageTest.poke();
    const enhancers = () => {
      this.#enhancers.poke();
      status();
    };
    const actor = (view: ConsoleEvents['actor']) => {
      this.#broadcast('actor', view);
      status();
    };
    const pulls = () => this.#pulls.poke();
    const log = (line: ConsoleEvents['log']) => this.#broadcast('log', line);
    const request = (record: ConsoleEvents['request']) => this.#broadcast('request', record);
    for (const c of [this.#status, this.#chatTest, this.#imageTest, this.#enhancers, this.#pulls]) c.start();
    service.charts.on('actor', actor);
    service.logs.on('line', log);
    service.recent.on('request', request);
    service.counters.on('change', status);
    service.profiles.on('profile.created', status);
    service.profiles.on('profile.changed', status);
    service.profiles.on('publication.changed', status);
    service.extensions.on('changed', status);
    service.chatTests.on('change', chatTest);
    service.imageTests.on('change', imageTest);
    // An install's progress; its end clears a blocker, which the status shows.
    service.enhancers.on('change', enhancers);
    service.enhancerPreviews.on('change', enhancers);
    service.pulls.on('change', pulls);
    const tick = setInterval(status, this.timing.statusTickMs);
    this.#detach.push(
      () => service.charts.off('actor', actor),
      () => service.logs.off('line', log),
      () => service.recent.off('request', request),
      () => service.counters.off('change', status),
      () => service.profiles.off('profile.created', status),
      () => service.profiles.off('profile.changed', status),
      () => service.profiles.off('publication.changed', status),
      () => service.extensions.off('changed', status),
      () => service.chatTests.off('change', chatTest),
      () => service.imageTests.off('change', imageTest),
      () => service.enhancers.off('change', enhancers),
      () => service.enhancerPreviews.off('change', enhancers),
      () => service.pulls.off('change', pulls),
      () => clearInterval(tick),
      () => {
        for (const c of [this.#status, this.#chatTest, this.#imageTest, this.#enhancers, this.#pulls]) c.stop();
      },
    );
  }

  #detachAll(): void {
    for (const undo of this.#detach.splice(0)) undo();
  }
}

/**
 * What an events stream may have waiting for a client that does not read (bytes): past it the
 * stream ends, and the page reconnects and gets a fresh snapshot instead of the backlog.
 */
export const EVENTS_BACKLOG_LIMIT = 4 * 1024 * 1024;
/** How often an open stream checks that its session still holds (logout, password change, expiry). */
const SESSION_CHECK_MS = 2_000;

/**
 * One events stream as server-sent events: the feed's events framed as `event:`/`data:`, a
 * keep-alive comment, and an end when the session no longer holds (`stillValid`), when the client
 * falls more than EVENTS_BACKLOG_LIMIT behind (`waiting` says what the connection holds unsent),
 * or when the feed closes. `closed` runs once the body is gone, whatever ended it.
 */
export async function eventStream(
  feed: ConsoleFeed,
  options: { stillValid: () => boolean; waiting: () => number; log: { warn(fields: object, message: string): void }; closed: () => void },
): Promise<PassThrough> {
  const body = new PassThrough();
  const keepAlive = setInterval(() => body.write(': keep-alive\n\n'), feed.timing.keepAliveMs);
  const sessionCheck = setInterval(() => {
    if (!options.stillValid()) body.end();
  }, SESSION_CHECK_MS);
  let remove = () => {};
  body.once('close', () => {
    clearInterval(keepAlive);
    clearInterval(sessionCheck);
    remove();
    options.closed();
  });
  remove = await feed.open({
    send: (name, data) => {
      if (body.writableEnded) return;
      if (body.writableLength + options.waiting() > EVENTS_BACKLOG_LIMIT) {
        options.log.warn({ route: '/api/v1/events' }, 'an events stream fell behind by more than 4 MiB: it is ended, the page reconnects');
        body.end();
        return;
      }
      body.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
    },
    end: () => body.end(),
  });
  return body;
}
