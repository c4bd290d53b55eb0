// The profile form's `pattern` attributes: the browser compiles them with the `v` flag, where the
// schema's patterns (written for the `u` flag) would not compile. Each converted pattern compiles
// and accepts and refuses exactly what the original does.
import t from 'tap';
import { htmlPattern } from '../../console/src/pattern.js';
import { profileNameSchema } from '../../src/store/profile.schema.js';
import { z } from 'zod';

const NAME = (z.toJSONSchema(profileNameSchema) as { pattern: string }).pattern;
const DEVICE = '^GPU-[A-Za-z0-9-]+$';

for (const [what, pattern, samples] of [
  ['the profile name', NAME, ['tiny-chat', 'org/model:q4_K-M', 'a', '-bad', 'has space', '', 'x'.repeat(129), 'ok.v2']],
  ['a GPU device', DEVICE, ['GPU-1234-abcd', 'GPU-', 'gpu-1', 'cpu', 'GPU-a-']],
] as const) {
  t.test(what, async (t) => {
    t.throws(() => new RegExp(pattern, 'v'), 'the schema pattern itself does not compile with the v flag');
    const converted = htmlPattern(pattern);
    t.type(converted, 'string', `converted: ${converted}`);
    const html = new RegExp(`^(?:${converted})$`, 'v');
    const original = new RegExp(pattern, 'u');
    for (const sample of samples) t.equal(html.test(sample), original.test(sample), `${JSON.stringify(sample)}: ${original.test(sample)}`);
  });
}

t.test('a pattern that cannot be made valid is left out', async (t) => {
  t.equal(htmlPattern('[a-'), undefined);
  t.equal(htmlPattern(undefined), undefined);
});
