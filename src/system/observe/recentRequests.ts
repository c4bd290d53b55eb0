// The inference listener's recent answers for the operator console (`GET /api/v1/requests`, the
// `request` events of `GET /api/v1/events`): the last RECENT_REQUESTS, in RAM only, each with its
// route, profile, status, duration and, for a chat answer, its queue wait, time to first token,
// token counts and speed. A record holds numbers and names only: never a prompt or an answer
// (spec 5, rule 4), and nothing of it is written to disk.
import { EventEmitter } from 'eventemitter3';
import type { RecentRequestView } from './console.types.js';

export const RECENT_REQUESTS = 200;

export type RecentRequest = Omit<RecentRequestView, 'seq'>;

export class RecentRequests extends EventEmitter<{ request: [record: RecentRequestView] }> {
  readonly #records: RecentRequestView[] = [];
  #seq = 0;

  constructor(readonly limit = RECENT_REQUESTS) {
    super();
  }

  record(request: RecentRequest): void {
    this.#seq += 1;
    const record: RecentRequestView = { seq: this.#seq, ...request };
    this.#records.push(record);
    if (this.#records.length > this.limit) this.#records.splice(0, this.#records.length - this.limit);
    this.emit('request', record);
  }

  /** The kept records, oldest first. */
  list(): RecentRequestView[] {
    return this.#records.map((record) => ({ ...record }));
  }
}
