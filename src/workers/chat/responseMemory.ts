// Recent Responses, kept in memory for a while, so that what the Responses API's clients do by
// default works within a running service: `store` (on unless `false`; the AI SDK's OpenAI provider
// sends `store: true`), `previous_response_id`, `item_reference` items (the AI SDK names an earlier
// answer's items by them on every later turn and every step of a tool loop), and
// `GET /v1/responses/{id}`. Beyond the specification, as the Responses API is (CONTRACT section 9).
//
// - Bounded in bytes (the JSON of each Response and of its input, SERVICE_DECK_RESPONSES_MEMORY_MIB)
//   and by a time to live from each response's last use (SERVICE_DECK_RESPONSES_TTL_S): the least
//   recently used goes first, and one that is not used for that long goes.
// - Never written to disk and never logged: gone at a restart, emptied when the operator turns the
//   Responses API off.
// - Reachable only with the API token that made a response: each entry carries a keyed hash of that
//   token (the key is this process's own, random), compared in constant time. After
//   `rotate-token` the old entries are unreachable and age out. A response of another token reads
//   as one that is not kept.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { errors } from '../../errors.js';
import type { Extensions } from '../../system/extensions.js';
import type { Logger } from '../../system/observe/log.js';
import { responseIdOfItem } from './responses.js';
import { inputItem, type InputItem, type ResponsesRequest } from './responses.schema.js';

type Json = Record<string, unknown>;

interface Kept {
  /** The keyed hash of the token that made it. */
  owner: Buffer;
  /** The Response as GET /v1/responses/{id} answers it (JSON text). */
  response: string;
  /** Its own input items, references resolved (JSON text of InputItem[]); the instructions are not carried on, as OpenAI does not. */
  input: string;
  /** The response its request named in previous_response_id: the conversation before it. */
  previous: string | null;
}

export interface ResponseMemoryOptions {
  /** The bytes all kept responses may take (0: nothing is kept). */
  maxBytes: number;
  /** How long a response is kept after its last use. */
  ttlMs: number;
  log: Logger;
  /** The clock (tests). */
  now?: () => number;
}

/** What a request refers to, resolved: the conversation the worker gets, and the request's own items as they will be kept. */
export interface Recalled {
  request: ResponsesRequest;
  own: InputItem[];
}

/** What each entry costs beside its text: the entry, its key and the cache's own bookkeeping. */
const ENTRY_OVERHEAD = 256;

export class ResponseMemory {
  readonly #key = randomBytes(32);
  readonly #cache: LRUCache<string, Kept> | undefined;
  readonly #ttlMs: number;
  readonly #maxBytes: number;
  readonly #log: Logger;

  constructor({ maxBytes, ttlMs, log, now }: ResponseMemoryOptions) {
    this.#ttlMs = ttlMs;
    this.#maxBytes = maxBytes;
    this.#log = log;
    this.#cache =
      maxBytes > 0
        ? new LRUCache<string, Kept>({
            maxSize: maxBytes,
            sizeCalculation: (kept, id) => Buffer.byteLength(kept.response) + Buffer.byteLength(kept.input) + id.length + ENTRY_OVERHEAD,
            ttl: ttlMs,
            updateAgeOnGet: true,
            // An expired response leaves memory when it expires, not when it is next looked up.
            ttlAutopurge: true,
            // A clock of its own is read at every look-up, never cached for a millisecond.
            ...(now ? { perf: { now }, ttlResolution: 0 } : {}),
          })
        : undefined;
  }

  /** Whether responses are kept at all (SERVICE_DECK_RESPONSES_MEMORY_MIB is not 0). */
  get enabled(): boolean {
    return this.#cache !== undefined;
  }

