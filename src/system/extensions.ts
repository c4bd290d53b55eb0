// The operator's switches for what goes beyond the specification (CONTRACT section 9), kept in
// `endpoint.json`: a default install offers exactly the specification, and each extension is off
// until an operator turns it on (`POST /api/v1/endpoint/extensions`, the console's overview,
// `service-deck extensions enable`). A switch takes effect on the next request, while the listener
// runs: the routes read `current` on every request, never a copy taken at start.
import { EventEmitter } from 'eventemitter3';
import type { EndpointStore, ExtensionName, Extensions as ExtensionFlags } from '../store/endpoint.js';
import type { Logger } from './observe/log.js';

/** What each extension serves, for the log, the refusals and the operator's views. */
export const EXTENSION_FACTS: Record<ExtensionName, { title: string; route: string }> = {
  responses: { title: "OpenAI's Responses API", route: 'POST /v1/responses' },
};

/** The words a client hears when it asks for an extension that is off (a 404, like an unknown route): `route` is the one it asked for. */
export function extensionOffMessage(name: ExtensionName, route = EXTENSION_FACTS[name].route): string {
  const { title } = EXTENSION_FACTS[name];
  return (
    `Unknown route: ${route}. ${title} goes beyond this endpoint's specification and is off; ` +
    `an operator can turn it on (the console's overview, or service-deck extensions enable ${name}).`
  );
}

export class Extensions extends EventEmitter<{ changed: [ExtensionFlags] }> {
  readonly #endpoint: EndpointStore;
  readonly #log: Logger;

  constructor(endpoint: EndpointStore, log: Logger) {
    super();
    this.#endpoint = endpoint;
    this.#log = log;
  }

  /** The switches in force: what the last write that reached the disk says. */
  get current(): Readonly<ExtensionFlags> {
    return this.#endpoint.record.extensions;
  }

  /** Whether `name` is on now. */
  isOn(name: ExtensionName): boolean {
    return this.#endpoint.record.extensions[name];
  }

  /**
   * Sets the switches named in `patch`; the others stay. In force once `endpoint.json` holds them
   * (a write that fails changes nothing and throws).
   */
  async set(patch: Partial<ExtensionFlags>): Promise<Readonly<ExtensionFlags>> {
    const before = this.current;
    // Merged inside the write queue's turn, so that two operators' switches do not undo each other.
    const record = await this.#endpoint.update((now) => ({ extensions: { ...now.extensions, ...patch } }));
    const after = record.extensions;
    for (const name of Object.keys(EXTENSION_FACTS) as ExtensionName[]) {
      if (before[name] !== after[name]) {
        const { title, route } = EXTENSION_FACTS[name];
        this.#log.info({ extension: name, on: after[name] }, `extension ${name} turned ${after[name] ? 'on' : 'off'}: ${route} (${title}) ${after[name] ? 'is served' : 'answers 404'} from the next request`);
      }
    }
    this.emit('changed', after);
    return after;
  }
}
