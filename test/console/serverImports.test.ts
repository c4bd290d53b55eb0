// The console depends on the admin API, not on the server's workers: of the server's code it
// imports only the API's view types, from their one home (src/system/observe/console.types.ts).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import ts from 'typescript';

const root = path.resolve(import.meta.dirname, '../../console/src');

/**
 * Every module a source names, as TypeScript reads them: static imports and re-exports in either
 * quote, side-effect imports, `import type`, dynamic `import()` and `import x = require()`.
 */
function specifiers(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((file) => file.fileName);
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sources(full);
    return /\.tsx?$/.test(entry.name) ? [full] : [];
  });
}

t.test('the console imports nothing of the server but the API view types', async (t) => {
  const files = sources(root);
  t.ok(files.length > 10, `the console's sources were found (${files.length} files)`);
  const server: string[] = [];
  for (const file of files) {
    for (const target of specifiers(readFileSync(file, 'utf8'))) {
      // A package (preact, @preact/signals) is not server code; a path is resolved, an absolute one too.
      if (!target.startsWith('.') && !path.isAbsolute(target)) continue;
      const resolved = path.resolve(path.dirname(file), target);
      if (!resolved.startsWith(`${root}${path.sep}`)) server.push(`${path.relative(root, file)}: ${path.relative(path.resolve(root, '../..'), resolved)}`);
    }
  }
  t.ok(server.length > 0, 'the console does import the API view types');
  t.same(
    server.filter((line) => !line.endsWith('src/system/observe/console.types.js')),
    [],
    'every import of server code names console.types.js',
  );
});

t.test('every way of naming a module is read', async (t) => {
  const text = [
    `import type { A } from "../../src/double.js";`,
    `import { b } from '../../src/single.js';`,
    `import '../../src/side-effect.js';`,
    'const lazy = await import(`../../src/template.js`);',
    `const later = import("../../src/dynamic.js");`,
    `export { c } from '../../src/reexport.js';`,
    `import { h } from 'preact';`,
  ].join('\n');
  t.same(specifiers(text), [
    '../../src/double.js',
    '../../src/single.js',
    '../../src/side-effect.js',
    '../../src/template.js',
    '../../src/dynamic.js',
    '../../src/reexport.js',
    'preact',
  ]);
});
