// The service's Prometheus metrics, on a private prom-client registry that the admin
// listener's GET /metrics renders. Every series is prom-client's own labelled child, bound once per
// label tuple and kept (`Bound`), so a request costs a few Map lookups and prom-client's `inc()` and
// `observe()` (`npm run bench:chat -- --own` shows no difference against plain numbers read at the
// scrape: 0.566 against 0.575 ms added at p50, five interleaved pairs).
//
// Where the numbers come from:
// - the supervisor's own events: what it hears (`gpu.reserve`, `worker.loaded`, `worker.exited`,
//   `gpu.release`, `job.cancel`, seen through the actor system's inspection, like the console's
//   chart feed) and what it emits (`gpu.granted`, `gpu.denied`, `gpu.revoked`, `worker.unload`):
//   queue wait, rejections, worker loads, load time, unloads by reason, crashes by diagnosis;
// - the listeners' access hook (src/routes/metrics.ts): requests by status and their latency, and
//   for chat the time to the first token and the answer's token usage;
// - at scrape time only: the queue and the workers as the supervisor's snapshot has them, the GPUs
//   (the same probe as the status), the RAM budget, and the process (prom-client's defaults).
//
// Label values come only from known sets: listener and route names, profile names (the `model`
// clients send, checked against the stored profiles), worker kinds, denial, exit and unload codes,
// GPU UUIDs. No prompt, answer, file path or free text is ever a label. A profile's series live as
// long as its name: when it is deleted, or renamed, every series labelled with the name it no
// longer has is removed (`#forgetGone`), and what comes later of its jobs counts under `model=""`.
import type { InspectionEvent } from 'xstate';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { JobKind, JobPhase, JobSpec, SupervisorEvent, WorkerKind } from '../../../machines/supervisor/index.js';
import { WORKER_KINDS } from '../../../machines/supervisor/index.js';
import { probeGpus } from '../../adapters/gpus.js';
import { ramBudget, readRamFacts } from '../../adapters/memory.js';
import type { Config } from '../../config.js';
import { IMAGE_ALIAS } from '../../store/profile.schema.js';
import type { ProfileStore } from '../../store/profiles.js';
import type { SupervisorActor } from '../scheduler.js';
import { ownPids } from './status.js';

const MIB = 1024 * 1024;
const JOB_KINDS: readonly JobKind[] = ['chat', 'image', 'tts', 'stt'];
/** Far above what can be in flight (16 waiting, the running ones, the tests). */
const MAX_TRACKED_JOBS = 4096;
const PREFIX = 'service_deck_';

/** Seconds: from a fast cached answer to a long stream, an image, or the queue's 600 s limit. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
/** Seconds a worker takes from its start to loaded (a model load may take minutes). */
const LOAD_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
/** Generated tokens per second of one answer. */
const SPEED_BUCKETS = [1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000];

/** One series of a labelled counter or histogram: prom-client's child, bound once per label tuple. */
export interface CounterSeries {
  inc(amount?: number): void;
}
export interface HistogramSeries {
  observe(value: number): void;
}

const counter = (registry: Registry, name: string, help: string, labelNames: readonly string[]) => new Counter({ name: PREFIX + name, help, labelNames, registers: [registry] });

const histogram = (registry: Registry, name: string, help: string, labelNames: readonly string[], buckets: readonly number[]) =>
  new Histogram({ name: PREFIX + name, help, labelNames, buckets: [...buckets], registers: [registry] });

/** The label value of a request or job without a known model (a list route, an unknown name). */
export const NO_MODEL = '';

/** Label children bound once per distinct value tuple: later records cost only Map lookups. */
export class Bound<T> {
  readonly #top = new Map<string, Map<string, T>>();
  constructor(readonly make: (a: string, b: string) => T) {}

  get(a: string, b: string): T {
    let inner = this.#top.get(a);
    if (!inner) this.#top.set(a, (inner = new Map()));
    let child = inner.get(b);
    if (!child) inner.set(b, (child = this.make(a, b)));
    return child;
  }

