// GGUF model files (ggml docs/gguf.md): the scheduler forecasts a llama-server worker's memory
// from the file's own header before starting it, so this reads the header, the metadata and the
// tensor infos and never the tensor data (real files are tens of GiB). The header is read in
// chunks through one file handle into a growing buffer; big metadata arrays (the tokenizer's
// 150k tokens, scores, merges) are stepped over and only their type and length are kept (and a
// string array's longest item, which bounds the text a token stands for: longestToken), while
// scalars and small arrays (per-layer values) are kept as values. Every count and length is
// checked against what the file can hold, so a damaged or hostile file fails with an error that
// names the file instead of exhausting memory. Tensor sizes come from each ggml type's block
// layout. `modelFacts` turns the architecture's keys and the tensor sizes into what a forecast
// needs; `encodeGguf` writes valid GGUF v3 files for tests and the tiny-model generator.
import type { Stats } from 'node:fs';
import { stat, type FileHandle } from 'node:fs/promises';
import { NotRegularFile, openRegular } from './regularFile.js';

// ---------------------------------------------------------------------------------------------
// ggml tensor types

export interface GgmlType {
  id: number;
  name: string;
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
}

/**
 * [id, name, elements per block, bytes per block], as ggml's type traits define them; the sizes
 * were checked against the block structs of ggml-common.h, and test/adapters/gguf.test.ts compares
 * the table with llama.cpp's own (gguf-py's GGML_QUANT_SIZES) of the release the set-up builds.
 * Ids 4, 5 and 31..33, 36..38 were removed from ggml and are not valid in GGUF files.
 */
const TYPE_TABLE: ReadonlyArray<readonly [number, string, number, number]> = [
  [0, 'F32', 1, 4],
  [1, 'F16', 1, 2],
  [2, 'Q4_0', 32, 18],
  [3, 'Q4_1', 32, 20],
  [6, 'Q5_0', 32, 22],
  [7, 'Q5_1', 32, 24],
  [8, 'Q8_0', 32, 34],
  [9, 'Q8_1', 32, 36],
  [10, 'Q2_K', 256, 84],
  [11, 'Q3_K', 256, 110],
  [12, 'Q4_K', 256, 144],
  [13, 'Q5_K', 256, 176],
  [14, 'Q6_K', 256, 210],
  [15, 'Q8_K', 256, 292],
  [16, 'IQ2_XXS', 256, 66],
  [17, 'IQ2_XS', 256, 74],
  [18, 'IQ3_XXS', 256, 98],
  [19, 'IQ1_S', 256, 50],
  [20, 'IQ4_NL', 32, 18],
  [21, 'IQ3_S', 256, 110],
  [22, 'IQ2_S', 256, 82],
  [23, 'IQ4_XS', 256, 136],
  [24, 'I8', 1, 1],
  [25, 'I16', 1, 2],
  [26, 'I32', 1, 4],
  [27, 'I64', 1, 8],
  [28, 'F64', 1, 8],
  [29, 'IQ1_M', 256, 56],
  [30, 'BF16', 1, 2],
  [34, 'TQ1_0', 256, 54],
  [35, 'TQ2_0', 256, 66],
  [39, 'MXFP4', 32, 17],
  [40, 'NVFP4', 64, 36],
  [41, 'Q1_0', 128, 18],
  [42, 'Q2_0', 64, 18],
];

export const GGML_TYPES: ReadonlyMap<number, GgmlType> = new Map(
  TYPE_TABLE.map(([id, name, blockSize, typeSize]) => [id, { id, name, blockSize, typeSize }]),
);

/** GGML_MAX_DIMS: ggml tensors have at most 4 dimensions. */
const MAX_DIMS = 4;

/**
 * Bytes of a tensor of ggml type `type` with dimensions `dims` (ne[0] first, the row length):
 * rows of ne[0] / blockSize blocks of typeSize bytes. Throws (a plain message, without a file)
 * for an unknown type, a row that is not whole blocks, or sizes beyond 2^53.
 */
export function ggmlTensorBytes(type: number, dims: readonly number[]): number {
  const traits = GGML_TYPES.get(type);
  if (!traits) throw new Error(`unknown ggml type id ${type}`);
  if (dims.length > MAX_DIMS) throw new Error(`${dims.length} dimensions (ggml allows at most ${MAX_DIMS})`);
  for (const d of dims) {
    if (!Number.isSafeInteger(d) || d < 0) throw new Error(`invalid dimension ${d}`);
  }
  const row = dims[0] ?? 1;
  if (row % traits.blockSize !== 0) {
    throw new Error(`a row of ${row} elements is not a whole number of ${traits.name} blocks of ${traits.blockSize}`);
  }
  let blocks = BigInt(row / traits.blockSize);
  for (const d of dims.slice(1)) blocks *= BigInt(d);
  const bytes = blocks * BigInt(traits.typeSize);
  if (bytes > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`absurd size: ${bytes} bytes`);
  return Number(bytes);
}

// ---------------------------------------------------------------------------------------------
// GGUF value types and what the reader returns

/** GGUF metadata value types, indexed by their type id (0..12). */
const VALUE_TYPES = ['uint8', 'int8', 'uint16', 'int16', 'uint32', 'int32', 'float32', 'bool', 'string', 'array', 'uint64', 'int64', 'float64'] as const;
export type GgufValueType = (typeof VALUE_TYPES)[number];

