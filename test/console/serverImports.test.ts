// The console depends on the admin API, not on the server's workers: of the server's code it
// imports only the API's view types, from their one home (src/system/observe/console.types.ts).
// The lint config says so for console/ (eslint.config.js); these tests run it: on the console's
// own sources, and on a page that names server code in every way a module can be named.
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { ESLint } from 'eslint';
import t from 'tap';

const repo = path.resolve(import.meta.dirname, '../..');
const consoleSrc = path.join(repo, 'console/src');
const IMPORT_RULES = new Set(['no-restricted-imports', 'no-restricted-syntax']);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sources(full);
    return /\.tsx?$/.test(entry.name) ? [full] : [];
  });
}

/** The import rules' findings, as `file:line` for people. */
function findings(results: ESLint.LintResult[]): string[] {
  return results.flatMap((result) =>
    result.messages.filter((m) => m.ruleId !== null && IMPORT_RULES.has(m.ruleId)).map((m) => `${path.relative(repo, result.filePath)}:${m.line}`),
  );
}

// The repository's config, with only the import rules run: they need no type information, so the
// files are parsed without building the TypeScript program (seconds instead of most of a minute).
const eslint = new ESLint({
  cwd: repo,
  ruleFilter: ({ ruleId }) => IMPORT_RULES.has(ruleId),
  overrideConfig: { languageOptions: { parserOptions: { projectService: false } } },
});

t.test('the console imports nothing of the server but the API view types', async (t) => {
  const files = sources(consoleSrc);
  t.ok(files.length > 10, `the console's sources were found (${files.length} files)`);
  t.same(findings(await eslint.lintFiles(files)), [], 'no console source imports server code past console.types.js');
});

t.test('the lint rule finds every way of naming server code from the console', async (t) => {
  const text = [
    `import type { A } from "../../src/double.js";`,
    `import { b } from '../../src/single.js';`,
    `import '../../machines/side-effect.js';`,
    'export const lazy = await import(`../../src/template.js`);',
    `export const later = import("../../src/dynamic.js");`,
    `export { c } from '../../src/reexport.js';`,
    `import type { EndpointStatus } from '../../src/system/observe/console.types.js';`,
    `import { h } from 'preact';`,
    `export type { A, EndpointStatus };`,
    `export { b, h };`,
  ].join('\n');
  // Linted as one of the console's files, so that the console's part of the config applies.
  const results = await eslint.lintText(text, { filePath: path.join(consoleSrc, 'types.ts') });
  t.same(findings(results), [1, 2, 3, 4, 5, 6].map((line) => `console/src/types.ts:${line}`), 'each server import is an error; the view types and packages are not');
});
