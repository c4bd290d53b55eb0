// CONTRACT section 10, the model folders: every model file under SERVICE_DECK_MODEL_DIRS with its
// facts and the memory check's forecast. A folder is walked to a bounded depth and entry count,
// symlinked folders are not entered (no loops), and each file's header is read on the probe lanes
// (src/adapters/regularFile.ts: never more than two of libuv's threads, so a listing never holds
// up chat, login or a profile save) with a bound on the header bytes. What a file's header says
// is cached by (path, size, mtime), so an unchanged file is read once; the forecast is made
// afresh on each listing from the room probed then. A file that cannot be read shows its error
// and stops nothing else. Split GGUFs (`-00001-of-00003.gguf`) are one model: the first part's
// path, the parts' bytes summed, their headers merged. `find` looks up one file by its listed path
// with the same walk, for a profile made of it: a path the walk did not find is none.
import { constants } from 'node:fs';
import { open, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { LRUCache } from 'lru-cache';
import { ggufSummary, mergeSplit, readGgufInfo, splitName, splitPart, type GgufInfo } from '../../adapters/gguf.js';
import { onProbeLane } from '../../adapters/regularFile.js';
import type { ForecastRoom, ModelShape } from '../../../machines/supervisor/index.js';
import { chatShape } from '../startFacts.js';
import { forecastContext, forecastView, type ModelFacts } from './modelForecast.js';
import type { ModelFileView, ModelFilesView, ModelFormat } from '../observe/console.types.js';

export type { ModelFileView, ModelFilesView, ModelFormat };




export interface ScanLimits {
  /** Folder levels below a model folder that are entered. */
  depth: number;
  /** Directory entries looked at in all folders together. */
  entries: number;
  /** Header bytes read of one GGUF file (a split model: of each part). */
  headerBytes: number;
}

export const SCAN_LIMITS: ScanLimits = { depth: 6, entries: 5000, headerBytes: 64 * 1024 * 1024 };

/** A file found by the walk. */
interface Found {
  path: string;
  bytes: number;
  mtimeMs: number;
}

/** What a file's header said, kept while the file is unchanged. */
interface Read {
  facts: ModelFacts | null;
  shape: ModelShape | null;
  error: string | null;
}

/** whisper.cpp's ggml model files begin with GGML_FILE_MAGIC, 0x67676d6c, little-endian. */
const GGML_MAGIC = 0x67676d6c;
/** whisper.cpp's hparams after the magic: ten int32 and the file type (`ftype`, ggml's GGML_FTYPE). */
const WHISPER_FTYPE_AT = 4 + 10 * 4;
const WHISPER_FTYPES: Record<number, string> = { 0: 'F32', 1: 'F16', 2: 'Q4_0', 3: 'Q4_1', 7: 'Q8_0', 8: 'Q5_0', 9: 'Q5_1', 10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 13: 'Q5_K', 14: 'Q6_K' };

/** The format a file's name says it has; null: not a model file. */
export function formatOf(name: string): ModelFormat | null {
  const lower = name.toLowerCase();
  if (lower.endsWith('.gguf')) return 'gguf';
  if (/^ggml-.+\.bin$/.test(lower)) return 'whisper';
  if (lower.endsWith('.safetensors')) return 'unknown';
  return null;
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** Walks the folders breadth-first within the limits: model files, and the problems met. */
async function walk(dirs: readonly string[], limits: ScanLimits): Promise<{ found: Found[]; problems: string[] }> {
  const found: Found[] = [];
  const problems: string[] = [];
  let entries = 0;
  const queue: Array<{ dir: string; depth: number }> = dirs.map((dir) => ({ dir, depth: 0 }));
  const seen = new Set<string>();
  while (queue.length > 0) {
    const { dir, depth } = queue.shift()!;
    let listed;
    try {
      listed = await onProbeLane(() => readdir(dir, { withFileTypes: true }));
    } catch (error) {
      problems.push(`${dir}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such folder' : message(error)}`);
      continue;
    }
    for (const entry of listed.sort((a, b) => a.name.localeCompare(b.name))) {
      if (++entries > limits.entries) {
        problems.push(`more than ${limits.entries} entries in the model folders: the rest were not looked at`);
        return { found, problems };
      }
      if (entry.name.startsWith('.')) continue;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (depth < limits.depth) queue.push({ dir: full, depth: depth + 1 });
        else problems.push(`${full}: deeper than ${limits.depth} folders, not looked into`);
        continue;
      }
      if (!(entry.isFile() || entry.isSymbolicLink()) || formatOf(entry.name) === null) continue;
      // A symlink counts when it names a regular file; a symlinked folder is never entered.
      const stats = await onProbeLane(() => stat(full)).catch(() => null);
      if (!stats?.isFile()) continue;
      if (seen.has(full)) continue;
      seen.add(full);
      found.push({ path: full, bytes: stats.size, mtimeMs: stats.mtimeMs });
    }
  }
  return { found, problems };
}

/** A model: one file, or the parts of a split GGUF in order (`missing` names parts not found). */
interface Model {
  parts: Found[];
  missing: string[];
}

/** Groups split parts into one model each; every other file is a model of its own. */
function models(found: Found[]): Model[] {
  const byPath = new Map(found.map((file) => [file.path, file]));
  const result: Model[] = [];
  const taken = new Set<string>();
  for (const file of found) {
    if (taken.has(file.path)) continue;
    const split = splitPart(file.path);
    if (!split) {
      result.push({ parts: [file], missing: [] });
      continue;
    }
    const names = Array.from({ length: split.count }, (_, i) => splitName(split.prefix, i + 1, split.count));
    const parts = names.flatMap((name) => (byPath.has(name) ? [byPath.get(name)!] : []));
    for (const part of parts) taken.add(part.path);
    result.push({ parts, missing: names.filter((name) => !byPath.has(name)).map((name) => path.basename(name)) });
  }
  return result;
}

/** The first bytes of a whisper.cpp model: its magic and file type. */
async function readWhisper(file: string): Promise<Read> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  try {
    const head = Buffer.alloc(WHISPER_FTYPE_AT + 4);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    if (bytesRead < 4 || head.readUInt32LE(0) !== GGML_MAGIC) return { facts: null, shape: null, error: `${file}: not a whisper.cpp model (no ggml magic)` };
    const ftype = bytesRead === head.length ? head.readInt32LE(WHISPER_FTYPE_AT) % 1000 : -1;
    const facts: ModelFacts = { architecture: 'whisper', parameters: null, quantization: WHISPER_FTYPES[ftype] ?? null, context_length: null, chat_template: false };
    return { facts, shape: null, error: null };
  } finally {
    await handle.close();
  }
}

