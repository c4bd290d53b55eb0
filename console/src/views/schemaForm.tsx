// A form drawn from a JSON Schema: the schema the profile routes validate with (GET
// /api/v1/profile-schemas), so a field, its limits and its default are the API's own. Empty
// fields are left out of the body: the service fills in the default.
import type { JSX } from 'preact';
import { htmlPattern } from '../pattern.js';

export interface JsonSchema {
  type?: string;
  enum?: unknown[];
  const?: unknown;
  anyOf?: JsonSchema[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  minimum?: number;
  maximum?: number;
  multipleOf?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  default?: unknown;
  description?: string;
}

export type Values = Record<string, unknown>;

/** The schema without its `null` branch, and whether null is allowed. */
function unwrap(schema: JsonSchema): { schema: JsonSchema; nullable: boolean; choices: unknown[] | null } {
  const branches = schema.anyOf ?? [schema];
  const nonNull = branches.filter((b) => b.type !== 'null');
  const nullable = nonNull.length < branches.length;
  const consts = nonNull.filter((b) => b.const !== undefined).map((b) => b.const);
  const open = nonNull.find((b) => b.const === undefined);
  const base = open ?? nonNull[0] ?? {};
  const choices = base.enum ?? (open === undefined && consts.length > 0 ? consts : null);
  return { schema: { ...base, default: schema.default ?? base.default, description: schema.description ?? base.description }, nullable, choices };
}

/** `gpuSplit` → `gpu split`, `memoryMiB` → `memory MiB`, `top_p` → `top p`. */
const label = (key: string) =>
  key
    .replace(/([a-z])([A-Z])([a-z])/g, (_, a: string, b: string, c: string) => `${a} ${b.toLowerCase()}${c}`)
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .replace(/_/g, ' ');

function limits(s: JsonSchema): string {
  const parts: string[] = [];
  if (s.minimum !== undefined && s.maximum !== undefined) parts.push(`${s.minimum} to ${s.maximum}`);
  else if (s.minimum !== undefined) parts.push(`at least ${s.minimum}`);
  else if (s.maximum !== undefined) parts.push(`at most ${s.maximum}`);
  if (s.multipleOf !== undefined) parts.push(`a multiple of ${s.multipleOf}`);
  return parts.join(', ');
}

function fieldError(errors: Record<string, string>, path: string): string | undefined {
  return Object.entries(errors).find(([param]) => param === path || param.endsWith(`.${path}`) || path.endsWith(`.${param}`))?.[1];
}

interface FieldProps {
  name: string;
  path: string;
  schema: JsonSchema;
  value: unknown;
  required: boolean;
  errors: Record<string, string>;
  onChange: (value: unknown) => void;
}

function Field({ name, path, schema: raw, value, required, errors, onChange }: FieldProps): JSX.Element {
  const { schema, nullable, choices } = unwrap(raw);
  const id = `field-${path.replace(/\./g, '-')}`;
  const error = fieldError(errors, path);
  const hintParts = [required ? 'required' : '', limits(schema), schema.default !== undefined ? `default ${JSON.stringify(schema.default)}` : '', nullable && !schema.description?.includes('empty') ? 'empty: none' : '', schema.description ?? ''];
  const hint = hintParts.filter(Boolean).join('; ');
  const describedBy = [hint ? `${id}-hint` : '', error ? `${id}-error` : ''].filter(Boolean).join(' ') || undefined;
  const empty = nullable ? null : undefined;

  if (schema.type === 'object' && schema.properties) {
    const inner = (value ?? {}) as Values;
    return (
      <fieldset class="group">
        <legend>{label(name)}</legend>
        {Object.entries(schema.properties).map(([key, child]) => (
          <Field
            key={key}
            name={key}
            path={`${path}.${key}`}
            schema={child}
            value={inner[key]}
            required={schema.required?.includes(key) ?? false}
            errors={errors}
            onChange={(next) => {
              const copy = { ...inner };
              if (next === undefined) delete copy[key];
              else copy[key] = next;
              onChange(Object.keys(copy).length === 0 ? undefined : copy);
            }}
          />
        ))}
      </fieldset>
    );
  }

  let control: JSX.Element;
  if (choices) {
    control = (
      <select id={id} aria-describedby={describedBy} aria-invalid={error ? true : undefined} value={value === undefined || value === null ? '' : String(value)} onChange={(e) => onChange(e.currentTarget.value === '' ? empty : e.currentTarget.value)}>
        <option value="">{schema.default !== undefined ? `(default: ${String(schema.default)})` : '(none)'}</option>
        {choices.map((c) => (
          <option key={String(c)} value={String(c)}>
            {String(c)}
          </option>
        ))}
      </select>
    );
    if (raw.anyOf?.some((b) => b.const === undefined && b.type === 'string' && !b.enum)) {
      // A choice or free text (a device: cpu or a GPU UUID).
      control = (
        <>
          <input id={id} type="text" list={`${id}-choices`} aria-describedby={describedBy} aria-invalid={error ? true : undefined} value={value == null ? '' : String(value)} placeholder={choices.map(String).join(' or …')} onInput={(e) => onChange(e.currentTarget.value === '' ? empty : e.currentTarget.value)} />
          <datalist id={`${id}-choices`}>
            {choices.map((c) => (
              <option key={String(c)} value={String(c)} />
            ))}
          </datalist>
        </>
      );
    }
  } else if (schema.type === 'integer' || schema.type === 'number') {
    control = (
      <input
        id={id}
        type="number"
        inputMode={schema.type === 'integer' ? 'numeric' : 'decimal'}
        min={schema.minimum}
        max={schema.maximum}
        step={schema.multipleOf ?? (schema.type === 'integer' ? 1 : 'any')}
        placeholder={schema.default != null ? String(schema.default) : ''}
        aria-describedby={describedBy}
        aria-invalid={error ? true : undefined}
        required={required}
        value={typeof value === 'number' ? String(value) : ''}
        onInput={(e) => {
          const text = e.currentTarget.value;
          onChange(text === '' ? empty : Number(text));
        }}
      />
    );
  } else if (schema.type === 'boolean') {
    control = <input id={id} type="checkbox" aria-describedby={describedBy} checked={value === true} onChange={(e) => onChange(e.currentTarget.checked)} />;
  } else if (schema.type === 'array') {
    const numeric = schema.items?.type === 'number' || schema.items?.type === 'integer';
    const items = Array.isArray(value) ? value : [];
    control = numeric ? (
      <input
        id={id}
        type="text"
        inputMode="decimal"
        placeholder="comma-separated numbers"
        aria-describedby={describedBy}
        aria-invalid={error ? true : undefined}
        value={items.join(', ')}
        onChange={(e) => {
          const pieces = e.currentTarget.value.split(/[\s,]+/).filter(Boolean);
          // Something that is not a number goes to the service as typed: its 400 names the field.
          onChange(pieces.length === 0 ? empty : pieces.every((p) => Number.isFinite(Number(p))) ? pieces.map(Number) : e.currentTarget.value);
        }}
      />
    ) : (
      <textarea
        id={id}
        rows={Math.min(6, Math.max(2, items.length))}
        placeholder="one per line"
        aria-describedby={describedBy}
        aria-invalid={error ? true : undefined}
        value={items.join('\n')}
        onChange={(e) => {
          const lines = e.currentTarget.value.split('\n').map((l) => l.trim()).filter(Boolean);
          onChange(lines.length === 0 ? empty : lines);
        }}
      />
    );
  } else {
    control = (
      <input
        id={id}
        type="text"
        required={required}
        maxLength={schema.maxLength}
        pattern={htmlPattern(schema.pattern)}
        aria-describedby={describedBy}
        aria-invalid={error ? true : undefined}
        value={value == null ? '' : String(value)}
        onInput={(e) => onChange(e.currentTarget.value === '' ? empty : e.currentTarget.value)}
      />
    );
  }
  return (
    <div class="field">
      <label for={id}>{label(name)}</label>
      {control}
      {hint ? (
        <small id={`${id}-hint`} class="hint">
          {hint}
        </small>
      ) : null}
      {error ? (
        <small id={`${id}-error`} class="error" role="alert">
          {error}
        </small>
      ) : null}
    </div>
  );
}

export function SchemaFields(props: { schema: JsonSchema; values: Values; errors: Record<string, string>; path: string; onChange: (values: Values) => void }) {
  const { schema, values } = props;
  return (
    <>
      {Object.entries(schema.properties ?? {}).map(([key, child]) => (
        <Field
          key={key}
          name={key}
          path={`${props.path}.${key}`}
          schema={child}
          value={values[key]}
          required={schema.required?.includes(key) ?? false}
          errors={props.errors}
          onChange={(next) => {
            const copy = { ...values };
            if (next === undefined) delete copy[key];
            else copy[key] = next;
            props.onChange(copy);
          }}
        />
      ))}
    </>
  );
}
