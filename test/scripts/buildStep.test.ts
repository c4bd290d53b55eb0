// scripts/build-step.mjs: `npm run demo` (and every README command, through scripts/setup.sh)
// builds the service and the console only when something they read has changed. A step runs in a
// private folder here with a builder that counts its runs, so the test needs neither tsc nor Vite;
// the real steps' inputs are checked against what tsc and Vite read.
import { spawnSync } from 'node:child_process';
import { readFileSync, utimesSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { inputHash, runStep, STEPS, type Step } from '../../scripts/build-step.mjs';

const root = path.resolve(import.meta.dirname, '../..');

/** A builder that appends a line to `runs` and writes `out/built`; it fails while `fail` exists. */
const BUILDER = `
const fs = require('node:fs');
fs.appendFileSync('runs', 'run\\n');
if (fs.existsSync('fail')) process.exit(3);
fs.mkdirSync('out', { recursive: true });
fs.writeFileSync('out/built', fs.readFileSync('src/a.ts'));
`;

async function fixture(t: Test) {
  const base = t.testdir({ src: { 'a.ts': 'export const a = 1;\n', nested: { 'b.ts': 'export const b = 2;\n' } }, 'tsconfig.json': '{}', 'builder.cjs': BUILDER });
  const step: Step = { inputs: ['src', 'tsconfig.json'], output: 'out/built', command: [process.execPath, 'builder.cjs'] };
  const runs = async () => (await readFile(path.join(base, 'runs'), 'utf8').catch(() => '')).split('\n').filter(Boolean).length;
  return { base, step, runs };
}

t.test('an unchanged tree is not built again; a change, a lost output or --force builds', async (t) => {
  const { base, step, runs } = await fixture(t);
  t.equal(runStep(base, 'x', step), 'built', 'the first run builds');
  t.equal(await runs(), 1);
  t.equal(runStep(base, 'x', step), 'up to date', 'a second run on the unchanged tree does nothing');
  t.equal(await runs(), 1, 'the builder did not run');

  // A touched file (as a git checkout leaves it) is not a change: content decides.
  const later = new Date(Date.now() + 60_000);
  utimesSync(path.join(base, 'src', 'a.ts'), later, later);
  t.equal(runStep(base, 'x', step), 'up to date', 'a new mtime alone builds nothing');

  await writeFile(path.join(base, 'src', 'nested', 'b.ts'), 'export const b = 3;\n');
  t.equal(runStep(base, 'x', step), 'built', 'a changed file in a sub-folder builds');
  t.equal(await runs(), 2);
  await writeFile(path.join(base, 'src', 'nested', 'c.ts'), 'export const c = 4;\n');
  t.equal(runStep(base, 'x', step), 'built', 'a new file builds');
  await rm(path.join(base, 'src', 'nested', 'c.ts'));
  t.equal(runStep(base, 'x', step), 'built', 'a removed file builds');
  await writeFile(path.join(base, 'tsconfig.json'), '{"compilerOptions":{}}');
  t.equal(runStep(base, 'x', step), 'built', 'a changed configuration file builds');
  t.equal(runStep(base, 'x', step), 'up to date');
  t.equal(await runs(), 5);

  await rm(path.join(base, 'out'), { recursive: true });
  t.equal(runStep(base, 'x', step), 'built', 'a lost output builds');
  t.equal(runStep(base, 'x', step, { force: true }), 'built', '--force builds');
  t.equal(await runs(), 7);
});

t.test('a failed build leaves no stamp: the next run builds again', async (t) => {
  const { base, step, runs } = await fixture(t);
  t.equal(runStep(base, 'x', step), 'built');
  await writeFile(path.join(base, 'src', 'a.ts'), 'export const a = 2;\n');
  await writeFile(path.join(base, 'fail'), '');
  t.throws(() => runStep(base, 'x', step), /failed \(exit 3\)/, 'the failure is reported');
  await rm(path.join(base, 'fail'));
  t.equal(runStep(base, 'x', step), 'built', 'the failed build is tried again, though its inputs did not change since');
  t.equal(await runs(), 3);
  t.equal(readFileSync(path.join(base, 'out', 'built'), 'utf8'), 'export const a = 2;\n', 'the output is of the current input');
});

t.test('the command line: an unknown step is a usage error', async (t) => {
  const script = path.join(root, 'scripts', 'build-step.mjs');
  const unknown = spawnSync(process.execPath, [script, 'nothing'], { encoding: 'utf8' });
  t.equal(unknown.status, 2);
  t.match(unknown.stderr, /usage: node scripts\/build-step\.mjs service\|console/);
});

t.test("the real steps read what tsc and Vite read: the service's include, the console folder", async (t) => {
  const build = JSON.parse(readFileSync(path.join(root, 'tsconfig.build.json'), 'utf8')) as { extends: string; include: string[] };
  for (const input of [...build.include, 'tsconfig.build.json', build.extends.replace(/^\.\//, ''), 'package-lock.json']) {
    t.ok(STEPS.service.inputs.includes(input), `the service step reads ${input}`);
  }
  t.ok(STEPS.console.inputs.includes('console') && STEPS.console.inputs.includes('package-lock.json'), 'the console step reads console/ and the lock file');
  // The hash of the real service inputs changes with one byte of one source file.
  const dir = t.testdir();
  await mkdir(path.join(dir, 'src'));
  await writeFile(path.join(dir, 'src', 'x.ts'), 'a');
  const before = inputHash(dir, ['src']);
  await writeFile(path.join(dir, 'src', 'x.ts'), 'b');
  t.not(inputHash(dir, ['src']), before, 'one byte changes the hash');
});