const FIXED_SIZES: Partial<Record<GgufValueType, number>> = {
  uint8: 1,
  int8: 1,
  uint16: 2,
  int16: 2,
  uint32: 4,
  int32: 4,
  float32: 4,
  bool: 1,
  uint64: 8,
  int64: 8,
  float64: 8,
};

/**
 * A scalar as read: numbers for 8..32-bit integers and floats; 64-bit integers are numbers when
 * they are safe integers (|v| <= 2^53 - 1) and bigints otherwise.
 */
export type GgufScalar = string | number | bigint | boolean;

/** An array too big to keep (over SMALL_ARRAY_MAX items, or an array of arrays): its shape only. */
export interface GgufSkippedArray {
  skipped: true;
  itemType: GgufValueType;
  length: number;
  /** An array of strings: the byte length of its longest item (the vocabulary's longest token). */
  longest?: number;
}

export type GgufMetadataValue = GgufScalar | GgufScalar[] | GgufSkippedArray;

/** Arrays up to this many items are kept as values: enough for any per-layer array (llama.cpp allows 512 layers). */
export const SMALL_ARRAY_MAX = 512;

export interface GgufTensorInfo {
  name: string;
  /** ne[0] (the row length) first, as stored. */
  dims: number[];
  /** ggml type id. */
  type: number;
  typeName: string;
  bytes: number;
  /** Relative to the data section: the tensor starts at dataOffset + offset in the file. */
  offset: number;
}

export interface GgufInfo {
  file: string;
  fileSize: number;
  version: 2 | 3;
  alignment: number;
  /** A null-prototype record, in file order. */
  metadata: Record<string, GgufMetadataValue>;
  tensors: GgufTensorInfo[];
  /** File offset of the tensor data section (the end of the header, aligned). */
  dataOffset: number;
}