  /** Every second value bound so far (the model, where that is the second label). */
  seconds(): Set<string> {
    const values = new Set<string>();
    for (const inner of this.#top.values()) for (const b of inner.keys()) values.add(b);
    return values;
  }

  /** Unbinds every child whose second value is `b`, each handed to `removed` first (to remove its series). */
  drop(b: string, removed: (a: string, child: T) => void): void {
    for (const [a, inner] of this.#top) {
      const child = inner.get(b);
      if (child === undefined) continue;
      removed(a, child);
      inner.delete(b);
    }
  }
}

/** The series of one route and model of one listener. */
export interface RequestSeries {
  /** Requests by status code, bound per code as they are seen. */
  readonly codes: Map<number, CounterSeries>;
  duration: HistogramSeries;
}

/** The chat series of one route and model: first token, token usage and generation speed. */
export interface ChatSeries {
  firstToken: HistogramSeries;
  promptTokens: CounterSeries;
  completionTokens: CounterSeries;
  tokensPerSecond: HistogramSeries;
}

/** What a job is labelled with, from its reservation request. */
interface JobLabels {
  kind: WorkerKind;
  model: string;
  at: number;
}

export interface MetricsDeps {
  config: Pick<Config, 'env' | 'ramReserveMiB'>;
  /** The stored profiles: a model label lives as long as a profile has that name. */
  profiles?: Pick<ProfileStore, 'byName' | 'on'>;
  now?: () => number;
}

export class Metrics {
  readonly registry = new Registry();
  readonly #now: () => number;
  readonly #profiles: MetricsDeps['profiles'];
  #supervisor: SupervisorActor | undefined;
  /** Jobs between their reservation request and its end, for the labels of what follows. */
  readonly #jobs = new Map<string, JobLabels>();
  /** Per worker kind, the start being loaded: its generation, model and when it was granted. */
  readonly #starting = new Map<WorkerKind, { generation: number; model: string; at: number }>();

  readonly #requests = counter(this.registry, 'http_requests_total', 'Answered HTTP requests by listener, route, model (profile name) and status code.', ['listener', 'route', 'model', 'code']);
  readonly #duration = histogram(this.registry, 'http_request_duration_seconds', 'Time from a request to the end of its answer (a stream: its last byte), by listener, route and model.', ['listener', 'route', 'model'], LATENCY_BUCKETS);
  readonly #firstToken = histogram(this.registry, 'time_to_first_token_seconds', 'Chat: time from the request to the first byte of its answer (a stream: its first chunk), by route and model.', ['route', 'model'], LATENCY_BUCKETS);
  readonly #promptTokens = counter(this.registry, 'prompt_tokens_total', "Chat: prompt tokens of answered requests (the worker's usage), by route and model.", ['route', 'model']);
  readonly #completionTokens = counter(this.registry, 'completion_tokens_total', "Chat: generated tokens of answered requests (the worker's usage), by route and model.", ['route', 'model']);
  readonly #tokensPerSecond = histogram(this.registry, 'tokens_per_second', "Chat: generation speed of one answer in tokens per second (the worker's timings; model loading and queue waiting not included), by route and model.", ['route', 'model'], SPEED_BUCKETS);
  readonly #queueWait = histogram(this.registry, 'queue_wait_seconds', 'Time from a reservation request to its grant (queue and memory check), by job kind and model.', ['kind', 'model'], LATENCY_BUCKETS);
  readonly #rejections = counter(this.registry, 'queue_rejections_total', 'Reservations refused (queue_full, queue_timeout, profile_changed, endpoint_stopped, resources_busy, insufficient_memory, ...), by job kind and code.', ['kind', 'code']);
  readonly #revocations = counter(this.registry, 'reservations_revoked_total', 'Running jobs whose reservation was taken back (worker_failed, resources_busy, endpoint_stopped, runtime_missing), by job kind and code.', ['kind', 'code']);
  readonly #loads = counter(this.registry, 'worker_loads_total', 'Worker starts that reached loaded, by worker kind and model.', ['kind', 'model']);
  readonly #loadTime = histogram(this.registry, 'worker_load_seconds', 'Time from a worker start (its grant) to loaded, by worker kind and model.', ['kind', 'model'], LOAD_BUCKETS);
  readonly #unloads = counter(this.registry, 'worker_unloads_total', 'Worker unloads the supervisor ordered, by worker kind and unload code.', ['kind', 'reason']);
  readonly #crashes = counter(this.registry, 'worker_crashes_total', 'Worker processes that ended on their own, by worker kind and diagnosis (ram_oom, gpu_oom, model_error, timeout, unclear).', ['kind', 'cause']);

