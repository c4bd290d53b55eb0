// What a JSON schema costs the chat worker before it reaches it. llama-server turns a request's
// JSON schema (response_format, the Responses API's text.format, a function tool's parameters)
// into a grammar and checks every candidate token against every parse the grammar still allows,
// on the one thread that serves all its slots. Some small schemas make that explode and hold the
// worker for everyone: a `pattern` whose repetitions nest (each nesting multiplies the ways one
// string can be parsed), an object with hundreds of optional properties (the grammar grows with
// their square), a schema nested thousands of levels deep. So a schema is measured here, in the
// request's validation, and refused with a 400 that names the field when it is over a limit.
//
// The limits come from the real llama-server (CPU build, one thread, a generated model with a
// 152k-token vocabulary like today's models, 40 tokens): nested products within the limit took
// 0.4 to 6 s of CPU per answer ((a{0,9}){0,9}: 1.3 s; ((a?){0,7}){0,7}: 6.4 s), while
// ((a{0,7}){0,7}){0,7} (343) held the worker past 28 s of CPU at a 32k vocabulary, and 4 or 5
// levels of {0,9} never gave a first token; 800 optional properties took 5.6 s before the first
// token, 2000 more than a minute. docs/api.md has the table.
import { z } from 'zod';

// A schema's depth is bounded already: no JSON body may nest more than 64 levels (jsonBody.ts), and
// 100 levels took the worker 0.1 s.
export const GRAMMAR_LIMITS = {
  /** JSON values in one schema (objects, arrays, strings, numbers, booleans, nulls; keys are not counted). */
  values: 1000,
  /** Characters of one `pattern`. */
  patternLength: 1000,
  /** The product of the bounds of repetitions that nest in one `pattern` (a repetition alone is not limited). */
  nestedRepetition: 100,
} as const;

/** What `*`, `+` and `{m,}` count as in that product (m when it is larger). */
export const UNBOUNDED_REPETITION = 10;

/** The keywords whose value is data (a literal value), never a schema: a `pattern` key there is no pattern. */
const DATA_KEYWORDS: ReadonlySet<string> = new Set(['const', 'enum', 'default', 'examples']);

/** A quantifier at `at` in `pattern`: what it counts and where it ends; undefined when there is none. */
function quantifier(pattern: string, at: number): { count: number; end: number } | undefined {
  const c = pattern[at];
  let count: number;
  let end: number;
  if (c === '?') [count, end] = [2, at + 1];
  else if (c === '*' || c === '+') [count, end] = [UNBOUNDED_REPETITION, at + 1];
  else if (c === '{') {
    const bounds = /^\{(\d+)(,(\d*))?\}/.exec(pattern.slice(at, at + 24));
    // A brace that opens no {m}, {m,} or {m,n} is a plain character.
    if (!bounds) return undefined;
    const least = Number(bounds[1]);
    count = bounds[2] === undefined ? least : bounds[3] === '' ? Math.max(least, UNBOUNDED_REPETITION) : Number(bounds[3]);
    end = at + bounds[0].length;
  } else return undefined;
  // A lazy or possessive mark changes no count.
  if (pattern[end] === '?' || pattern[end] === '+') end += 1;
  return { count: Math.max(count, 1), end };
}

/** Where the character class that opens at `at` (`[`) ends, just past its `]`. */
function classEnd(pattern: string, at: number): number {
  let i = at + 1;
  if (pattern[i] === '^') i += 1;
  // A `]` right at the start is a member, not the end.
  if (pattern[i] === ']') i += 1;
  for (; i < pattern.length; i += 1) {
    if (pattern[i] === '\\') i += 1;
    else if (pattern[i] === ']') return i + 1;
  }
  return pattern.length;
}

/**
 * The largest product of the bounds of repetitions that nest in `pattern` (1 when none nests in
 * another): `((a{0,9}){0,9}){0,9}` is 729, `(a*){0,9}` 90, `a{0,500}` and `\d{4}-\d{2}` 1.
 * Alternatives and sequences do not multiply (one string takes one of them at a time); only a
 * repetition around a group that holds a repetition does.
 */
