// `endpoint.json` (spec 2.3, CONTRACT section 2): the remembered started/stopped flag, the inference
// listener's address and the published profile ids, in the order they were published; the
// operator's switches for what goes beyond the specification (CONTRACT section 9); and the
// inference port range that the installer saved (`service-deck update --api-ports`, spec 8), which
// every later start uses (src/config.ts, withSavedPortRange).
import path from 'node:path';
import { z } from 'zod';
import { readJsonFile, StateFileError, WriteQueue, writeJsonAtomic } from './files.js';

export const DEFAULT_INFERENCE_HOST = '127.0.0.1';
export const DEFAULT_INFERENCE_PORT = 8120;

const portRangeSchema = z
  .strictObject({ first: z.number().int().min(1024).max(65535), last: z.number().int().min(1024).max(65535) })
  .refine((range) => range.first <= range.last, 'first must not be above last');

/**
 * What goes beyond the specification, each the operator's switch and off by default (CONTRACT
 * section 9): `responses`, OpenAI's Responses API at `POST /v1/responses` on the chat profiles.
 */
export const extensionsSchema = z.object({ responses: z.boolean().default(false) });
export type Extensions = z.output<typeof extensionsSchema>;
export const EXTENSION_NAMES = ['responses'] as const satisfies ReadonlyArray<keyof Extensions>;
export type ExtensionName = (typeof EXTENSION_NAMES)[number];
export const DEFAULT_EXTENSIONS: Readonly<Extensions> = Object.freeze({ responses: false });

export const endpointRecordSchema = z.looseObject({
  running: z.boolean(),
  port: z.number().int().min(1).max(65535),
  host: z.string().min(1).default(DEFAULT_INFERENCE_HOST),
  published: z.array(z.string()).default([]),
  /** Absent: no range saved (SERVICE_DECK_API_PORTS or 1024-65535 apply). */
  api_ports: portRangeSchema.optional(),
  /** Absent in a file written before the extensions existed: every one off. */
  extensions: extensionsSchema.default({ ...DEFAULT_EXTENSIONS }),
});
export type EndpointRecord = z.output<typeof endpointRecordSchema>;

export class EndpointStore {
  readonly file: string;
  #record: EndpointRecord;
  /** Whether `endpoint.json` existed when it was opened (false: the first start). */
  readonly existed: boolean;
  readonly #writes = new WriteQueue();

  private constructor(file: string, record: EndpointRecord, existed: boolean) {
    this.file = file;
    this.#record = record;
    this.existed = existed;
  }

  /**
   * Reads `endpoint.json`; writes nothing. Without the file, the record of a first start: stopped,
   * nothing published, on `firstPort` (`--api-port`) or 8120.
   */
  static async open(dir: string, firstPort: number = DEFAULT_INFERENCE_PORT): Promise<EndpointStore> {
    const file = path.join(dir, 'endpoint.json');
    const raw = await readJsonFile(file);
    if (raw === undefined) {
      return new EndpointStore(file, { running: false, port: firstPort, host: DEFAULT_INFERENCE_HOST, published: [], extensions: { ...DEFAULT_EXTENSIONS } }, false);
    }
    const parsed = endpointRecordSchema.safeParse(raw);
    if (!parsed.success) throw new StateFileError(file, `has unexpected content: ${z.prettifyError(parsed.error)}`);
    return new EndpointStore(file, parsed.data, true);
  }

  get record(): Readonly<EndpointRecord> {
    return this.#record;
  }

  /** Resolves once every update queued so far is on disk (or has failed and been logged). */
  flushed(): Promise<void> {
    return this.#writes.idle();
  }

  /**
   * Writes the merged record atomically; the in-memory copy changes only after the write succeeded.
   * A function patch is computed from the record as it is when this write's turn comes (after the
   * writes queued before it), for a field that merges rather than replaces.
   */
  update(patch: Partial<EndpointRecord> | ((now: Readonly<EndpointRecord>) => Partial<EndpointRecord>)): Promise<EndpointRecord> {
    return this.#writes.run(async () => {
      const next = { ...this.#record, ...(typeof patch === 'function' ? patch(this.#record) : patch) };
      await writeJsonAtomic(this.file, next);
      this.#record = next;
      return next;
    });
  }
}
