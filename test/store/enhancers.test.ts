// The recipe schema (CONTRACT section 8) refuses every path that would land a download outside its
// task folder or on the folder's own records (issue 30: a file path of `.` wrote
// `enhancers/i2i.part` beside the folder, and a revision of `..` was accepted).
import t from 'tap';
import { OFFICIAL_RECIPES, recipeSchema } from '../../src/store/enhancers.js';

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
  t.match(problem(withPath('.')), /outside the task folder/);
  for (const taken of ['installed.json', 'install.json', 'model.gguf.part']) {
    t.match(problem(withPath(taken)), /not installed\.json, install\.json or a \.part file/, taken);
  }
  for (const bad of ['..', 'main/..', './main', 'a//b', '/main']) {
    t.ok(problem({ ...base, revision: bad }), `revision ${JSON.stringify(bad)}: ${problem({ ...base, revision: bad })}`);
  }
});
