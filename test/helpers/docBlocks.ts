// The fenced code blocks of README.md, examples/README.md and docs/*.md, with what stands right
// above each: the paragraph before it (a block shows an example script when that paragraph links
// one, the last link) and its last line (where a block's snippet marker stands).
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const examplesDir = path.join(root, 'examples');

export interface DocBlock {
  /** The document, relative to the checkout. */
  doc: string;
  /** The line of the opening fence, from 1. */
  line: number;
  /** The fence's language, '' when it names none. */
  lang: string;
  text: string;
  /** The nearest non-blank line above the fence. */
  above: string;
  /** The example script the paragraph before the block links (its last link), if any. */
  script: string | undefined;
}

/** The documents whose code blocks are checked. */
export async function docFiles(): Promise<string[]> {
  const docs = (await readdir(path.join(root, 'docs'))).filter((f) => f.endsWith('.md')).sort();
  return ['README.md', 'examples/README.md', ...docs.map((f) => `docs/${f}`)];
}

export async function docBlocks(): Promise<DocBlock[]> {
  const blocks: DocBlock[] = [];
  for (const doc of await docFiles()) {
    const lines = (await readFile(path.join(root, doc), 'utf8')).split('\n');
    for (let at = 0; at < lines.length; at += 1) {
      const fence = lines[at]!.match(/^```(\S*)\s*$/);
      if (!fence) continue;
      const end = lines.findIndex((line, i) => i > at && line.startsWith('```'));
      if (end < 0) throw new Error(`${doc}:${at + 1}: a code block without its closing fence`);
      let first = at - 1;
      while (first >= 0 && lines[first]!.trim() === '') first -= 1;
      const last = first;
      while (first >= 0 && lines[first]!.trim() !== '') first -= 1;
      const paragraph = lines.slice(first + 1, last + 1).join('\n');
      const script = [...paragraph.matchAll(/\]\((?:\.\.\/)?(?:examples\/)?([\w-]+\.(?:mjs|sh))\)/g)].pop()?.[1];
      blocks.push({ doc, line: at + 1, lang: fence[1]!, text: lines.slice(at + 1, end).join('\n'), above: last >= 0 ? lines[last]!.trim() : '', script });
      at = end;
    }
  }
  return blocks;
}