  /** How many responses are kept and the bytes they count for. */
  get usage(): { responses: number; bytes: number } {
    this.#cache?.purgeStale();
    return { responses: this.#cache?.size ?? 0, bytes: this.#cache?.calculatedSize ?? 0 };
  }

  /** Empties the memory whenever the operator turns the Responses API off. */
  forgetWhenOff(extensions: Extensions): void {
    extensions.on('changed', (flags) => {
      if (flags.responses) return;
      const { responses } = this.usage;
      this.clear();
      if (responses > 0) this.#log.info({ responses }, 'the Responses API is off: the responses kept in memory are forgotten');
    });
  }

  clear(): void {
    this.#cache?.clear();
  }

  /** Keeps a Response that ended, with its own input items, for `token`. A response larger than the whole memory is not kept. */
  keep(token: string, response: Readonly<Json>, own: readonly InputItem[], previous: string | null): void {
    const id = response.id;
    if (!this.#cache || typeof id !== 'string') return;
    this.#cache.set(id, { owner: this.#owner(token), response: JSON.stringify(response), input: JSON.stringify(own), previous });
  }

  /** The Response `id` as JSON text, when `token` made it and it is still kept. */
  response(token: string, id: string): string | undefined {
    return this.#get(token, id)?.response;
  }

  /**
   * The request with what it names put in its place: the conversation of `previous_response_id`
   * first (each response's input, then its output, back to the first), then the request's own
   * items, each `item_reference` replaced by the item it names. A response or an item that is not
   * kept (or was made with another token) is a 400 that names it.
   */
  recall(token: string, request: ResponsesRequest): Recalled {
    const own: InputItem[] = typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : request.input.map((item, index) => (item.type === 'item_reference' ? this.#item(token, item.id, index) : item));
    const before = request.previous_response_id ? this.#conversation(token, request.previous_response_id) : [];
    if (before.length === 0 && own.every((item, index) => item === request.input[index])) return { request, own };
    return { request: { ...request, input: [...before, ...own] }, own };
  }

  /** Why a response or item is not found: what this service keeps, and how a client does without it. */
  forgotten(what: string): string {
    const minutes = Math.round(this.#ttlMs / 60_000);
    const kept = this.enabled
      ? `this service keeps responses only for a while: in memory, ${minutes >= 1 ? `${minutes} min` : `${Math.round(this.#ttlMs / 1000)} s`} after their last use, at most ${Math.round(this.#maxBytes / 1048576)} MiB of them, only for the API token that made them, and not across a restart or the Responses API being turned off`
      : 'this service keeps no responses (its operator set SERVICE_DECK_RESPONSES_MEMORY_MIB to 0)';
    return `${what} is not kept here: ${kept}. Send the conversation whole in input instead: with store: false (the AI SDK: providerOptions: { openai: { store: false } }) a client sends earlier answers as items, not as references.`;
  }

  #owner(token: string): Buffer {
    return createHmac('sha256', this.#key).update(token).digest();
  }

  /** An entry of `token`'s; a look-up refreshes its age. */
  #get(token: string, id: string): Kept | undefined {
    // peek first: another token's look-up must not refresh anyone's entry.
    const kept = this.#cache?.peek(id);
    if (!kept || !timingSafeEqual(kept.owner, this.#owner(token))) return undefined;
    return this.#cache?.get(id);
  }

  /** The conversation up to and with the response `id`: every input item, then its output, oldest first. */
  #conversation(token: string, id: string): InputItem[] {
    const chain: InputItem[][] = [];
    for (let at: string | null = id; at !== null; ) {
      const kept = this.#get(token, at);
      if (!kept) throw errors.invalidValue('previous_response_id', this.forgotten(at === id ? `The previous response ${id}` : `The response ${at}, which the previous response ${id} continues,`));
      const output = (JSON.parse(kept.response) as { output: Json[] }).output.map((item, index) => asInput(item, `previous_response_id (${at} output ${index})`));
      chain.unshift([...(JSON.parse(kept.input) as InputItem[]), ...output]);
      at = kept.previous;
    }
    return chain.flat();
  }

  /** The output item `id` of a kept response, as an input item. */
  #item(token: string, id: string, index: number): InputItem {
    const param = `input.${index}.id`;
    const responseId = responseIdOfItem(id);
    const kept = responseId === undefined ? undefined : this.#get(token, responseId);
    const item = kept && (JSON.parse(kept.response) as { output: Json[] }).output.find((output) => output.id === id);
    if (!item) throw errors.invalidValue(param, this.forgotten(`The item ${id} that item_reference names`));
    return asInput(item, param);
  }
}

/** A kept output item read as the input item it is (a message, a function call, reasoning), through the same schema as the client's items. */
function asInput(item: Json, param: string): InputItem {
  const parsed = inputItem.safeParse(item);
  if (!parsed.success) throw errors.invalidValue(param, `The kept item ${String(item.id)} cannot go back as input: ${parsed.error.issues[0]?.message ?? 'not an input item'}.`);
  return parsed.data;
}
