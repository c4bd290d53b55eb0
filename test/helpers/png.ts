// A tiny real PNG for the tests that upload reference images (the routes check their magic bytes).
import { deflateSync } from 'node:zlib';
import { pngChunk } from '../../src/adapters/png.js';

/** A grey 8-bit greyscale PNG of `width` x `height`. */
export function png(width = 8, height = 8, fill = 0x80): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8;
  ihdr[9] = 0;
  const rows = Buffer.alloc((width + 1) * height, fill);
  for (let y = 0; y < height; y++) rows[y * (width + 1)] = 0;
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), pngChunk('IHDR', ihdr), pngChunk('IDAT', deflateSync(rows)), pngChunk('IEND', Buffer.alloc(0))]);
}
