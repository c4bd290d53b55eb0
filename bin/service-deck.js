#!/usr/bin/env node
// The `service-deck` command: runs the compiled CLI (npm run build, or any README command, builds it).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../dist/src/cli.js', import.meta.url));
if (!existsSync(cli)) {
  process.stderr.write('service-deck: not built yet: run `npm run setup` (or `npm run build`) first\n');
  process.exit(1);
}
const { run } = await import(cli);
run(process.argv.slice(2));
