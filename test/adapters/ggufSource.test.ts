// The GGUF reader over another byte source than a file (a hub file read with range requests):
// the same header as from the file, and a bound on the bytes read in all that a larger header
// cannot pass (the read-ahead stays within it too).
import path from 'node:path';
import t from 'tap';
import { encodeGguf, GgufError, readGgufHeader, readGgufInfo, type ByteSource } from '../../src/adapters/gguf.js';
import { tinyModel, writeTinyModel } from '../../src/adapters/tinyModel.js';
import { tempDir } from '../helpers/build.js';


/** The bytes as a ByteSource that counts what it hands out. */
function counting(bytes: Uint8Array): ByteSource & { read_: number } {
  const source = {
    read_: 0,
    async read(buffer: Buffer, offset: number, length: number, position: number) {
      const slice = bytes.subarray(position, Math.min(bytes.length, position + length));
      buffer.set(slice, offset);
      source.read_ += slice.length;
      return { bytesRead: slice.length };
    },
  };
  return source;
}

t.test('a byte source gives the file\'s own header; a bound stops a larger one', async (t) => {
  const file = await writeTinyModel(path.join(await tempDir(t), 'tiny.gguf'));
  const bytes = encodeGguf(tinyModel());
  const fromFile = await readGgufInfo(file);
  const source = counting(bytes);
  const fromSource = await readGgufHeader(file, source, bytes.length, 1024 * 1024);
  t.same(fromSource, fromFile, 'the same header, metadata and tensors');
  t.ok(source.read_ <= 1024 * 1024, `read ${source.read_} bytes, within the bound`);

  const bound = 4096;
  t.ok(fromFile.dataOffset > bound, 'the header is larger than the bound below');
  const small = counting(bytes);
  const error = await readGgufHeader('remote.gguf', small, bytes.length, bound).catch((e: unknown) => e);
  t.ok(error instanceof GgufError);
  t.match((error as Error).message, /^remote\.gguf: the header is larger than 4096 bytes/);
  t.ok(small.read_ <= bound, `read ${small.read_} bytes before refusing, no more than the bound`);
});
