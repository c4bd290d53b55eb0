// Validates response bodies against OpenAI's official schema, ../shared/openai-openapi/openapi.json
// (OpenAPI 3.1, so JSON Schema 2020-12). A missing schema file fails the test: it is never skipped.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

const Ajv2020 = Ajv2020Module as unknown as typeof Ajv2020Module.default;
const addFormats = addFormatsModule as unknown as typeof addFormatsModule.default;

const here = path.dirname(fileURLToPath(import.meta.url));
export const OPENAPI_FILE = path.resolve(here, '../../../shared/openai-openapi/openapi.json');

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
  const document = nullableToType(JSON.parse(readFileSync(OPENAPI_FILE, 'utf8'))) as Record<string, unknown>;
  ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  addFormats(ajv);
  ajv.addFormat('unixtime', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= 0 });
  ajv.addSchema({ ...document, $id: 'openai' });
  return ajv;
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
  const document = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as Record<string, unknown>;
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
