// Counters and histograms for the request path, shown through prom-client's registry. prom-client's
// own label children validate and hash their labels on every `inc()` and `observe()` (an object and
// a string per call, about a microsecond each); these keep each series as plain numbers bound once
// per label tuple, so a record is an addition and, for a histogram, a walk over at most 16 bounds.
// The registry reads them only when it renders GET /metrics (the `get()` it calls on every metric).
import type { Metric, Registry } from 'prom-client';

export interface CounterSeries {
  inc(amount?: number): void;
}

export interface HistogramSeries {
  observe(value: number): void;
}

class CounterValue implements CounterSeries {
  value = 0;
  inc(amount = 1): void {
    this.value += amount;
  }
}

class HistogramValue implements HistogramSeries {
  /** Per bucket (not cumulative) counts; the last one is +Inf. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]!) i += 1;
    this.counts[i]! += 1;
    this.sum += value;
    this.count += 1;
  }
}

type Labels = Record<string, string>;
type Sample = { labels: Labels | Record<string, string | number>; value: number; metricName?: string };

/** One metric family: its series by label values, each made once. */
abstract class Family<S> {
  readonly #series = new Map<string, { labels: Labels; series: S }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    // The registry needs only `name` and `get()` of a metric; these are not prom-client classes.
    registry.registerMetric(this as unknown as Metric);
  }

  protected abstract make(): S;
  protected abstract samples(labels: Labels, series: S): Sample[];
  abstract readonly type: 'counter' | 'histogram';

  /** The series of these label values (in `labelNames` order); callers keep it. */
  labels(...values: string[]): S {
    const key = values.join('\u0000');
    let entry = this.#series.get(key);
    if (!entry) {
      if (values.length !== this.labelNames.length) throw new Error(`${this.name} takes the labels ${this.labelNames.join(', ')}`);
      const labels = Object.fromEntries(this.labelNames.map((name, i) => [name, values[i] ?? '']));
      entry = { labels, series: this.make() };
      this.#series.set(key, entry);
    }
    return entry.series;
  }

  get() {
    const values: Sample[] = [];
    for (const { labels, series } of this.#series.values()) values.push(...this.samples(labels, series));
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values, aggregator: 'sum' as const });
  }
}

export class FastCounter extends Family<CounterValue> {
  readonly type = 'counter';
  protected make() {
    return new CounterValue();
  }
  protected samples(labels: Labels, series: CounterValue): Sample[] {
    return [{ labels, value: series.value }];
  }
}

export class FastHistogram extends Family<HistogramValue> {
  readonly type = 'histogram';
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    registry: Registry,
    readonly buckets: readonly number[],
  ) {
    super(name, help, labelNames, registry);
  }
  protected make() {
    return new HistogramValue(this.buckets);
  }
  protected samples(labels: Labels, series: HistogramValue): Sample[] {
    const out: Sample[] = [];
    let cumulative = 0;
    this.buckets.forEach((bound, i) => {
      cumulative += series.counts[i] ?? 0;
      out.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: bound }, value: cumulative });
    });
    out.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: '+Inf' }, value: series.count });
    out.push({ metricName: `${this.name}_sum`, labels, value: series.sum });
    out.push({ metricName: `${this.name}_count`, labels, value: series.count });
    return out;
  }
}
