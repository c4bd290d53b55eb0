// The console depends on the admin API, not on the server's workers: of the server's code it
// imports only the API's view types, from their one home (src/system/observe/console.types.ts).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';

const root = path.resolve(import.meta.dirname, '../../console/src');

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
    for (const [, target] of readFileSync(file, 'utf8').matchAll(/from '([^']+)'/g)) {
      if (!target!.startsWith('.')) continue;
      const resolved = path.resolve(path.dirname(file), target!);
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
