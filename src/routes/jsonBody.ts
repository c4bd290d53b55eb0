// What every parsed JSON body must be before its schema sees it: text that is
// Unicode (a lone surrogate such as "\ud800" parses, but no worker can encode it), and no deeper
// than a real request needs (JSON nested thousands of levels parses too, and then overflows the
// stack of whatever walks it recursively: the validator, the serializer, a worker). Both are the
// client's mistake, a 400 naming the field, found by one walk without recursion.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errors, type ApiError } from '../errors.js';

/** Levels of objects and arrays; a tool's JSON schema 30 levels deep uses about 60. */
export const MAX_JSON_DEPTH = 64;

/** A UTF-16 code unit of a surrogate pair standing alone (a whole pair is one code point here). */
const LONE_SURROGATE = /\p{Cs}/u;

interface Node {
  value: unknown;
  depth: number;
  key: string | undefined;
  parent: Node | undefined;
}

const pathOf = (node: Node | undefined): string | null => {
  const keys: string[] = [];
  for (let at = node; at?.key !== undefined; at = at.parent) keys.unshift(at.key);
  return keys.length > 0 ? keys.join('.') : null;
};

/** The first problem of a parsed body, or undefined when it has none. */
export function jsonBodyProblem(body: unknown): ApiError | undefined {
  const stack: Node[] = [{ value: body, depth: 0, key: undefined, parent: undefined }];
  for (let node = stack.pop(); node; node = stack.pop()) {
    const { value } = node;
    if (typeof value === 'string') {
      if (LONE_SURROGATE.test(value)) return errors.invalidValue(pathOf(node), `Invalid value for '${pathOf(node) ?? 'body'}': the text holds a lone UTF-16 surrogate, which is not Unicode.`);
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (node.depth >= MAX_JSON_DEPTH) {
      let top = node;
      while (top.parent?.key !== undefined) top = top.parent;
      return errors.invalidValue(top.key ?? null, `Invalid value${top.key ? ` for '${top.key}'` : ''}: JSON nested deeper than ${MAX_JSON_DEPTH} levels.`);
    }
    const entries = Object.entries(value);
    if (entries.some(([key]) => LONE_SURROGATE.test(key))) {
      return errors.invalidValue(pathOf(node), `Invalid key in '${pathOf(node) ?? 'body'}': it holds a lone UTF-16 surrogate, which is not Unicode.`);
    }
    // Children go on the stack last first, so the first problem in document order is found.
    for (const [key, child] of entries.reverse()) stack.push({ value: child, depth: node.depth + 1, key, parent: node });
  }
  return undefined;
}

/** The preValidation hook of both listeners. */
export function checkJsonBody(request: FastifyRequest, _reply: FastifyReply, done: (error?: Error) => void): void {
  // The callback form: no promise per request.
  done(jsonBodyProblem(request.body));
}