/** Every problem with a file: the message starts with the file's path. */
export class GgufError extends Error {
  readonly file: string;
  constructor(file: string, problem: string) {
    super(`${file}: ${problem}`);
    this.name = 'GgufError';
    this.file = file;
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

const MAGIC = 'GGUF';
const DEFAULT_ALIGNMENT = 32;
const FIRST_CHUNK = 64 * 1024;
const MAX_CHUNK = 1024 * 1024;
/** Sanity cap on the header bytes read: real headers, tokenizer included, are a few MiB. */
const MAX_HEADER_READ = 256 * 1024 * 1024;
const MAX_STRING = 64 * 1024 * 1024;
const MAX_NAME = 64 * 1024;
const MAX_COUNT = 1 << 20;
const MAX_ARRAY = 1 << 28;
const MAX_NESTING = 8;
/** Smallest possible encodings, to tell absurd counts from what the file can hold. */
const MIN_KV_BYTES = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8;

/**
 * Where the header's bytes come from: a file handle, or anything that reads `length` bytes at
 * `position` into `buffer` at `offset` the same way (a hub file read with HTTP range requests).
 * A read may return fewer bytes than asked; 0 means the source ended.
 */
export interface ByteSource {
  read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
}

/** A position in the file with a buffered window of the bytes from there on. */
class HeaderCursor {
  position = 0;
  /** What is being read, for truncation messages. */
  context = 'the header';
  private buffer = Buffer.alloc(0);
  private bufferStart = 0;
  private chunk = FIRST_CHUNK;
  private bytesRead = 0;

  constructor(
    private readonly source: ByteSource,
    readonly size: number,
    readonly fail: (problem: string) => never,
    /** The most bytes read in all (the read-ahead included): a header that needs more fails. */
    private readonly maxBytes: number = MAX_HEADER_READ,
  ) {}

  available(): number {
    return this.bufferStart + this.buffer.length - this.position;
  }

  remaining(): number {
    return this.size - this.position;
  }

  /** Makes `n` bytes from the position available in the buffer, reading more of the file if needed. */
  async need(n: number): Promise<void> {
    if (this.available() >= n) return;
    if (n > this.remaining()) {
      this.fail(`truncated: ${this.context} needs ${n} bytes at offset ${this.position}, but the file ends at ${this.size}`);
    }
    const keepFrom = this.position - this.bufferStart;
    const kept = keepFrom < this.buffer.length ? this.buffer.subarray(keepFrom) : Buffer.alloc(0);
    const readFrom = this.position + kept.length;
    const least = n - kept.length;
    // Read ahead by the chunk, but never past the bound: only what the header needs may reach it.
    const want = Math.min(Math.max(least, Math.min(this.chunk, this.maxBytes - this.bytesRead)), this.size - readFrom);
    if (this.bytesRead + want > this.maxBytes) {
      this.fail(`the header is larger than ${formatBound(this.maxBytes)} (at offset ${this.position}, reading ${this.context})`);
    }
    const next = Buffer.allocUnsafe(kept.length + want);
    kept.copy(next);
    let filled = kept.length;
    while (filled < next.length) {
      const at = readFrom + filled - kept.length;
      const { bytesRead } = await this.source.read(next, filled, next.length - filled, at);
      if (bytesRead === 0) this.fail(`truncated: the file ended at offset ${at} while reading ${this.context}`);
      filled += bytesRead;
    }
    this.bytesRead += want;
    this.buffer = next;
    this.bufferStart = this.position;
    this.chunk = Math.min(this.chunk * 2, MAX_CHUNK);
  }

  /** Steps over `n` bytes without reading them. */
  skip(n: number): void {
    if (n > this.remaining()) {
      this.fail(`truncated: ${this.context} needs ${n} bytes at offset ${this.position}, but the file ends at ${this.size}`);
    }
    this.position += n;
  }

  private take(n: number): number {
    const at = this.position - this.bufferStart;
    this.position += n;
    return at;
  }

  // Synchronous reads: the caller has made the bytes available with need().
  u32(): number {
    return this.buffer.readUInt32LE(this.take(4));
  }
  u64(): bigint {
    return this.buffer.readBigUInt64LE(this.take(8));
  }
  bytes(n: number): Buffer {
    const at = this.take(n);
    return this.buffer.subarray(at, at + n);
  }

  scalar(type: GgufValueType): GgufScalar {
    switch (type) {
      case 'uint8':
        return this.buffer.readUInt8(this.take(1));
      case 'int8':
        return this.buffer.readInt8(this.take(1));
      case 'uint16':
        return this.buffer.readUInt16LE(this.take(2));
      case 'int16':
        return this.buffer.readInt16LE(this.take(2));
      case 'uint32':
        return this.buffer.readUInt32LE(this.take(4));
      case 'int32':
        return this.buffer.readInt32LE(this.take(4));
      case 'float32':
        return this.buffer.readFloatLE(this.take(4));
      case 'float64':
        return this.buffer.readDoubleLE(this.take(8));
      case 'bool':
        return this.buffer.readUInt8(this.take(1)) !== 0;
      case 'uint64':
        return safeNumber(this.buffer.readBigUInt64LE(this.take(8)));
      case 'int64':
        return safeNumber(this.buffer.readBigInt64LE(this.take(8)));
      default:
        throw new Error(`not a fixed-size GGUF type: ${type}`);
    }
  }

  async readU32(): Promise<number> {
    await this.need(4);
    return this.u32();
  }

  /**
   * A uint64 count or length: absurd over `max`; a truncated file when its items, of at least
   * `itemBytes` each, cannot fit in the rest of the file. Either way no loop runs on it.
   */
  async readCount(what: string, max: number, itemBytes = 1): Promise<number> {
    await this.need(8);
    const at = this.position;
    const value = this.u64();
    if (value > BigInt(max)) this.fail(`absurd ${what} ${value} at offset ${at} (at most ${max})`);
    const least = value * BigInt(itemBytes);
    if (least > BigInt(this.remaining())) {
      this.fail(`truncated: ${what} ${value} at offset ${at} needs at least ${least} more bytes, but the file ends at ${this.size}`);
    }
    return Number(value);
  }

  async readString(what: string, max = MAX_STRING): Promise<string> {
    const length = await this.readCount(`${what} length`, max);
    await this.need(length);
    return this.bytes(length).toString('utf8');
  }
}

function formatBound(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / 1024 / 1024} MiB` : `${bytes} bytes`;
}

function safeNumber(value: bigint): number | bigint {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) && value >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(value) : value;
}

function valueType(cursor: HeaderCursor, id: number, where: string): GgufValueType {
  const type = VALUE_TYPES[id];
  if (type === undefined) cursor.fail(`unknown metadata value type ${id} for ${where}`);
  return type;
}

async function readArray(cursor: HeaderCursor, where: string, depth: number): Promise<GgufScalar[] | GgufSkippedArray> {
  if (depth > MAX_NESTING) cursor.fail(`${where}: arrays nested more than ${MAX_NESTING} deep`);
  const itemType = valueType(cursor, await cursor.readU32(), `the items of ${where}`);
  const minItem = FIXED_SIZES[itemType] ?? (itemType === 'string' ? 8 : 12);
  // Checked against the bytes left, so a huge count cannot make the loops below spin.
  const length = await cursor.readCount(`array length for ${where}`, MAX_ARRAY, minItem);
  const fixed = FIXED_SIZES[itemType];
  if (itemType !== 'array' && length <= SMALL_ARRAY_MAX) {
    const items: GgufScalar[] = [];
    for (let i = 0; i < length; i++) {
      if (fixed !== undefined) {
        await cursor.need(fixed);
        items.push(cursor.scalar(itemType));
      } else {
        items.push(await cursor.readString(`${where}[${i}]`));
      }
    }
    return items;
  }
  if (fixed !== undefined) {
    cursor.skip(fixed * length);
  } else if (itemType === 'string') {
    let longest = 0;
    for (let i = 0; i < length; i++) {
      if (cursor.available() < 8) await cursor.need(8);
      const size = cursor.u64();
      if (size > BigInt(Math.min(MAX_STRING, cursor.remaining()))) cursor.fail(`absurd string length ${size} in ${where}[${i}]`);
      longest = Math.max(longest, Number(size));
      cursor.skip(Number(size));
    }
    return { skipped: true, itemType, length, longest };
  } else {
    for (let i = 0; i < length; i++) await readArray(cursor, `${where}[${i}]`, depth + 1);
  }
  return { skipped: true, itemType, length };
}

async function readValue(cursor: HeaderCursor, type: GgufValueType, where: string): Promise<GgufMetadataValue> {
  if (type === 'string') return cursor.readString(where);
  if (type === 'array') return readArray(cursor, where, 1);
  await cursor.need(FIXED_SIZES[type] ?? 0);
  return cursor.scalar(type);
}

const alignUp = (n: number, alignment: number) => Math.ceil(n / alignment) * alignment;

async function readHeader(file: string, source: ByteSource, size: number, maxBytes?: number): Promise<GgufInfo> {
  function fail(problem: string): never {
    throw new GgufError(file, problem);
  }
  const cursor = new HeaderCursor(source, size, fail, maxBytes);

  if (size < 4) fail(`not a GGUF file (only ${size} bytes)`);
  await cursor.need(Math.min(8, size));
  const magic = cursor.bytes(4);
  if (magic.toString('latin1') !== MAGIC) fail(`not a GGUF file (it starts with ${JSON.stringify(magic.toString('latin1'))}, not "GGUF")`);
  cursor.context = 'the version';
  await cursor.need(4);
  const raw = cursor.bytes(4);
  const version = raw.readUInt32LE(0);
  if (version !== 2 && version !== 3) {
    const bigEndian = raw.readUInt32BE(0);
    if (bigEndian === 2 || bigEndian === 3) fail(`big-endian GGUF files are not supported (version ${bigEndian})`);
    fail(`unsupported GGUF version ${version} (versions 2 and 3 are supported)`);
  }

  cursor.context = 'the tensor count';
  const tensorCount = await cursor.readCount('tensor count', MAX_COUNT, MIN_TENSOR_INFO_BYTES);
  cursor.context = 'the metadata count';
  const kvCount = await cursor.readCount('metadata count', MAX_COUNT, MIN_KV_BYTES);

  const metadata: Record<string, GgufMetadataValue> = Object.create(null) as Record<string, GgufMetadataValue>;
  let alignment = DEFAULT_ALIGNMENT;
  for (let i = 0; i < kvCount; i++) {
    cursor.context = `metadata key #${i}`;
    const key = await cursor.readString(`metadata key #${i}`, MAX_NAME);
    if (Object.hasOwn(metadata, key)) fail(`duplicate metadata key ${JSON.stringify(key)}`);
    const where = `metadata ${JSON.stringify(key)}`;
    cursor.context = where;
    const type = valueType(cursor, await cursor.readU32(), where);
    const value = await readValue(cursor, type, where);
    if (key === 'general.alignment') {
      if (type !== 'uint32' || typeof value !== 'number' || value === 0 || (value & (value - 1)) !== 0) {
        fail(`general.alignment must be a uint32 power of two, found ${type} ${String(value)}`);
      }
      alignment = value;
    }
    metadata[key] = value;
  }

