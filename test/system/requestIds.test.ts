// The request ids of both listeners (src/app.ts `requestIds`): 16 random hex digits, cut from a
// block filled at once; a new block once the last id of the old one is out.
import t from 'tap';
import { requestIds } from '../../src/app.js';

t.test('ids are 16 hex digits, all different, across refills of the block', async (t) => {
  const next = requestIds(4);
  const ids = Array.from({ length: 41 }, () => next());
  for (const id of ids) t.match(id, /^[0-9a-f]{16}$/);
  t.equal(new Set(ids).size, ids.length, 'no id repeats, within a block or after a refill');
});

t.test('two listeners draw from blocks of their own', async (t) => {
  const a = requestIds();
  const b = requestIds();
  const seen = new Set([...Array.from({ length: 600 }, () => a()), ...Array.from({ length: 600 }, () => b())]);
  t.equal(seen.size, 1200);
});
