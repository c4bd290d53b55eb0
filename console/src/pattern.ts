// Plain helpers of the console without DOM or JSX, so that node tests can import them.

/**
 * A schema pattern as an HTML `pattern` attribute, which the browser compiles with the `v` flag:
 * there a `/` and a `-` at the edge of a character class must be escaped. A pattern that still
 * does not compile is left out (the service checks it anyway).
 */
export function htmlPattern(pattern: string | undefined): string | undefined {
  if (pattern === undefined) return undefined;
  let out = '';
  let inClass = false;
  for (let i = 0; i < pattern.length; i += 1) {
    const c = pattern[i]!;
    if (c === '\\') {
      out += c + (pattern[i + 1] ?? '');
      i += 1;
      continue;
    }
    if (inClass && (c === '/' || (c === '-' && (pattern[i - 1] === '[' || pattern[i + 1] === ']')))) out += `\\${c}`;
    else out += c;
    if (c === '[') inClass = true;
    else if (c === ']') inClass = false;
  }
  try {
    new RegExp(out, 'v');
    return out;
  } catch {
    return undefined;
  }
}
