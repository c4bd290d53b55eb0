// Every field of OpenAI's request schemas (OpenAI's official openapi.json) is known
// to the route that takes the request, and each has one fate. Only a field that no OpenAI schema
// names is an unknown extension field (spec 4.2: 400 unknown_parameter). The fate tables sit beside
// each request's schema (chat.schema.ts, routes/inference/*.ts); docs/api.md lists them, and
// test/e2e/openaiFields.test.ts holds them against openapi.json and the docs.
import { z } from 'zod';

/**
 * - honoured: the service acts on it (some values may be refused, each with its reason);
 * - passed: it goes to the worker (llama-server) as it is;
 * - ignored: accepted and checked, and has no effect; only where that is harmless;
 * - refused: any value but null is a 400 invalid_value that names the field and says it is not offered.
 */
export const FATES = ['honoured', 'passed', 'ignored', 'refused'] as const;
export type Fate = (typeof FATES)[number];

/** The fate of each field of one OpenAI request schema, by the schema's field name. */
export type FieldFates = Readonly<Record<string, Fate>>;

/** The words of a refusal: the field (or the value) and what this endpoint does not offer. */
export const notOffered = (what: string, why: string) => `${what} is not offered by this endpoint: ${why}`;

/** A standard field whose every value but null is refused (the fate `refused`). */
export const refusedField = (field: string, why: string) =>
  z
    .unknown()
    .refine((value) => value === null, notOffered(field, why))
    .optional();
