// Image files by their bytes and the PNG privacy pass: every text chunk (tEXt, iTXt, zTXt) and
// eXIf is removed and nothing else; damaged PNGs are refused, never passed on half-checked.
import { deflateSync } from 'node:zlib';
import t from 'tap';
import { declaredSize, imageKind, METADATA_CHUNKS, pngChunk, pngChunks, PngError, pngSize, stripPngMetadata } from '../../src/adapters/png.js';

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function png(extra: Buffer[] = [], width = 4, height = 3): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;
  const rows = Buffer.alloc((width + 1) * height);
  return Buffer.concat([SIGNATURE, pngChunk('IHDR', ihdr), ...extra, pngChunk('IDAT', deflateSync(rows)), pngChunk('IEND', Buffer.alloc(0))]);
}

t.test('formats are told by their magic bytes, not their names', async (t) => {
  t.equal(imageKind(png()), 'png');
  t.equal(imageKind(Buffer.from([0xff, 0xd8, 0xff, 0xdb, 0, 0])), 'jpeg');
  t.equal(imageKind(Buffer.concat([Buffer.from('RIFF\0\0\0\0WEBPVP8L', 'latin1')])), 'webp');
  t.equal(imageKind(Buffer.from('GIF89a....', 'latin1')), undefined, 'GIF');
  t.equal(imageKind(Buffer.from('BM....', 'latin1')), undefined, 'BMP');
  t.equal(imageKind(Buffer.from('RIFF\0\0\0\0WAVEfmt ', 'latin1')), undefined, 'a WAV is RIFF but not WebP');
  t.equal(imageKind(Buffer.alloc(0)), undefined);
  t.equal(imageKind(SIGNATURE.subarray(0, 7)), undefined, 'a truncated signature');
});

t.test('stripping removes tEXt, iTXt, zTXt and eXIf, keeps every other chunk in order, and the result is a valid PNG', async (t) => {
  const text = pngChunk('tEXt', Buffer.from('parameters\0a secret prompt, Steps: 20', 'latin1'));
  const itxt = pngChunk('iTXt', Buffer.from('Description\0\0\0\0\0a secret prompt', 'utf8'));
  const ztxt = pngChunk('zTXt', Buffer.concat([Buffer.from('Comment\0\0', 'latin1'), deflateSync('a secret prompt')]));
  const exif = pngChunk('eXIf', Buffer.from('MM\0*\0\0\0\x08', 'latin1'));
  const gamma = pngChunk('gAMA', Buffer.from([0, 0, 0xb1, 0x8f]));
  const input = png([text, gamma, itxt, ztxt, exif]);
  const { png: out, removed } = stripPngMetadata(input);
  t.same(removed, ['tEXt', 'iTXt', 'zTXt', 'eXIf']);
  t.same(pngChunks(out).map((c) => c.type), ['IHDR', 'gAMA', 'IDAT', 'IEND']);
  t.notOk(out.includes(Buffer.from('secret')), 'no trace of the prompt');
  t.same(pngSize(out), { width: 4, height: 3 });
  t.same([...METADATA_CHUNKS].sort(), ['eXIf', 'iTXt', 'tEXt', 'zTXt']);
  t.same(stripPngMetadata(png()).png, png(), 'a clean PNG comes back unchanged');
});

