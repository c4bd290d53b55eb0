// Image files by their bytes (spec 4.4: PNG, JPEG or WebP, told by the magic bytes, never the
// name), the size an uploaded image's header declares (read without decoding it, so that a small
// file declaring a huge image is refused before sd-cli sees it), and the privacy pass over every
// returned PNG (spec 8): each text chunk (`tEXt`, `iTXt`, `zTXt`) and `eXIf` is removed, since
// image programs write the prompt and their settings there (stable-diffusion.cpp writes a
// `parameters` text chunk unless told not to).
import { crc32 } from 'node:zlib';

export type ImageKind = 'png' | 'jpeg' | 'webp';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The image format a file's first bytes name, or undefined (GIF, BMP, text, a renamed file…). */
export function imageKind(bytes: Buffer): ImageKind | undefined {
  if (bytes.length >= 8 && bytes.subarray(0, 8).equals(PNG_SIGNATURE)) return 'png';
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'jpeg';
  if (bytes.length >= 12 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP') return 'webp';
  return undefined;
}

export interface ImageSize {
  width: number;
  height: number;
}

/** SOF markers of JPEG: baseline, progressive and the rest (not DHT C4, JPG C8, DAC CC). */
const JPEG_SOF = new Set([0xc0, 0xc1, 0xc2, 0xc3, 0xc5, 0xc6, 0xc7, 0xc9, 0xca, 0xcb, 0xcd, 0xce, 0xcf]);

/**
 * The size an image file declares in its header, without decoding it (a 20 KB PNG may
 * declare 100000x100000 pixels): PNG's IHDR, WebP's VP8, VP8L or VP8X header, JPEG's first frame
 * header (SOF), walking its segments. Undefined when the header is cut or malformed.
 */
export function declaredSize(bytes: Buffer): ImageSize | undefined {
  const kind = imageKind(bytes);
  if (kind === 'png') {
    if (bytes.length < 24 || bytes.toString('latin1', 12, 16) !== 'IHDR') return undefined;
    return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
  }
  if (kind === 'webp') {
    const chunk = bytes.length >= 16 ? bytes.toString('latin1', 12, 16) : '';
    if (chunk === 'VP8 ' && bytes.length >= 30 && bytes[23] === 0x9d && bytes[24] === 0x01 && bytes[25] === 0x2a) {
      return { width: bytes.readUInt16LE(26) & 0x3fff, height: bytes.readUInt16LE(28) & 0x3fff };
    }
    if (chunk === 'VP8L' && bytes.length >= 25 && bytes[20] === 0x2f) {
      const bits = bytes.readUInt32LE(21);
      return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 };
    }
    if (chunk === 'VP8X' && bytes.length >= 30) return { width: bytes.readUIntLE(24, 3) + 1, height: bytes.readUIntLE(27, 3) + 1 };
    return undefined;
  }
  if (kind === 'jpeg') {
    let at = 2;
    while (at + 4 <= bytes.length) {
      if (bytes[at] !== 0xff) return undefined;
      const marker = bytes[at + 1]!;
      // Fill bytes, and markers without a length (TEM, RSTn).
      if (marker === 0xff) {
        at += 1;
        continue;
      }
      if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
        at += 2;
        continue;
      }
      if (marker === 0xd9 || marker === 0xda) return undefined;
      const length = bytes.readUInt16BE(at + 2);
      if (JPEG_SOF.has(marker)) return at + 9 <= bytes.length ? { width: bytes.readUInt16BE(at + 7), height: bytes.readUInt16BE(at + 5) } : undefined;
      if (length < 2) return undefined;
      at += 2 + length;
    }
  }
  return undefined;
}

export class PngError extends Error {
  override name = 'PngError';
}

export interface PngChunk {
  type: string;
  /** The whole chunk: length, type, data and CRC. */
  bytes: Buffer;
  data: Buffer;
}

/** The chunks of a PNG file, checked: signature, lengths within the file, CRCs, IHDR first, IEND last. */
export function pngChunks(bytes: Buffer): PngChunk[] {
  if (imageKind(bytes) !== 'png') throw new PngError('not a PNG file (signature)');
  const chunks: PngChunk[] = [];
  let at = 8;
  while (at < bytes.length) {
    if (at + 12 > bytes.length) throw new PngError(`truncated chunk header at byte ${at}`);
    const length = bytes.readUInt32BE(at);
    const end = at + 12 + length;
    if (length > 0x7fffffff || end > bytes.length) throw new PngError(`chunk at byte ${at} runs past the end of the file`);
    const type = bytes.toString('latin1', at + 4, at + 8);
    if (!/^[A-Za-z]{4}$/.test(type)) throw new PngError(`bad chunk type at byte ${at}`);
    const crc = bytes.readUInt32BE(end - 4);
    if (crc32(bytes.subarray(at + 4, end - 4)) !== crc) throw new PngError(`bad CRC in the ${type} chunk`);
    chunks.push({ type, bytes: bytes.subarray(at, end), data: bytes.subarray(at + 8, end - 4) });
    at = end;
    if (type === 'IEND') break;
  }
  if (chunks[0]?.type !== 'IHDR') throw new PngError('the first chunk is not IHDR');
  if (chunks.at(-1)?.type !== 'IEND') throw new PngError('no IEND chunk at the end');
  if (chunks.at(-1)!.data.length !== 0) throw new PngError('the IEND chunk carries data');
  const ihdr = chunks[0].data;
  if (ihdr.length !== 13) throw new PngError(`the IHDR chunk has ${ihdr.length} bytes, not 13`);
  if (ihdr.readUInt32BE(0) === 0 || ihdr.readUInt32BE(4) === 0 || ihdr.readUInt32BE(0) > 0x7fffffff || ihdr.readUInt32BE(4) > 0x7fffffff) {
    throw new PngError('the IHDR chunk names an impossible size');
  }
  if (chunks.filter((c) => c.type === 'IHDR').length !== 1) throw new PngError('more than one IHDR chunk');
  if (!chunks.some((c) => c.type === 'IDAT')) throw new PngError('no IDAT chunk: no image data');
  return chunks;
}

/** Chunks that carry text or camera metadata: never returned to a client. */
export const METADATA_CHUNKS: ReadonlySet<string> = new Set(['tEXt', 'iTXt', 'zTXt', 'eXIf']);

/** The PNG without its text and EXIF chunks, and what was removed. */
export function stripPngMetadata(bytes: Buffer): { png: Buffer; removed: string[] } {
  const chunks = pngChunks(bytes);
  const kept = chunks.filter((c) => !METADATA_CHUNKS.has(c.type));
  const removed = chunks.filter((c) => METADATA_CHUNKS.has(c.type)).map((c) => c.type);
  return { png: Buffer.concat([PNG_SIGNATURE, ...kept.map((c) => c.bytes)]), removed };
}

/** Width and height from the IHDR chunk. */
export function pngSize(bytes: Buffer): { width: number; height: number } {
  const ihdr = pngChunks(bytes)[0]!;
  return { width: ihdr.data.readUInt32BE(0), height: ihdr.data.readUInt32BE(4) };
}

/** One chunk with its length and CRC, for writers (tests, the fake image program). */
export function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}