/** A GGUF model's facts and shape from its header (every part's, for a split model). */
export function ggufRead(info: GgufInfo): Read {
  const facts = ggufSummary(info);
  try {
    return { facts, shape: chatShape(info), error: null };
  } catch (error) {
    // Facts without a forecast: the header lacks what the memory check needs (not a chat model).
    return { facts, shape: null, error: message(error) };
  }
}

/** The room probed for a listing, or why the probe failed. */
export type RoomOutcome = { room: ForecastRoom } | { error: string };

/** One model file as the listing has it, with what its header and the room said: what a profile of it is made from. */
export interface ModelFileEntry {
  file: ModelFileView;
  /** The model's shape for the memory check (null: no GGUF chat model, or its header lacks it). */
  shape: ModelShape | null;
  room: RoomOutcome;
}

export interface ModelFilesDeps {
  dirs: readonly string[];
  /** The room the forecasts are made on, probed once per listing. */
  room: () => Promise<ForecastRoom>;
  limits?: Partial<ScanLimits>;
}

export class ModelFiles {
  readonly #deps: ModelFilesDeps;
  readonly #limits: ScanLimits;
  /** By path, size and mtime of every part: what the header said. */
  readonly #reads = new LRUCache<string, Promise<Read>>({ max: 4096 });
  /** Header reads made (cache misses), for the tests of the cache. */
  headerReads = 0;
  #scan: Promise<ModelFilesView> | null = null;

  constructor(deps: ModelFilesDeps) {
    this.#deps = deps;
    this.#limits = { ...SCAN_LIMITS, ...deps.limits };
  }

  /** The folders walked, as configured. */
  get dirs(): readonly string[] {
    return this.#deps.dirs;
  }

  /** Every model file with its facts and forecast; listings asked while one runs share it. */
  list(): Promise<ModelFilesView> {
    this.#scan ??= this.#list().finally(() => (this.#scan = null));
    return this.#scan;
  }

  async #list(): Promise<ModelFilesView> {
    const [{ found, problems }, room] = await Promise.all([walk(this.#deps.dirs, this.#limits), this.#room()]);
    const files: ModelFileView[] = [];
    for (const model of models(found)) files.push((await this.#entry(model, room)).file);
    return { files, problems };
  }

  /**
   * The model file the listing names `file` (its path exactly as listed: found by the same walk, so
   * inside the folders and within the limits), with its header's shape and the room its forecast
   * was made on; null when the listing has no such file.
   */
  async find(file: string): Promise<ModelFileEntry | null> {
    const [{ found }, room] = await Promise.all([walk(this.#deps.dirs, this.#limits), this.#room()]);
    const model = models(found).find((m) => m.parts[0]?.path === file);
    return model ? this.#entry(model, room) : null;
  }

  #room(): Promise<RoomOutcome> {
    return this.#deps.room().then(
      (room) => ({ room }),
      (error: unknown) => ({ error: message(error) }),
    );
  }

  async #entry(model: Model, room: RoomOutcome): Promise<ModelFileEntry> {
    const first = model.parts[0]!;
    const format = formatOf(path.basename(first.path)) ?? 'unknown';
    const bytes = model.parts.reduce((sum, part) => sum + part.bytes, 0);
    const file: ModelFileView = { path: first.path, bytes, format, facts: null, forecast: null, error: null };
    let shape: ModelShape | null = null;
    if (model.missing.length > 0) {
      file.error = `a split model with parts missing: ${model.missing.join(', ')}`;
    } else if (format !== 'unknown') {
      const read = await this.#read(model.parts, format);
      file.facts = read.facts;
      file.error = read.error;
      shape = read.shape;
      if (read.shape && read.facts) {
        if ('room' in room) file.forecast = forecastView(room.room, read.shape, forecastContext(read.facts));
        else file.error = `no forecast: ${room.error}`;
      }
    }
    return { file, shape, room };
  }

  #read(parts: Found[], format: ModelFormat): Promise<Read> {
    const key = parts.map((part) => `${part.path}\0${part.bytes}\0${part.mtimeMs}`).join('\n');
    let read = this.#reads.get(key);
    if (read === undefined) {
      this.headerReads += 1;
      read = onProbeLane(async (): Promise<Read> => {
        if (format === 'whisper') return readWhisper(parts[0]!.path);
        const infos: GgufInfo[] = [];
        for (const part of parts) infos.push(await readGgufInfo(part.path, { maxHeaderBytes: this.#limits.headerBytes }));
        return ggufRead(mergeSplit(infos));
      }).catch((error: unknown): Read => ({ facts: null, shape: null, error: message(error) }));
      this.#reads.set(key, read);
    }
    return read;
  }
}