  const tensors: GgufTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    cursor.context = `tensor info #${i}`;
    const name = await cursor.readString(`tensor name #${i}`, MAX_NAME);
    if (names.has(name)) fail(`duplicate tensor ${JSON.stringify(name)}`);
    names.add(name);
    cursor.context = `tensor ${JSON.stringify(name)}`;
    const nDims = await cursor.readU32();
    if (nDims > MAX_DIMS) fail(`tensor ${JSON.stringify(name)} has ${nDims} dimensions (at most ${MAX_DIMS})`);
    await cursor.need(nDims * 8 + 4 + 8);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) {
      const dim = cursor.u64();
      if (dim > BigInt(Number.MAX_SAFE_INTEGER)) fail(`tensor ${JSON.stringify(name)} has an absurd dimension ${dim}`);
      dims.push(Number(dim));
    }
    const type = cursor.u32();
    const offset = cursor.u64();
    const traits = GGML_TYPES.get(type);
    if (!traits) fail(`tensor ${JSON.stringify(name)} has unknown ggml type id ${type}`);
    let bytes = 0;
    try {
      bytes = ggmlTensorBytes(type, dims);
    } catch (error) {
      fail(`tensor ${JSON.stringify(name)} [${dims.join(', ')}] ${traits.name}: ${(error as Error).message}`);
    }
    if (offset > BigInt(Number.MAX_SAFE_INTEGER)) fail(`tensor ${JSON.stringify(name)} has an absurd offset ${offset}`);
    if (Number(offset) % alignment !== 0) fail(`tensor ${JSON.stringify(name)} has offset ${offset}, not a multiple of the alignment ${alignment}`);
    tensors.push({ name, dims, type, typeName: traits.name, bytes, offset: Number(offset) });
  }

  const dataOffset = alignUp(cursor.position, alignment);
  for (const tensor of tensors) {
    const end = dataOffset + tensor.offset + tensor.bytes;
    if (end > size) fail(`truncated: tensor ${JSON.stringify(tensor.name)} ends at offset ${end}, but the file ends at ${size}`);
  }
  return { file, fileSize: size, version, alignment, metadata, tensors, dataOffset };
}

/**
 * Reads a GGUF file's header, metadata and tensor infos (never the tensor data). Rejects with a
 * GgufError naming the file for: not GGUF (bad magic), an unsupported version (2 and 3 are read),
 * a truncated file (in the header, or tensors reaching past its end), absurd counts or lengths,
 * an unknown ggml type.
 */
export async function readGgufInfo(file: string, options: { maxHeaderBytes?: number } = {}): Promise<GgufInfo> {
  let opened: { handle: FileHandle; stats: Stats };
  try {
    // Stat first: a FIFO or device named as the model is never opened.
    opened = await openRegular(file);
  } catch (error) {
    throw new GgufError(file, error instanceof NotRegularFile ? `not a regular file (a ${error.kind})` : `cannot open: ${(error as Error).message}`);
  }
  try {
    return await readHeader(file, opened.handle, opened.stats.size, options.maxHeaderBytes);
  } finally {
    await opened.handle.close();
  }
}

/**
 * Reads the header of a GGUF file of `size` bytes from another byte source (a hub file read with
 * range requests), reading at most `maxHeaderBytes` in all; `name` names it in errors.
 */