t.test('a damaged PNG is refused with the reason', async (t) => {
  const good = png([pngChunk('tEXt', Buffer.from('k\0v', 'latin1'))]);
  const flipped = Buffer.from(good);
  // A byte of the tEXt chunk's data (after the signature, IHDR's 25 bytes and tEXt's 8-byte header).
  flipped[8 + 25 + 8] = flipped[8 + 25 + 8]! ^ 0xff;
  const cases: Array<[string, Buffer, RegExp]> = [
    ['not a PNG', Buffer.from('GIF89a', 'latin1'), /signature/],
    ['cut in a chunk', good.subarray(0, good.length - 20), /past the end|truncated/],
    ['a flipped byte', flipped, /CRC/],
    ['no IEND', good.subarray(0, good.length - 12), /IEND/],
    ['IHDR not first', Buffer.concat([SIGNATURE, pngChunk('tEXt', Buffer.from('a\0b')), good.subarray(8)]), /IHDR/],
    ['an IHDR of 4 bytes', Buffer.concat([SIGNATURE, pngChunk('IHDR', Buffer.alloc(4)), pngChunk('IDAT', deflateSync(Buffer.alloc(4))), pngChunk('IEND', Buffer.alloc(0))]), /IHDR chunk has 4 bytes/],
    ['no IDAT', Buffer.concat([SIGNATURE, png().subarray(8, 8 + 25), pngChunk('IEND', Buffer.alloc(0))]), /no IDAT/],
    ['an IEND with data', Buffer.concat([png().subarray(0, png().length - 12), pngChunk('IEND', Buffer.from('x'))]), /IEND chunk carries data/],
    ['two IHDR', Buffer.concat([png().subarray(0, 8 + 25), png().subarray(8)]), /more than one IHDR/],
    ['a width of 0', png([], 0, 3), /impossible size/],
    ['a huge length', Buffer.concat([SIGNATURE, Buffer.from([0xff, 0xff, 0xff, 0xff]), Buffer.from('IHDR', 'latin1'), Buffer.alloc(8)]), /past the end/],
  ];
  for (const [what, bytes, reason] of cases) t.throws(() => stripPngMetadata(bytes), { name: PngError.name, message: reason }, what);
  // A damaged byte is refused (every chunk has its CRC); a "damage" that wrote the byte it found
  // changes nothing, and only then may a result come back: the clean image, and nothing else.
  const clean = stripPngMetadata(good).png;
  let refused = 0;
  let unchanged = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const damaged = Buffer.from(good);
    damaged[(seed * 7919) % damaged.length] = (seed * 31) & 0xff;
    const same = damaged.equals(good);
    if (same) unchanged++;
    try {
      const { png: out } = stripPngMetadata(damaged);
      if (!same || !out.equals(clean)) t.fail(`seed ${seed}: a damaged PNG came back as ${out.equals(clean) ? 'the clean image' : 'another image'}`);
    } catch (error) {
      if (!(error instanceof PngError)) t.fail(`seed ${seed}: ${String(error)}`);
      else if (same) t.fail(`seed ${seed}: an undamaged PNG was refused: ${error.message}`);
      else refused++;
    }
  }
  t.equal(refused + unchanged, 300, `300 random damages: ${refused} refused with a PngError, ${unchanged} that changed nothing came back clean`);
  t.ok(refused > 250, 'most damages change a byte');
});

t.test('the size an image declares, read from its header without decoding it', async (t) => {
  const png = (width: number, height: number) =>
    Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), pngChunk('IHDR', Buffer.from([...u32(width), ...u32(height), 8, 2, 0, 0, 0]))]);
  function u32(n: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return [...b];
  }
  t.same(declaredSize(png(100_000, 100_000)), { width: 100_000, height: 100_000 }, 'PNG: IHDR');
  // JPEG: APP0, a 300-byte APP1 (EXIF), fill bytes, then a progressive frame header (SOF2) 480 high, 640 wide.
  const app1 = Buffer.concat([Buffer.from([0xff, 0xe1, 0x01, 0x2e]), Buffer.alloc(300)]);
  const jpeg = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0]), app1, Buffer.from([0xff, 0xff, 0xc2, 0, 11, 8, 0x01, 0xe0, 0x02, 0x80, 1, 1, 0x11, 0])]);
  t.same(declaredSize(jpeg), { width: 640, height: 480 }, 'JPEG: the first frame header after other segments');
  t.equal(declaredSize(jpeg.subarray(0, 100)), undefined, 'JPEG cut before its frame header');
  t.equal(declaredSize(Buffer.from([0xff, 0xd8, 0xff, 0xda, 0, 2])), undefined, 'JPEG whose scan comes before any frame header');
  const riff = (chunk: string, body: number[]) => Buffer.concat([Buffer.from('RIFF', 'latin1'), Buffer.alloc(4), Buffer.from(`WEBP${chunk}`, 'latin1'), Buffer.alloc(4), Buffer.from(body), Buffer.alloc(8)]);
  t.same(declaredSize(riff('VP8 ', [0, 0, 0, 0x9d, 0x01, 0x2a, 0x00, 0x04, 0x00, 0x03])), { width: 1024, height: 768 }, 'WebP lossy: VP8 frame header');
  // VP8L: 0x2f, then width-1 and height-1 in 14 bits each: 2000x1000.
  const bits = (2000 - 1) | ((1000 - 1) << 14);
  t.same(declaredSize(riff('VP8L', [0x2f, bits & 0xff, (bits >>> 8) & 0xff, (bits >>> 16) & 0xff, (bits >>> 24) & 0xff])), { width: 2000, height: 1000 }, 'WebP lossless: VP8L');
  t.same(declaredSize(riff('VP8X', [0, 0, 0, 0, 0x3f, 0x1f, 0x00, 0x0f, 0x27, 0x00])), { width: 8000, height: 10000 }, 'WebP extended: VP8X canvas');
  t.equal(declaredSize(riff('VP8 ', [0, 0, 0, 0, 0, 0])), undefined, 'a VP8 frame without its start code');
  t.equal(declaredSize(Buffer.from('GIF89a')), undefined, 'not one of the three');
});
