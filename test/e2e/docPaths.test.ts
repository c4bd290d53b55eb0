// The docs name only paths that exist: every `src/…`, `machines/…`, `test/…` (and the other
// top-level folders) in backticks in README.md and docs/*.md is a file or folder of this checkout,
// so a moved or renamed file cannot leave the architecture's map behind.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { docFiles, root } from '../helpers/docBlocks.js';

const NAMED = /`((?:src|machines|test|bench|scripts|console|deploy|native|docs|examples)\/[A-Za-z0-9_./-]+)`/g;

t.test('every path the docs name in backticks exists', async (t) => {
  let named = 0;
  for (const doc of await docFiles()) {
    const text = await readFile(path.join(root, doc), 'utf8');
    for (const [, name] of text.matchAll(NAMED)) {
      named++;
      const file = name!.replace(/[.:,]+$/, '');
      if (!existsSync(path.join(root, file))) t.fail(`${doc} names ${file}, which does not exist`);
    }
  }
  t.ok(named > 100, `the docs name ${named} paths, each of them checked`);
});