export function readGgufHeader(name: string, source: ByteSource, size: number, maxHeaderBytes: number): Promise<GgufInfo> {
  return readHeader(name, source, size, maxHeaderBytes);
}

// ---------------------------------------------------------------------------------------------
// Model facts for the memory forecast

export interface ModelFacts {
  architecture: string;
  /** <arch>.block_count */
  layerCount: number;
  /** <arch>.context_length: the trained context. */
  contextLength: number;
  embeddingLength: number;
  /** <arch>.attention.head_count (the largest, if given per layer). */
  headCount: number;
  /** <arch>.attention.head_count_kv (default head_count); the largest if given per layer. */
  headCountKv: number;
  /** KV heads of each layer (layerCount entries; 0 for a layer without attention). */
  headCountKvPerLayer: number[];
  /** <arch>.attention.key_length, default embeddingLength / headCount. */
  keyLength: number;
  /** <arch>.attention.value_length, default embeddingLength / headCount. */
  valueLength: number;
  /** <arch>.vocab_size, else the length of tokenizer.ggml.tokens; undefined when neither is there. */
  vocabSize: number | undefined;
  /** All tensors. */
  totalBytes: number;
  /**
   * Tensors named blk.<i>.*, by block index: layerCount entries, more if the file has blocks
   * past block_count.
   */
  layerBytes: number[];
  /** Input tensors that llama.cpp keeps in host memory: token_embd, position_embd, token_types, per_layer_token_embd. */
  inputBytes: number;
  /** Every other non-block tensor (output, output_norm, ...): on the GPU when all layers are. */
  outputBytes: number;
}

/** Tensor base names of llama.cpp's input layer (LLM_TENSOR_LAYER_INPUT), assigned to host memory. */
const INPUT_TENSORS: ReadonlySet<string> = new Set(['token_embd', 'position_embd', 'token_types', 'per_layer_token_embd']);

function countValue(info: GgufInfo, key: string, value: unknown): number {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value;
  throw new GgufError(info.file, `metadata ${JSON.stringify(key)} must be a non-negative integer, found ${describe(value)}`);
}

function describe(value: unknown): string {
  if (typeof value === 'bigint') return `${value} (too large)`;
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object' && value !== null) return 'a large array';
  return JSON.stringify(value);
}

/** A count given once or per layer, as one value per layer; undefined when the key is missing. */
function perLayer(info: GgufInfo, key: string, layers: number): number[] | undefined {
  const value = info.metadata[key];
  if (value === undefined) return undefined;
  if (Array.isArray(value)) {
    if (value.length !== layers) {
      throw new GgufError(info.file, `metadata ${JSON.stringify(key)} has ${value.length} per-layer values for ${layers} layers`);
    }
    return value.map((v, i) => countValue(info, `${key}[${i}]`, v));
  }
  return Array.from({ length: layers }, () => countValue(info, key, value));
}

function required<T>(info: GgufInfo, key: string, value: T | undefined): T {
  if (value === undefined) throw new GgufError(info.file, `missing metadata key ${JSON.stringify(key)}`);
  return value;
}

const max = (values: number[]) => values.reduce((a, b) => Math.max(a, b), 0);

/** What a memory forecast needs from a file's metadata and tensors; missing required keys are errors naming the key and file. */
export function modelFacts(info: GgufInfo): ModelFacts {
  const arch = info.metadata['general.architecture'];
  if (typeof arch !== 'string' || arch === '') {
    if (arch === undefined) throw new GgufError(info.file, 'missing metadata key "general.architecture"');
    throw new GgufError(info.file, `metadata "general.architecture" must be a string, found ${describe(arch)}`);
  }
  const key = (name: string) => `${arch}.${name}`;
  const scalar = (name: string) => countValue(info, key(name), required(info, key(name), info.metadata[key(name)]));
  const optional = (name: string) => (info.metadata[key(name)] === undefined ? undefined : scalar(name));

  const layerCount = scalar('block_count');
  const contextLength = scalar('context_length');
  const embeddingLength = scalar('embedding_length');
  const heads = required(info, key('attention.head_count'), perLayer(info, key('attention.head_count'), layerCount));
  const headCount = max(heads);
  const kvHeads = perLayer(info, key('attention.head_count_kv'), layerCount) ?? heads;
  const defaultLength = headCount > 0 ? Math.floor(embeddingLength / headCount) : 0;
  const tokens = info.metadata['tokenizer.ggml.tokens'];
  const tokenCount = Array.isArray(tokens) ? tokens.length : typeof tokens === 'object' ? tokens.length : undefined;

  let totalBytes = 0;
  let inputBytes = 0;
  let outputBytes = 0;
  const layerBytes: number[] = Array.from({ length: layerCount }, () => 0);
  for (const tensor of info.tensors) {
    totalBytes += tensor.bytes;
    const block = /^blk\.(\d+)\./.exec(tensor.name);
    if (block) {
      const index = Number(block[1]);
      while (layerBytes.length <= index) layerBytes.push(0);
      layerBytes[index] = (layerBytes[index] ?? 0) + tensor.bytes;
    } else if (INPUT_TENSORS.has(tensor.name.split('.')[0] ?? '')) {
      inputBytes += tensor.bytes;
    } else {
      outputBytes += tensor.bytes;
    }
  }

  return {
    architecture: arch,
    layerCount,
    contextLength,
    embeddingLength,
    headCount,
    headCountKv: max(kvHeads),
    headCountKvPerLayer: kvHeads,
    keyLength: optional('attention.key_length') ?? defaultLength,
    valueLength: optional('attention.value_length') ?? defaultLength,
    vocabSize: optional('vocab_size') ?? tokenCount,
    totalBytes,
    layerBytes,
    inputBytes,
    outputBytes,
  };
}

