// The recipe schema (CONTRACT section 8) refuses every path that would land a download outside its
// folder or on a task folder's records (a file path of `.` wrote
// `enhancers/i2i.part` beside the folder, and a revision of `..` was accepted). An installed file
// is found in the store shared by both tasks, else where the layout before it kept it.
import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { OFFICIAL_RECIPES, readInstalled, recipeSchema } from '../../src/store/enhancers.js';

const base = OFFICIAL_RECIPES.i2i;
const withPath = (p: string) => ({ ...base, files: [{ path: p, role: 'model' }] });
const problem = (value: unknown) => {
  const parsed = recipeSchema.safeParse(value);
  return parsed.success ? null : (parsed.error.issues[0]?.message ?? 'invalid');
};

t.test('the official recipes and ordinary paths pass', async (t) => {
  t.equal(problem(OFFICIAL_RECIPES.t2i), null);
  t.equal(problem(base), null);
  t.equal(problem(withPath('sub/dir/model-Q4_K_M.gguf')), null, 'sub-folders in the repository are flattened, not refused');
  t.equal(problem({ ...base, revision: 'refs/pr/12' }), null);
  t.equal(problem({ ...base, revision: '0123456789abcdef0123456789abcdef01234567' }), null);
});

t.test('paths that leave the task folder or take its records are refused, each naming why', async (t) => {
  for (const bad of ['.', '..', './model.gguf', 'a/../model.gguf', 'a//b.gguf', '/abs.gguf', 'dir/', 'a\\..\\b.gguf']) {
    t.ok(problem(withPath(bad)), `${JSON.stringify(bad)}: ${problem(withPath(bad))}`);
  }
  t.match(problem(withPath('.')), /outside the store folder/);
  for (const taken of ['installed.json', 'install.json', 'model.gguf.part']) {
    t.match(problem(withPath(taken)), /not installed\.json, install\.json or a \.part file/, taken);
  }
  for (const bad of ['..', 'main/..', './main', 'a//b', '/main']) {
    t.ok(problem({ ...base, revision: bad }), `revision ${JSON.stringify(bad)}: ${problem({ ...base, revision: bad })}`);
  }
});

t.test('an installed file is read from the store, else from the task folder of the layout before it', async (t) => {
  const dir = t.testdir({});
  const bytes = Buffer.from('four');
  const sha = createHash('sha256').update(bytes).digest('hex');
  const record = { repo: 'o/n', revision: 'refs/pr/1', files: [{ path: 'sub/m.gguf', role: 'model', size: 4, sha256: sha }], installed_at: 'then' };
  await mkdir(path.join(dir, 't2i'), { recursive: true });
  await writeFile(path.join(dir, 't2i', 'installed.json'), JSON.stringify(record));
  const stored = path.join(dir, 'files', 'o', 'n', 'refs%2Fpr%2F1', 'sub', 'm.gguf');
  const before = path.join(dir, 't2i', 'sub__m.gguf');
  const at = async () => (await readInstalled(dir, 't2i'))?.files.map((f) => (f as { at?: string }).at);
  t.same(await at(), undefined, 'no file: not installed');
  await writeFile(before, bytes);
  t.same(await at(), [before], 'the layout before the store is read');
  await mkdir(path.dirname(stored), { recursive: true });
  await writeFile(stored, bytes);
  t.same(await at(), [stored], 'the store comes first (the revision is one folder, the path keeps its folders)');
  const entry = { repo: 'o/n', revision: 'refs/pr/1', path: 'sub/m.gguf', size: 4, stamp: 'x', verified_at: 'then' };
  await writeFile(path.join(dir, 'files.json'), JSON.stringify({ files: [{ ...entry, sha256: 'f'.repeat(64) }] }));
  t.same(await at(), [before], "a stored file whose verified sha256 is another (the other task's revision) is not this install's");
  await writeFile(path.join(dir, 'files.json'), JSON.stringify({ files: [{ ...entry, sha256: sha }] }));
  t.same(await at(), [stored]);
  await writeFile(stored, 'five!');
  await rm(before);
  t.same(await at(), undefined, 'a stored file of another size is not installed');
});
