// The docs name only paths that exist, so a moved or renamed file cannot leave the architecture's
// map (or any other page) behind. README.md, examples/README.md and docs/*.md are read whole:
// prose, backticks, tables, code blocks and links alike.
// - A path from one of the checkout's top-level folders (`src/…`, `machines/…`, `test/…`, `bench/…`,
//   `scripts/…`, `console/…`, `bin/…`, `.ci/…` and the rest) is a file or folder of the checkout; a
//   glob (`src/routes/admin/*`, `scripts/build-*.sh`) or a placeholder (`<key>`) matches one.
// - A relative link (`[the API](api.md#profiles)`, `(../examples/curl.sh)`) leads to a file.
// - A source file named alone in backticks (`chatRequest.ts`, beside its folder in a table) is a
//   file somewhere in the checkout, and so is a root file (`package.json`, `tsconfig.bench.json`).
// Build outputs (`dist/…`) and the state directory's files are not sources, and are not checked.
import { readdirSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { docFiles, root } from '../helpers/docBlocks.js';

const TOP = ['src', 'machines', 'test', 'bench', 'scripts', 'console', 'deploy', 'native', 'docs', 'examples', 'bin', '.ci'];
/**
 * A path from the checkout's root, wherever it stands (`./` before it too); not the tail of a URL
 * or of a longer path. A path relative to the page (`../src/…`) is a link's, checked as a link.
 */
const ROOTED = new RegExp(`(?<![\\w.@~$/-])(?:\\./)?((?:${TOP.map((d) => d.replace('.', '\\.')).join('|')})/[\\w./*<>{}…-]*)`, 'g');
/** A Markdown link to a file of the checkout: not a URL, not an anchor of the same page. */
const LINK = /\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s#]+)(?:#[^)\s]*)?\)/g;
/** A source file or a root file named alone in backticks. */
const BARE = /`([\w.-]+\.(?:ts|tsx|mjs|cjs|js|sh|c)|Dockerfile|package(?:-lock)?\.json|tsconfig[\w.-]*\.json)`/g;
const SKIP = new Set(['node_modules', 'dist', '.git', '.tap', 'coverage']);

interface Checkout {
  /** Every file and folder, relative to the root; folders end in `/`. */
  entries: string[];
  has: Set<string>;
  names: Set<string>;
}

function walk(dir: string, into: string[]): void {
  for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const rel = dir ? `${dir}/${entry.name}` : entry.name;
    if (entry.isDirectory()) {
      into.push(`${rel}/`);
      walk(rel, into);
    } else into.push(rel);
  }
}

function checkout(): Checkout {
  const entries: string[] = [];
  walk('', entries);
  return {
    entries,
    has: new Set(entries.flatMap((entry) => (entry.endsWith('/') ? [entry, entry.slice(0, -1)] : [entry]))),
    names: new Set(entries.filter((entry) => !entry.endsWith('/')).map((entry) => path.posix.basename(entry))),
  };
}

/** A named path with a glob or a placeholder as a pattern over the checkout's entries. */
function pattern(name: string): RegExp {
  let source = '';
  for (let i = 0; i < name.length; i++) {
    const c = name[i]!;
    if (name.startsWith('**/', i)) {
      source += '(?:.*/)?';
      i += 2;
    } else if (c === '*') source += '[^/]*';
    else if (c === '…') source += '.*';
    else if (c === '<' || c === '{') {
      const end = name.indexOf(c === '<' ? '>' : '}', i);
      source += '[^/]+';
      if (end > i) i = end;
    } else source += c.replace(/[.+?^$()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}/?$`);
}

function exists(name: string, tree: Checkout): boolean {
  if (/[*<{…]/.test(name)) {
    const re = pattern(name);
    return tree.entries.some((entry) => re.test(entry));
  }
  return tree.has.has(name);
}

/** The paths a document names that the checkout lacks, each with its line; and how many it names. */
export function stalePaths(doc: string, text: string, tree: Checkout): { named: number; stale: string[] } {
  const stale: string[] = [];
  let named = 0;
  const lineOf = (index: number) => text.slice(0, index).split('\n').length;
  const check = (index: number, name: string, found: boolean) => {
    named++;
    if (!found) stale.push(`${doc}:${lineOf(index)} names ${name}, which does not exist`);
  };
  for (const match of text.matchAll(ROOTED)) {
    const name = match[1]!.replace(/[.:,;]+$/, '');
    check(match.index, name, exists(name, tree));
  }
  for (const match of text.matchAll(LINK)) {
    const target = path.posix.normalize(path.posix.join(path.posix.dirname(doc), decodeURI(match[1]!)));
    check(match.index, `${match[1]} (${target})`, !target.startsWith('../') && tree.has.has(target));
  }
  for (const match of text.matchAll(BARE)) check(match.index, match[1]!, tree.names.has(match[1]!));
  return { named, stale };
}

t.test('every path the docs name exists', async (t) => {
  const tree = checkout();
  let named = 0;
  for (const doc of await docFiles()) {
    const found = stalePaths(doc, await readFile(path.join(root, doc), 'utf8'), tree);
    named += found.named;
    for (const line of found.stale) t.fail(line);
  }
  t.ok(named > 400, `the docs name ${named} paths, each of them checked`);
});

t.test('a stale path is found in every form a doc writes it', async (t) => {
  const tree = checkout();
  const doc = 'docs/architecture.md';
  const text = [
    'The service type is `src/system/service.ts`.', // in backticks (a stale map entry)
    'See src/system/service.ts for the type.', // in prose
    '```sh\nsh scripts/build-nothing.sh\n```', // in a code block
    'Its [door](../src/routes/gone.ts) and [the page](nowhere.md#top).', // links
    '| `src/workers/` | `chatRequest.ts`, `servicee.ts` |', // a file named beside its folder
    'Every `test/nothing/*.test.ts`.', // a glob that matches nothing
  ].join('\n');
  const { stale } = stalePaths(doc, text, tree);
  t.same(
    stale.map((line) => line.replace(/ names (.*), which does not exist$/, ' $1')).sort(),
    [
      'docs/architecture.md:1 src/system/service.ts',
      'docs/architecture.md:2 src/system/service.ts',
      'docs/architecture.md:4 scripts/build-nothing.sh',
      'docs/architecture.md:6 ../src/routes/gone.ts (src/routes/gone.ts)',
      'docs/architecture.md:6 nowhere.md (docs/nowhere.md)',
      'docs/architecture.md:7 servicee.ts',
      'docs/architecture.md:8 test/nothing/*.test.ts',
    ],
    'each stale path is reported with its line; the existing ones are not',
  );
  t.same(stalePaths('README.md', 'Run `scripts/setup.sh`, see [the API](docs/api.md#profiles), `src/service.ts`, `src/routes/admin/*`, `package.json`, https://example.com/src/gone.ts.', tree).stale, [], 'paths that exist, and a URL, pass');
});