// ---------------------------------------------------------------------------------------------
// Split models and the operator's summary

/** `<name>-00001-of-00003.gguf`: llama.cpp's gguf-split names, part and count 1-based. */
const SPLIT_NAME = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** A split part's place: the shared prefix, its number and the count; null for a whole file. */
export function splitPart(file: string): { prefix: string; part: number; count: number } | null {
  const match = SPLIT_NAME.exec(file);
  if (!match) return null;
  const part = Number(match[2]);
  const count = Number(match[3]);
  return part >= 1 && count >= 1 && part <= count ? { prefix: match[1] ?? '', part, count } : null;
}

/** The name of part `part` of `count` (1-based) of a split model whose parts start with `prefix`. */
export function splitName(prefix: string, part: number, count: number): string {
  return `${prefix}-${String(part).padStart(5, '0')}-of-${String(count).padStart(5, '0')}.gguf`;
}

/**
 * One model from the headers of its split parts, in order: the first part's metadata, every
 * part's tensors, the sizes summed. A part that is not of this split (its `split.no` or
 * `split.count` disagrees) is an error naming it.
 */
export function mergeSplit(parts: GgufInfo[]): GgufInfo {
  const first = parts[0];
  if (!first) throw new Error('mergeSplit: no parts');
  if (parts.length === 1) return first;
  parts.forEach((part, i) => {
    const count = part.metadata['split.count'];
    const no = part.metadata['split.no'];
    if ((count !== undefined && count !== parts.length) || (no !== undefined && no !== i)) {
      throw new GgufError(part.file, `not part ${i + 1} of ${parts.length} (its split.no is ${String(no)}, split.count ${String(count)})`);
    }
  });
  return { ...first, fileSize: parts.reduce((sum, part) => sum + part.fileSize, 0), tensors: parts.flatMap((part) => part.tensors) };
}

/** What an operator reads about a model file before choosing it (CONTRACT section 10, Facts). */
export interface GgufSummary {
  architecture: string | null;
  /** Weights in all tensors (general.parameter_count when the file states it). */
  parameters: number | null;
  /** The ggml type that holds most of the block weights (Q4_K, Q8_0, F16, ...). */
  quantization: string | null;
  context_length: number | null;
  chat_template: boolean;
}

export function ggufSummary(info: GgufInfo): GgufSummary {
  const arch = info.metadata['general.architecture'];
  const architecture = typeof arch === 'string' && arch !== '' ? arch : null;
  const stated = info.metadata['general.parameter_count'];
  let parameters = typeof stated === 'number' && Number.isSafeInteger(stated) && stated > 0 ? stated : 0;
  const byType = new Map<string, number>();
  for (const tensor of info.tensors) {
    if (typeof stated !== 'number') parameters += tensor.dims.reduce((product, d) => product * d, 1);
    if (/^blk\.\d+\./.test(tensor.name) && tensor.dims.length >= 2) byType.set(tensor.typeName, (byType.get(tensor.typeName) ?? 0) + tensor.bytes);
  }
  let quantization: string | null = null;
  let most = -1;
  for (const [type, bytes] of byType) if (bytes > most) [quantization, most] = [type, bytes];
  const context = architecture === null ? undefined : info.metadata[`${architecture}.context_length`];
  const template = info.metadata['tokenizer.chat_template'];
  return {
    architecture,
    parameters: parameters > 0 && Number.isSafeInteger(parameters) ? parameters : null,
    quantization,
    context_length: typeof context === 'number' && Number.isSafeInteger(context) && context > 0 ? context : null,
    chat_template: typeof template === 'string' && template.trim() !== '',
  };
}

// ---------------------------------------------------------------------------------------------
// The vocabulary's longest token

/**
 * The byte length of the vocabulary's longest token as stored (`tokenizer.ggml.tokens`), or
 * undefined without a vocabulary. A token stands for at most that many bytes of text: every
 * tokenizer stores a token at least as long as the text it stands for (SentencePiece's `▁` is 3
 * bytes for a space and `<0x0A>` 6 for one byte; byte-level BPE maps each byte to a character of
 * 1 or 2 bytes; WordPiece adds `##`), so a text of more bytes than `context` tokens of this length
 * cannot fit `context` tokens.
 */
export function longestToken(info: GgufInfo): number | undefined {
  const tokens = info.metadata['tokenizer.ggml.tokens'];
  if (Array.isArray(tokens)) return tokens.reduce<number>((most, token) => Math.max(most, typeof token === 'string' ? Buffer.byteLength(token) : 0), 0);
  return typeof tokens === 'object' ? tokens.longest : undefined;
}

/** Per model file: what its header said, while the file is unchanged (size, mtime and inode as when it was read). */
const longestTokens = new Map<string, { stamp: string; longest: Promise<number | undefined> }>();

/**
 * The longest token of the model file `file` (longestToken), read once per file and kept while the
 * file is unchanged; undefined when the file cannot be read or has no vocabulary.
 */