export function nestedRepetition(pattern: string): number {
  /** Per open group: the largest product of a chain of repetitions inside it so far (0: none). */
  const groups: number[] = [0];
  let worst = 1;
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i];
    /** The largest product of repetitions inside the atom that ends at `i` (0: none). */
    let inner = 0;
    if (c === '(') {
      groups.push(0);
      i += 1;
      // (?:…), (?=…), (?!…), (?<name>…), (?<=…): the group's own mark is no quantifier.
      if (pattern[i] === '?') {
        i += 1;
        if (pattern[i] === '<' && pattern[i + 1] !== '=' && pattern[i + 1] !== '!') i = Math.max(pattern.indexOf('>', i), i) + 1;
        else i += 1;
      }
      continue;
    }
    if (c === '|') {
      i += 1;
      continue;
    }
    if (c === ')' && groups.length > 1) {
      inner = groups.pop()!;
      i += 1;
    } else if (c === '[') {
      i = classEnd(pattern, i);
    } else if (c === '\\') {
      i += 2;
    } else {
      i += 1;
    }
    const repeated = quantifier(pattern, i);
    let chain = inner;
    if (repeated) {
      chain = repeated.count * Math.max(inner, 1);
      if (inner > 0) worst = Math.max(worst, chain);
      i = repeated.end;
    }
    const depth = groups.length - 1;
    groups[depth] = Math.max(groups[depth]!, chain);
  }
  return worst;
}

export interface GrammarIssue {
  /** Where in the schema, for the 400's `param`. */
  path: Array<string | number>;
  message: string;
}

const WHY = "the chat worker's grammar for it would hold the worker for every request";

function patternIssue(pattern: string): string | undefined {
  if (pattern.length > GRAMMAR_LIMITS.patternLength) return `a pattern of ${pattern.length} characters is over the limit of ${GRAMMAR_LIMITS.patternLength}: ${WHY}`;
  const product = nestedRepetition(pattern);
  if (product > GRAMMAR_LIMITS.nestedRepetition) {
    return `the pattern nests repetitions whose bounds multiply to ${product > 1e15 ? 'more than 10^15' : product}, over the limit of ${GRAMMAR_LIMITS.nestedRepetition} (*, + and {m,} count as ${UNBOUNDED_REPETITION}): ${WHY}; nest fewer repetitions or give them smaller bounds`;
  }
  return undefined;
}

/**
 * The first limit a JSON schema goes over, with its place, or undefined. The walk is iterative and
 * stops at the limits, so a hostile schema costs no more than the limits allow.
 */
export function grammarCostIssue(schema: unknown): GrammarIssue | undefined {
  const stack: Array<{ value: unknown; path: Array<string | number>; data: boolean }> = [{ value: schema, path: [], data: false }];
  let values = 0;
  while (stack.length > 0) {
    const { value, path, data } = stack.pop()!;
    values += 1;
    if (values > GRAMMAR_LIMITS.values) return { path: [], message: `the schema holds more than ${GRAMMAR_LIMITS.values} values: ${WHY}` };
    if (typeof value !== 'object' || value === null) continue;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i -= 1) stack.push({ value: value[i], path: [...path, i], data });
      continue;
    }
    const entries = Object.entries(value as Record<string, unknown>);
    for (let i = entries.length - 1; i >= 0; i -= 1) {
      const [key, item] = entries[i]!;
      if (!data && key === 'pattern' && typeof item === 'string') {
        const problem = patternIssue(item);
        if (problem) return { path: [...path, key], message: problem };
      }
      // Under `properties` the keys are property names: a property named `const` holds a schema.
      const parentIsProperties = path.at(-1) === 'properties' || path.at(-1) === '$defs' || path.at(-1) === 'definitions';
      stack.push({ value: item, path: [...path, key], data: data || (!parentIsProperties && DATA_KEYWORDS.has(key)) });
    }
  }
  return undefined;
}

/** A JSON schema the worker turns into a grammar: any object, within the grammar limits (a 400 naming the place otherwise). */
export const boundedJsonSchema = z.record(z.string(), z.unknown()).superRefine((schema, context) => {
  const issue = grammarCostIssue(schema);
  if (issue) context.addIssue({ code: 'custom', path: issue.path, message: issue.message });
});
