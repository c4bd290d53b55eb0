import t from 'tap';
import { build } from '../helpers/build.js';

t.test('the helper logs in and starts the endpoint', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  const r = await b.api('GET', '/v1/models');
  t.equal(r.status, 200);
  t.same(await r.json(), { object: 'list', data: [] });
});