export async function longestTokenOf(file: string): Promise<number | undefined> {
  let stamp: string;
  try {
    const stats = await stat(file);
    stamp = `${stats.size}:${stats.mtimeMs}:${stats.ino}`;
  } catch {
    return undefined;
  }
  const known = longestTokens.get(file);
  if (known?.stamp === stamp) return known.longest;
  const longest = readGgufInfo(file).then(longestToken, () => undefined);
  longestTokens.set(file, { stamp, longest });
  return longest;
}

// ---------------------------------------------------------------------------------------------
// Writer

type IntType = 'uint8' | 'int8' | 'uint16' | 'int16' | 'uint32' | 'int32';
type FloatType = 'float32' | 'float64';
type LongType = 'uint64' | 'int64';

export type GgufScalarValue =
  | { type: IntType | FloatType; value: number }
  | { type: LongType; value: number | bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string };

export type GgufArrayValue =
  | { type: 'array'; itemType: IntType | FloatType; value: readonly number[] }
  | { type: 'array'; itemType: LongType; value: ReadonlyArray<number | bigint> }
  | { type: 'array'; itemType: 'bool'; value: readonly boolean[] }
  | { type: 'array'; itemType: 'string'; value: readonly string[] }
  | { type: 'array'; itemType: 'array'; value: readonly GgufArrayValue[] };

/** A metadata value for the writer, with its explicit GGUF type. */
export type GgufValue = GgufScalarValue | GgufArrayValue;

export interface GgufTensorSpec {
  name: string;
  dims: readonly number[];
  /** ggml type id. */
  type: number;
}

export interface GgufHeaderModel {
  metadata: ReadonlyArray<readonly [key: string, value: GgufValue]>;
  tensors: readonly GgufTensorSpec[];
  /** Default: general.alignment from the metadata, else 32. Written as general.alignment when not 32. */
  alignment?: number;
}

export interface GgufModel extends GgufHeaderModel {
  tensors: ReadonlyArray<GgufTensorSpec & { data: Uint8Array }>;
}

export interface GgufLayout {
  /** Everything before the data section, alignment padding included. */
  header: Uint8Array;
  dataOffset: number;
  /** The data section's length, padded to the alignment. */
  dataBytes: number;
  tensors: Array<{ name: string; bytes: number; offset: number }>;
}

