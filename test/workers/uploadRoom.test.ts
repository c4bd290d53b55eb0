// The disk room uploads share (src/workers/uploadRoom.ts): each reservation counts against the
// free space until it is released, the margin is always kept, and an unknown free space refuses
// nothing.
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { UploadRoom } from '../../src/workers/uploadRoom.js';

t.test('reservations add up against the free space, beside the margin', async (t) => {
  let free = 100;
  const room = new UploadRoom('/jobs', async () => free, 20);
  const first = await room.reserve(50);
  t.equal(room.reserved, 50);
  await t.rejects(room.reserve(40), ApiError, '50 reserved + 40 + 20 margin > 100');
  const second = await room.reserve(30);
  t.equal(room.reserved, 80);
  first();
  first();
  t.equal(room.reserved, 30, 'a release counts once');
  free = 10;
  const refused = await room.reserve(1).catch((error: unknown) => error as ApiError);
  t.match(refused, { statusCode: 507, code: 'insufficient_storage' });
  second();
  t.equal(room.reserved, 0);
});

t.test('an unknown free space refuses nothing', async (t) => {
  const room = new UploadRoom('/jobs', async () => null);
  const release = await room.reserve(10 ** 12);
  t.equal(room.reserved, 10 ** 12);
  release();
});
