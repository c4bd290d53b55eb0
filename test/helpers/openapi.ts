// Validates response bodies against OpenAI's official schema (OpenAPI 3.1, so JSON Schema
// 2020-12). The document is `$OPENAI_OPENAPI_FILE`, else `../shared/openai-openapi/openapi.json`
// beside the checkout; it is not part of the repository. Without it, only the schema assertions
// are skipped, each with its name and what to set (`matchesSchema`), and every other assertion of
// the tests runs. A `$OPENAI_OPENAPI_FILE` that names a missing file fails, never skips.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Test } from 'tap';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const Ajv2020 = Ajv2020Module as unknown as typeof Ajv2020Module.default;
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

const here = path.dirname(fileURLToPath(import.meta.url));
const BESIDE = path.resolve(here, '../../../shared/openai-openapi/openapi.json');

/** The schema document, or undefined when there is none. */
export const OPENAPI_FILE: string | undefined = (() => {
  const chosen = process.env.OPENAI_OPENAPI_FILE;
  if (chosen) {
    if (!existsSync(chosen)) throw new Error(`OPENAI_OPENAPI_FILE=${chosen}: no such file`);
    return path.resolve(chosen);
  }
  return existsSync(BESIDE) ? BESIDE : undefined;
})();

/** Why a schema assertion was skipped: what to set to run it. */
export const SCHEMA_SKIP = "OpenAI's schema document is missing: set OPENAI_OPENAPI_FILE to openai-openapi/openapi.json to check this";

/** The document's path, or an error that says how to get one (for code that cannot skip). */
function documentFile(): string {
  if (!OPENAPI_FILE) throw new Error(SCHEMA_SKIP);
  return OPENAPI_FILE;
}

let ajv: InstanceType<typeof Ajv2020> | undefined;

/**
 * OpenAPI 3.0's `nullable: true` survives in a few places of the 3.1 document; JSON Schema 2020-12
 * spells it as a `null` type. `{ type: T, nullable: true }` becomes `{ type: [T, 'null'] }`; a
 * `nullable` beside no type (an anyOf or a $ref) gets a `null` alternative.
 */
function nullableToType(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(nullableToType);
  if (node === null || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) out[key] = nullableToType(value);
  if (out.nullable === true) {
    delete out.nullable;
    if (typeof out.type === 'string') out.type = [out.type, 'null'];
    else if (Array.isArray(out.type)) out.type = [...(out.type as unknown[]), 'null'];
    else return { anyOf: [out, { type: 'null' }] };
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...(out.enum as unknown[]), null];
  } else if ('nullable' in out) delete out.nullable;
  return out;
}

function instance(): InstanceType<typeof Ajv2020> {
  if (ajv) return ajv;
  const document = nullableToType(JSON.parse(readFileSync(documentFile(), 'utf8'))) as Record<string, unknown>;
  ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  addFormats(ajv);
  ajv.addFormat('unixtime', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= 0 });
  ajv.addSchema({ ...document, $id: 'openai' });
  return ajv;
}

/**
 * Asserts that `body` matches components.schemas[name]; without the document, the same assertion
 * is reported as skipped, by its name and with what to set.
 */
export function matchesSchema(t: Test, name: string, body: unknown, message = `the body matches ${name}`): void {
  if (!OPENAPI_FILE) {
    t.pass(message, { skip: SCHEMA_SKIP });
    return;
  }
  t.same(openapiErrors(name, body), [], message);
}

/** Errors of `body` against components.schemas[name]; an empty array means valid. */
export function openapiErrors(name: string, body: unknown): string[] {
  const validate = instance().getSchema(`openai#/components/schemas/${name}`);
  if (!validate) throw new Error(`no schema ${name} in ${OPENAPI_FILE}`);
  if (validate(body)) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

/** A `$ref` inside the document, resolved. */
function resolveRef(document: Record<string, unknown>, ref: string): Record<string, unknown> {
  let node: unknown = document;
  for (const key of ref.replace(/^#\//, '').split('/')) node = (node as Record<string, unknown>)[key];
  if (!node || typeof node !== 'object') throw new Error(`no ${ref} in ${OPENAPI_FILE}`);
  return node as Record<string, unknown>;
}

/**
 * Every field name of a request schema: its properties and those of every allOf/anyOf/oneOf part
 * and $ref it is made of (CreateChatCompletionRequest is CreateModelResponseProperties, itself
 * ModelResponseProperties, and its own properties).
 */
export function requestFields(name: string): string[] {
  const document = JSON.parse(readFileSync(documentFile(), 'utf8')) as Record<string, unknown>;
  const fields = new Set<string>();
  const visit = (node: Record<string, unknown>) => {
    if (typeof node.$ref === 'string') return visit(resolveRef(document, node.$ref));
    for (const key of Object.keys((node.properties as object | undefined) ?? {})) fields.add(key);
    for (const part of ['allOf', 'anyOf', 'oneOf'] as const) for (const sub of (node[part] as Array<Record<string, unknown>> | undefined) ?? []) visit(sub);
  };
  visit(resolveRef(document, `#/components/schemas/${name}`));
  if (fields.size === 0) throw new Error(`${name} has no fields in ${OPENAPI_FILE}`);
  return [...fields].sort();
}

/**
 * The `type` values of a union schema's branches (oneOf/anyOf, through $refs and nested unions):
 * `Tool` gives `function`, `file_search`, `web_search`, …; a branch without a `type` gives none.
 */
export function unionTypes(name: string): string[] {
  const document = JSON.parse(readFileSync(documentFile(), 'utf8')) as Record<string, unknown>;
  const types = new Set<string>();
  const visit = (node: Record<string, unknown>) => {
    if (typeof node.$ref === 'string') return visit(resolveRef(document, node.$ref));
    const branches = [...((node.oneOf as Array<Record<string, unknown>> | undefined) ?? []), ...((node.anyOf as Array<Record<string, unknown>> | undefined) ?? [])];
    if (branches.length > 0) {
      for (const branch of branches) visit(branch);
      return;
    }
    let type = (node.properties as Record<string, Record<string, unknown>> | undefined)?.type;
    if (type && Array.isArray(type.anyOf)) type = (type.anyOf as Array<Record<string, unknown>>)[0];
    for (const value of (type?.enum as unknown[] | undefined) ?? []) if (typeof value === 'string') types.add(value);
  };
  visit(resolveRef(document, `#/components/schemas/${name}`));
  if (types.size === 0) throw new Error(`${name} has no typed branches in ${OPENAPI_FILE}`);
  return [...types].sort();
}