  readonly #requestSeries: Map<string, Bound<RequestSeries>> = new Map();
  readonly #chatSeries = new Bound<ChatSeries>((route, model) => ({
    firstToken: this.#firstToken.labels(route, model),
    promptTokens: this.#promptTokens.labels(route, model),
    completionTokens: this.#completionTokens.labels(route, model),
    tokensPerSecond: this.#tokensPerSecond.labels(route, model),
  }));
  readonly #queueWaits = new Bound((kind, model) => this.#queueWait.labels(kind, model));
  readonly #rejected = new Bound((kind, code) => this.#rejections.labels(kind, code));
  readonly #revoked = new Bound((kind, code) => this.#revocations.labels(kind, code));
  readonly #loaded = new Bound((kind, model) => ({ count: this.#loads.labels(kind, model), time: this.#loadTime.labels(kind, model) }));
  readonly #unloaded = new Bound((kind, reason) => this.#unloads.labels(kind, reason));
  readonly #crashed = new Bound((kind, cause) => this.#crashes.labels(kind, cause));

  constructor(deps: MetricsDeps) {
    this.#now = deps.now ?? Date.now;
    this.#profiles = deps.profiles;
    // A profile deleted or renamed: the series of the name it no longer has go.
    deps.profiles?.on('profile.changed', () => this.#forgetGone());
    const { config } = deps;
    /** The supervisor once attached (the gauges below are read at scrape time only). */
    const supervised = () => this.#supervisor;
    collectDefaultMetrics({ register: this.registry });

    // Scrape-time views: the supervisor's snapshot (no I/O), then the probes the status uses.
    const jobGauge = (name: string, help: string, phases: readonly JobPhase[]) =>
      new Gauge({
        name: PREFIX + name,
        help,
        labelNames: ['kind'] as const,
        registers: [this.registry],
        collect() {
          this.reset();
          for (const kind of JOB_KINDS) this.labels(kind).set(0);
          for (const job of Object.values(supervised()?.getSnapshot().context.jobs ?? {})) if (phases.includes(job.phase)) this.labels(job.spec.kind).inc();
        },
      });
    jobGauge('queue_depth', 'Jobs waiting in the queue (at most 16; a job in its memory check included), by job kind.', ['waiting', 'checking']);
    jobGauge('jobs_running', 'Jobs holding a reservation, by job kind.', ['running']);
    new Gauge({
      name: `${PREFIX}worker_state`,
      help: 'Each worker kind\'s load state (1 for its current state: unloaded, loading, loaded, unloading, lost).',
      labelNames: ['kind', 'state'] as const,
      registers: [this.registry],
      collect() {
        this.reset();
        const workers = supervised()?.getSnapshot().context.workers;
        for (const kind of WORKER_KINDS) {
          const current = workers?.[kind].state ?? 'unloaded';
          for (const state of ['unloaded', 'loading', 'loaded', 'unloading', 'lost'] as const) this.labels(kind, state).set(state === current ? 1 : 0);
        }
      },
    });
    const gpuGauge = (what: string, help: string) =>
      new Gauge({ name: `${PREFIX}gpu_memory_${what}_bytes`, help, labelNames: ['gpu'] as const, registers: [this.registry] });
    const gpuUsed = gpuGauge('used', 'GPU memory in use (every process), by GPU UUID, as the probe saw it at the scrape.');
    const gpuFree = gpuGauge('free', 'Free GPU memory by GPU UUID, as the probe saw it at the scrape.');
    const gpuTotal = gpuGauge('total', 'GPU memory by GPU UUID.');
    const ram = (what: string, help: string) => new Gauge({ name: `${PREFIX}ram_${what}_bytes`, help, registers: [this.registry] });
    const ramAvailable = ram('available', 'RAM a new worker may use before the reserve: the smaller of the host\'s available RAM and the cgroup\'s room.');
    const ramReserve = ram('reserve', 'RAM kept back from worker starts (SERVICE_DECK_RAM_RESERVE_MIB).');
    new Gauge({
      name: `${PREFIX}ram_budget_bytes`,
      help: 'The RAM budget of the memory check: available RAM minus the reserve.',
      registers: [this.registry],
      // One probe per scrape fills the GPU and RAM gauges beside this one.
      async collect() {
        const supervisor = supervised();
        const [inventory, facts] = await Promise.all([
          probeGpus(config.env, supervisor ? ownPids(supervisor) : new Set()).catch(() => ({ gpus: [] })),
          readRamFacts(),
        ]);
        for (const gauge of [gpuUsed, gpuFree, gpuTotal]) gauge.reset();
        for (const gpu of inventory.gpus) {
          gpuTotal.labels(gpu.uuid).set(gpu.memoryTotalMiB * MIB);
          gpuFree.labels(gpu.uuid).set(gpu.memoryFreeMiB * MIB);
          gpuUsed.labels(gpu.uuid).set((gpu.memoryTotalMiB - gpu.memoryFreeMiB) * MIB);
        }
        const budget = ramBudget(facts, config.ramReserveMiB * MIB);
        ramAvailable.set(facts.availableBytes);
        ramReserve.set(budget.reserveBytes);
        this.set(budget.budgetBytes);
      },
    });
  }

  /** The supervisor whose events and snapshot are measured; its emitted events are heard from here on. */
  attach(supervisor: SupervisorActor): void {
    this.#supervisor = supervisor;
    supervisor.on('gpu.granted', (event) => {
      const job = this.#jobs.get(event.jobId);
      if (!job) return;
      const now = this.#now();
      // An image step (after the job's enhancer) is the same job's second grant: no second queue wait.
      if (!event.step) this.#queueWaits.get(job.kind, this.#label(job.model)).observe((now - job.at) / 1000);
      // The image start behind an enhancer is timed from its own step, not from the enhancer's grant.
      if (event.start && (event.step || !event.enhancer)) this.#starting.set(event.worker, { generation: event.generation, model: job.model, at: now });
      if (event.enhancer) this.#starting.set('enhancer', { generation: event.enhancer.generation, model: job.model, at: now });
    });
    supervisor.on('gpu.denied', (event) => {
      this.#rejected.get(this.#jobs.get(event.jobId)?.kind ?? 'unknown', event.code).inc();
      this.#jobs.delete(event.jobId);
    });
    supervisor.on('gpu.revoked', (event) => {
      this.#revoked.get(this.#jobs.get(event.jobId)?.kind ?? 'unknown', event.code).inc();
    });
    supervisor.on('worker.unload', (event) => {
      this.#unloaded.get(event.kind, event.code).inc();
    });
  }

  /**
   * The inspection observer (next to the chart feed): the events the supervisor hears. Every other
   * actor's events return at the first comparison.
   */
  readonly observe = (inspection: InspectionEvent): void => {
    if (inspection.type !== '@xstate.event' || inspection.actorRef !== this.#supervisor) return;
    const event = inspection.event as SupervisorEvent;
    switch (event.type) {
      case 'gpu.reserve':
        // Every job ends with a release, a cancel or a denial; the cap only guards against a path that forgot one.
        if (this.#jobs.size >= MAX_TRACKED_JOBS) this.#jobs.delete(this.#jobs.keys().next().value as string);
        this.#jobs.set(event.job.id, { kind: event.job.kind, model: modelOf(event.job), at: event.job.at });
        break;
      case 'gpu.release':
      case 'job.cancel':
        this.#jobs.delete(event.jobId);
        break;
      case 'worker.loaded': {
        const start = this.#starting.get(event.kind);
        if (start?.generation !== event.generation) break;
        this.#starting.delete(event.kind);
        const series = this.#loaded.get(event.kind, this.#label(start.model));
        series.count.inc();
        series.time.observe((this.#now() - start.at) / 1000);
        break;
      }
      case 'worker.exited':
        if (this.#starting.get(event.kind)?.generation === event.generation) this.#starting.delete(event.kind);
        if (event.cause !== 'stopped') this.#crashed.get(event.kind, event.cause).inc();
        break;
      default:
        break;
    }
  };

  /** The request series of one listener, bound per route and model as they are first seen. */
  requests(listener: string): Bound<RequestSeries> {
    let bound = this.#requestSeries.get(listener);
    if (!bound) {
      bound = new Bound((route, model) => ({ codes: new Map(), duration: this.#duration.labels(listener, route, model) }));
      this.#requestSeries.set(listener, bound);
    }
    return bound;
  }

  /** Counts one answered request and its latency. */
  request(series: RequestSeries, listener: string, route: string, model: string, code: number, seconds: number): void {
    let counter = series.codes.get(code);
    if (!counter) series.codes.set(code, (counter = this.#requests.labels(listener, route, model, String(code))));
    counter.inc();
    series.duration.observe(seconds);
  }

  chat(route: string, model: string): ChatSeries {
    return this.#chatSeries.get(route, this.#label(model));
  }

  /** A job's model label when it is recorded: the name it was reserved under, or "" once no profile has that name. */
  #label(model: string): string {
    return model === NO_MODEL || model === IMAGE_ALIAS || !this.#profiles || this.#profiles.byName(model) ? model : NO_MODEL;
  }

  /** Removes every series labelled with a model that no profile is named any more (deleted, or renamed), with its bound children. */
  #forgetGone(): void {
    const models = new Set([...this.#chatSeries.seconds(), ...this.#queueWaits.seconds(), ...this.#loaded.seconds()]);
    for (const bound of this.#requestSeries.values()) for (const model of bound.seconds()) models.add(model);
    for (const model of models) if (this.#label(model) !== model) this.#forget(model);
  }

  #forget(model: string): void {
    for (const [listener, bound] of this.#requestSeries) {
      bound.drop(model, (route, series) => {
        for (const code of series.codes.keys()) this.#requests.remove(listener, route, model, String(code));
        this.#duration.remove(listener, route, model);
      });
    }
    this.#chatSeries.drop(model, (route) => {
      for (const metric of [this.#firstToken, this.#promptTokens, this.#completionTokens, this.#tokensPerSecond]) metric.remove(route, model);
    });
    this.#queueWaits.drop(model, (kind) => this.#queueWait.remove(kind, model));
    this.#loaded.drop(model, (kind) => {
      this.#loads.remove(kind, model);
      this.#loadTime.remove(kind, model);
    });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The Prometheus text exposition of every metric. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}

/** A job's model label: the name of the profile snapshot it carries. */
function modelOf(job: JobSpec): string {
  const name = (job.profile as { name?: unknown } | null)?.name;
  return typeof name === 'string' ? name : NO_MODEL;
}
