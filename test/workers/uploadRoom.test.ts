// The disk room uploads share (src/workers/uploadRoom.ts): each reservation counts against the
// free space what its upload may still write (what it holds less what it wrote, which the free
// space counts already), from its declared length or growing as bytes come; the margin is always
// kept, and an unknown free space refuses nothing.
import t from 'tap';
import { ApiError } from '../../src/errors.js';
import { UPLOAD_GROWTH_BYTES, UploadRoom } from '../../src/workers/uploadRoom.js';

t.test('reservations add up against the free space, beside the margin', async (t) => {
  let free = 100;
  const room = new UploadRoom('/jobs', async () => free, 20);
  const first = await room.reserve(1000, 50);
  t.equal(room.reserved, 50);
  await t.rejects(room.reserve(1000, 40), ApiError, '50 reserved + 40 + 20 margin > 100');
  const second = await room.reserve(30, 1000);
  t.equal(room.reserved, 80, 'a declared length past the most reserves the most');
  first.release();
  first.release();
  t.equal(room.reserved, 30, 'a release counts once');
  free = 10;
  const refused = await room.reserve(1000, 1).catch((error: unknown) => error as ApiError);
  t.match(refused, { statusCode: 507, code: 'insufficient_storage' });
  second.release();
  t.equal(room.reserved, 0);
});

t.test('what an upload wrote counts once: through the free space, not its reservation too', async (t) => {
  let free = 100;
  const room = new UploadRoom('/jobs', async () => free, 20);
  const upload = await room.reserve(1000, 60);
  await upload.take(40);
  free -= 40;
  t.equal(room.reserved, 20, 'it may still write 20 of its 60');
  await room.reserve(1000, 20).then((r) => r.release(), () => t.fail('60 free - 20 still to write - 20 margin leaves 20'));
  await upload.take(15);
  free -= 15;
  upload.settle();
  t.equal(room.reserved, 0, 'once whole, it writes no more: its 5 unwritten bytes go back');
  t.equal(free, 45);
  await room.reserve(1000, 25).then((r) => r.release(), () => t.fail('45 free - 20 margin leaves 25'));
  upload.release();
});

t.test('an upload without a declared length holds nothing at first and grows as its bytes come', async (t) => {
  let free = 20 + 3 * UPLOAD_GROWTH_BYTES;
  const room = new UploadRoom('/jobs', async () => free, 20);
  const upload = await room.reserve(10 * UPLOAD_GROWTH_BYTES);
  t.equal(room.reserved, 0);
  await upload.take(100);
  t.equal(room.reserved, UPLOAD_GROWTH_BYTES - 100, 'its first bytes grew it by a step');
  free -= 100;
  await upload.take(UPLOAD_GROWTH_BYTES);
  free -= UPLOAD_GROWTH_BYTES;
  t.equal(room.reserved, UPLOAD_GROWTH_BYTES - 100, 'another step when it wrote past it');
  free = 20 + UPLOAD_GROWTH_BYTES / 2;
  const refused = await upload.take(UPLOAD_GROWTH_BYTES).catch((error: unknown) => error as ApiError);
  t.match(refused, { statusCode: 507, code: 'insufficient_storage' }, 'a step the disk has no room for is refused');
  upload.release();
  t.equal(room.reserved, 0);
});

t.test('an unknown free space refuses nothing', async (t) => {
  const room = new UploadRoom('/jobs', async () => null);
  const upload = await room.reserve(10 ** 12, 10 ** 12);
  t.equal(room.reserved, 10 ** 12);
  await upload.take(10 ** 12 + 1);
  t.equal(room.reserved, 0, 'past its most, it holds no more than it wrote');
  upload.release();
});
