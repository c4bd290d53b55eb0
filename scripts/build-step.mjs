#!/usr/bin/env node
// One build step of what is made from TypeScript, skipped when nothing it reads has changed:
// `node scripts/build-step.mjs service` (tsc to dist/) or `console` (Vite to dist/console/).
// A step hashes its inputs (every file's path and content, not mtimes: a git checkout touches
// mtimes without changing content) and compares the hash with the stamp that its last successful
// build left under dist/.build-stamps/. Equal, and its output is still there: nothing to do.
// Otherwise it builds, and only a build that succeeded writes the new stamp. `--force` (or
// SERVICE_DECK_BUILD=force) builds whatever the stamp says; arguments after the step name go to
// the builder (e.g. `-- --logLevel warn` for Vite).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The steps: what each reads (files and folders, relative to the checkout), the file whose
 * presence says its output is there, and the command that builds it.
 */
export const STEPS = {
  service: {
    inputs: ['src', 'machines', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json'],
    output: 'dist/src/cli.js',
    command: ['node_modules/.bin/tsc', '-p', 'tsconfig.build.json'],
  },
  console: {
    // The console imports only types from src/ (console.types.ts), which the bundle does not hold.
    inputs: ['console', 'src/system/observe/console.types.ts', 'package-lock.json'],
    output: 'dist/console/index.html',
    command: ['node_modules/.bin/vite', 'build', '--config', 'console/vite.config.ts'],
  },
};

/** Every file under `inputs` (relative to `base`), sorted, each as `path\0content`, into one sha256. */
export function inputHash(base, inputs) {
  const files = [];
  for (const input of inputs) {
    const full = path.join(base, input);
    if (!existsSync(full)) {
      files.push(`${input} (absent)`);
      continue;
    }
    if (statSync(full).isDirectory()) {
      for (const entry of readdirSync(full, { recursive: true, withFileTypes: true })) {
        if (entry.isFile()) files.push(path.relative(base, path.join(entry.parentPath ?? entry.path, entry.name)));
      }
    } else files.push(input);
  }
  const hash = createHash('sha256');
  for (const file of [...new Set(files)].sort()) {
    hash.update(file).update('\0');
    if (!file.endsWith(' (absent)')) hash.update(readFileSync(path.join(base, file)));
    hash.update('\0');
  }
  return hash.digest('hex');
}

/**
 * Runs one step in `base`: returns 'up to date' or 'built', or throws when the builder failed
 * (its stamp is then gone, so the next run builds again).
 */
export function runStep(base, name, step, options = {}) {
  const stamp = path.join(base, 'dist', '.build-stamps', `${name}.sha256`);
  const hash = inputHash(base, step.inputs);
  const stamped = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : '';
  if (!options.force && stamped === hash && existsSync(path.join(base, step.output))) return 'up to date';
  rmSync(stamp, { force: true });
  const [program, ...args] = step.command;
  const result = spawnSync(path.resolve(base, program), [...args, ...(options.args ?? [])], { cwd: base, stdio: 'inherit' });
  if (result.error) throw result.error;
  if (result.status !== 0) throw new Error(`${step.command.join(' ')} failed (exit ${result.status ?? result.signal})`);
  mkdirSync(path.dirname(stamp), { recursive: true });
  writeFileSync(stamp, `${hash}\n`);
  return 'built';
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [name, ...rest] = process.argv.slice(2);
  const step = STEPS[name ?? ''];
  if (!step) {
    process.stderr.write(`usage: node scripts/build-step.mjs ${Object.keys(STEPS).join('|')} [--force] [-- builder arguments]\n`);
    process.exit(2);
  }
  const force = rest.includes('--force') || process.env.SERVICE_DECK_BUILD === 'force';
  const args = rest.filter((arg) => arg !== '--force' && arg !== '--');
  try {
    const outcome = runStep(root, name, step, { force, args });
    if (outcome === 'up to date') process.stderr.write(`build: ${name} is up to date (nothing it reads changed since its last build)\n`);
  } catch (error) {
    process.stderr.write(`build: ${name}: ${error.message}\n`);
    process.exit(1);
  }
}
