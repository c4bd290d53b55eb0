// Request counters of the inference listener (CONTRACT section 6: requests, errors, rejected,
// by_route). `rejected` counts refusals (4xx: bad request, auth, queue full, profile changed),
// `errors` counts failures (5xx). Each recorded request emits `change` (the console's status feed).
import { EventEmitter } from 'eventemitter3';
import type { CounterSnapshot } from './console.types.js';

export class Counters extends EventEmitter<{ change: [] }> {
  #requests = 0;
  #errors = 0;
  #rejected = 0;
  readonly #byRoute = new Map<string, number>();
  #open = 0;

  /** A request arrived on the inference listener; `closed()` when its connection's answer is over. */
  opened(): void {
    this.#open += 1;
  }

  closed(): void {
    this.#open -= 1;
  }

  /** Requests of the inference listener whose answer is not over (what a stop waits for). */
  get open(): number {
    return this.#open;
  }

  record(route: string, status: number): void {
    this.#requests += 1;
    if (status >= 500) this.#errors += 1;
    else if (status >= 400) this.#rejected += 1;
    this.#byRoute.set(route, (this.#byRoute.get(route) ?? 0) + 1);
    this.emit('change');
  }

  snapshot(): CounterSnapshot {
    return { requests: this.#requests, errors: this.#errors, rejected: this.#rejected, by_route: Object.fromEntries(this.#byRoute) };
  }
}
