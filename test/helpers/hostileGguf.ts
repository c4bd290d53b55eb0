// A GGUF header that claims 2^60 tensors: a model file whose reader must refuse it (not loop or
// allocate), listed with its error beside the files that can be read.
export function hostileGguf(): Buffer {
  const header = Buffer.alloc(24);
  header.write('GGUF', 0, 'latin1');
  header.writeUInt32LE(3, 4);
  header.writeBigUInt64LE(1n << 60n, 8);
  header.writeBigUInt64LE(0n, 16);
  return header;
}