const INT_RANGES: Record<IntType, readonly [number, number]> = {
  uint8: [0, 0xff],
  int8: [-0x80, 0x7f],
  uint16: [0, 0xffff],
  int16: [-0x8000, 0x7fff],
  uint32: [0, 0xffffffff],
  int32: [-0x80000000, 0x7fffffff],
};
const LONG_RANGES: Record<LongType, readonly [bigint, bigint]> = {
  uint64: [0n, 2n ** 64n - 1n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
};

class ByteWriter {
  private buffer = Buffer.alloc(4096);
  length = 0;

  /** Reserves n bytes and returns their offset; it may replace the buffer, so call it before `this.buffer.write*`. */
  private room(n: number): number {
    if (this.length + n > this.buffer.length) {
      const next = Buffer.alloc(Math.max(this.buffer.length * 2, this.length + n));
      this.buffer.copy(next, 0, 0, this.length);
      this.buffer = next;
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  u32(v: number): void {
    const at = this.room(4);
    this.buffer.writeUInt32LE(v, at);
  }
  u64(v: bigint): void {
    const at = this.room(8);
    this.buffer.writeBigUInt64LE(v, at);
  }
  bytes(b: Uint8Array): void {
    const at = this.room(b.length);
    this.buffer.set(b, at);
  }
  string(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(BigInt(bytes.length));
    this.bytes(bytes);
  }
  pad(alignment: number): void {
    this.room(alignUp(this.length, alignment) - this.length);
  }

  scalar(type: GgufValueType, value: unknown, where: string): void {
    const bad = (): never => {
      throw new Error(`${where}: ${typeof value === 'bigint' ? `${value}n` : JSON.stringify(value)} is not a valid ${type}`);
    };
    if (type === 'string') {
      if (typeof value !== 'string') bad();
      return this.string(value as string);
    }
    const size = FIXED_SIZES[type];
    if (size === undefined) return bad();
    if (type === 'uint64' || type === 'int64') {
      if (!(typeof value === 'bigint' || Number.isSafeInteger(value))) bad();
      const v = BigInt(value as number | bigint);
      const [lo, hi] = LONG_RANGES[type];
      if (v < lo || v > hi) bad();
      const at = this.room(size); // room() may replace the buffer: reserve before writing
      if (type === 'uint64') this.buffer.writeBigUInt64LE(v, at);
      else this.buffer.writeBigInt64LE(v, at);
      return;
    }
    if (type === 'bool' ? typeof value !== 'boolean' : typeof value !== 'number') bad();
    const v = Number(value);
    if (type in INT_RANGES) {
      const [lo, hi] = INT_RANGES[type as IntType];
      if (!Number.isInteger(v) || v < lo || v > hi) bad();
    }
    const at = this.room(size);
    if (type === 'uint8' || type === 'bool') this.buffer.writeUInt8(v, at);
    else if (type === 'int8') this.buffer.writeInt8(v, at);
    else if (type === 'uint16') this.buffer.writeUInt16LE(v, at);
    else if (type === 'int16') this.buffer.writeInt16LE(v, at);
    else if (type === 'uint32') this.buffer.writeUInt32LE(v, at);
    else if (type === 'int32') this.buffer.writeInt32LE(v, at);
    else if (type === 'float32') this.buffer.writeFloatLE(v, at);
    else this.buffer.writeDoubleLE(v, at);
  }

  /** An array's body: item type, count, items. */
  array(value: { itemType: unknown; value: unknown }, where: string): void {
    const typeId = VALUE_TYPES.indexOf(value.itemType as GgufValueType);
    if (typeId < 0) throw new Error(`${where}: unknown item type ${JSON.stringify(value.itemType)}`);
    if (!Array.isArray(value.value)) throw new Error(`${where}: an array value must be an array`);
    const items: unknown[] = value.value;
    this.u32(typeId);
    this.u64(BigInt(items.length));
    items.forEach((item, i) => {
      if (value.itemType !== 'array') return this.scalar(value.itemType as GgufValueType, item, `${where}[${i}]`);
      const nested = item as { type?: unknown; itemType: unknown; value: unknown };
      if (nested?.type !== 'array') throw new Error(`${where}[${i}]: the items of an array of arrays must be arrays`);
      this.array(nested, `${where}[${i}]`);
    });
  }

  value(value: GgufValue, where: string): void {
    const typeId = VALUE_TYPES.indexOf(value.type);
    if (typeId < 0) throw new Error(`${where}: unknown value type ${JSON.stringify(value.type)}`);
    this.u32(typeId);
    if (value.type === 'array') this.array(value, where);
    else this.scalar(value.type, value.value, where);
  }

  result(): Uint8Array {
    return new Uint8Array(this.buffer.buffer, this.buffer.byteOffset, this.length);
  }
}

/** GGML_MAX_NAME is 64 bytes with the terminating NUL. */
const MAX_TENSOR_NAME = 63;

/** The header of a GGUF v3 file and where each tensor's data goes; throws on anything llama.cpp would refuse. */
export function encodeGgufHeader(model: GgufHeaderModel): GgufLayout {
  const metadata = [...model.metadata];
  const keys = new Set<string>();
  for (const [key] of metadata) {
    if (keys.has(key)) throw new Error(`duplicate metadata key ${JSON.stringify(key)}`);
    keys.add(key);
  }
  const declared = metadata.find(([key]) => key === 'general.alignment')?.[1];
  if (declared && declared.type !== 'uint32') throw new Error('general.alignment must be a uint32');
  const alignment = model.alignment ?? (declared?.value as number | undefined) ?? DEFAULT_ALIGNMENT;
  if (!Number.isSafeInteger(alignment) || alignment <= 0 || alignment > 0xffffffff || (alignment & (alignment - 1)) !== 0) {
    throw new Error(`alignment ${alignment} is not a power of two`);
  }
  if (declared && declared.value !== alignment) throw new Error(`general.alignment ${String(declared.value)} differs from the alignment ${alignment}`);
  if (!declared && alignment !== DEFAULT_ALIGNMENT) metadata.push(['general.alignment', { type: 'uint32', value: alignment }]);

  const out = new ByteWriter();
  out.bytes(Buffer.from(MAGIC, 'latin1'));
  out.u32(3);
  out.u64(BigInt(model.tensors.length));
  out.u64(BigInt(metadata.length));
  for (const [key, value] of metadata) {
    out.string(key);
    out.value(value, `metadata ${JSON.stringify(key)}`);
  }

  const names = new Set<string>();
  const tensors: GgufLayout['tensors'] = [];
  let offset = 0;
  for (const tensor of model.tensors) {
    const where = `tensor ${JSON.stringify(tensor.name)}`;
    if (tensor.name === '' || Buffer.byteLength(tensor.name) > MAX_TENSOR_NAME) throw new Error(`${where}: a name must have 1 to ${MAX_TENSOR_NAME} bytes`);
    if (names.has(tensor.name)) throw new Error(`duplicate ${where}`);
    names.add(tensor.name);
    if (tensor.dims.length === 0) throw new Error(`${where}: no dimensions`);
    let bytes: number;
    try {
      bytes = ggmlTensorBytes(tensor.type, tensor.dims);
    } catch (error) {
      throw new Error(`${where}: ${(error as Error).message}`, { cause: error });
    }
    out.string(tensor.name);
    out.u32(tensor.dims.length);
    for (const d of tensor.dims) out.u64(BigInt(d));
    out.u32(tensor.type);
    out.u64(BigInt(offset));
    tensors.push({ name: tensor.name, bytes, offset });
    offset = alignUp(offset + bytes, alignment);
  }
  out.pad(alignment);
  return { header: out.result(), dataOffset: out.length, dataBytes: offset, tensors };
}

/**
 * A complete GGUF v3 file: header, metadata, tensor infos, then each tensor's data at its
 * aligned offset, the data section padded to the alignment. Each tensor's data must be exactly
 * its computed size.
 */
export function encodeGguf(model: GgufModel): Uint8Array {
  const layout = encodeGgufHeader(model);
  const file = new Uint8Array(layout.dataOffset + layout.dataBytes);
  file.set(layout.header, 0);
  model.tensors.forEach((tensor, i) => {
    const place = layout.tensors[i];
    if (!place) throw new Error(`tensor ${JSON.stringify(tensor.name)}: no layout`);
    if (tensor.data.length !== place.bytes) {
      const shape = `[${tensor.dims.join(', ')}] of ggml type ${tensor.type}`;
      throw new Error(`tensor ${JSON.stringify(tensor.name)}: ${tensor.data.length} bytes of data, but ${shape} takes ${place.bytes}`);
    }
    file.set(tensor.data, layout.dataOffset + place.offset);
  });
  return file;
}
