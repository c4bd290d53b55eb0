// Prompt enhancers on disk (CONTRACT section 8): the recipes (built in, or the JSON file that
// SERVICE_DECK_ENHANCER_RECIPES names), and under `<state>/enhancers/`:
// - `files/<owner>/<name>/<revision>/<path>` (folders 0700, files 0600): the store. A file is kept
//   once per repository, revision and path, whichever tasks use it (the official recipes share
//   their 19.9 GB model); the revision is one folder (`refs/pr/1` is `refs%2Fpr%2F1`), the path
//   keeps its sub-folders. A partial download is `<path>.part` beside it;
// - `files.json`: what was verified of each stored file: its size and sha256 (hashed while it was
//   downloaded, or again since), and the stamp (inode, size, mtime) it had then. A file whose stamp
//   is unchanged is taken as verified without reading it again;
// - per task, `<task>/` (0700) with `install.json` (where an install stands, for the status and for
//   a restart) and `installed.json`, written last, once every file is complete and checked: only
//   that record makes a task installed, so a partial download never counts.
// Before the store, each task kept its own copy, flattened, in `<task>/<path with / as __>`; an
// install of that layout is moved into the store at start (system/enhancers/enhancerStore.ts), and read
// where it is until then.
import { lstat, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { readJsonFile } from './files.js';

export const ENHANCER_TASKS = ['t2i', 'i2i'] as const;
export type EnhancerTask = (typeof ENHANCER_TASKS)[number];

/** Every segment of a slash-separated path names something: none empty, `.` or `..`. */
const plainSegments = (value: string) => value.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..');

/** Names a downloaded file may not take: a task folder's records (where the layout before the store put files too), and partial downloads. */
const takenName = (repoPath: string) => ['installed.json', 'install.json'].includes(localName(repoPath)) || repoPath.endsWith('.part');

const repoId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/, 'owner/name');
const revisionId = z.string().min(1).max(200).regex(/^[A-Za-z0-9._/-]+$/).refine(plainSegments, 'a revision with no empty, . or .. segment');
const repoPath = z
  .string()
  .min(1)
  .max(500)
  .regex(/^[^\0\\]+$/, 'no NUL or backslash in a path')
  .refine(plainSegments, 'a path with no empty, . or .. segment (it would land outside the store folder)')
  .refine((p) => !takenName(p), 'a path that is not installed.json, install.json or a .part file');

export const recipeSchema = z.strictObject({
  repo: repoId,
  revision: revisionId,
  files: z
    .array(z.strictObject({ path: repoPath, role: z.enum(['model', 'mmproj']) }))
    .min(1)
    .refine((files) => files.filter((f) => f.role === 'model').length === 1, 'exactly one file with role model'),
  context: z.number().int().min(256).max(1_048_576),
});
export type Recipe = z.output<typeof recipeSchema>;
export const recipesSchema = z.strictObject({ t2i: recipeSchema, i2i: recipeSchema });
export type Recipes = z.output<typeof recipesSchema>;

/**
 * The official recipes: Qwen2.5-VL 32B Instruct at Q4_K_M from ggml-org (llama.cpp's own
 * organisation, the repository llama.cpp's multimodal docs name), 19.9 GB (18.5 GiB) of weights.
 * Qwen2.5-VL is the text encoder family of the Qwen-Image models, reads reference images through
 * its projector (i2i) and follows a JSON schema well; t2i needs the language model only.
 */
export const OFFICIAL_RECIPES: Recipes = {
  t2i: {
    repo: 'ggml-org/Qwen2.5-VL-32B-Instruct-GGUF',
    revision: 'main',
    files: [{ path: 'Qwen2.5-VL-32B-Instruct-Q4_K_M.gguf', role: 'model' }],
    context: 8192,
  },
  i2i: {
    repo: 'ggml-org/Qwen2.5-VL-32B-Instruct-GGUF',
    revision: 'main',
    files: [
      { path: 'Qwen2.5-VL-32B-Instruct-Q4_K_M.gguf', role: 'model' },
      { path: 'mmproj-Qwen2.5-VL-32B-Instruct-Q8_0.gguf', role: 'mmproj' },
    ],
    context: 8192,
  },
};

export class RecipeError extends Error {
  override name = 'RecipeError';
}

/** The recipes in force: the file SERVICE_DECK_ENHANCER_RECIPES names, else the official ones. */
export async function loadRecipes(file: string | undefined): Promise<Recipes> {
  if (!file) return OFFICIAL_RECIPES;
  const json = await readJsonFile(file).catch((error: unknown) => {
    throw new RecipeError(`SERVICE_DECK_ENHANCER_RECIPES: ${file} cannot be read: ${(error as Error).message}`);
  });
  if (json === undefined) throw new RecipeError(`SERVICE_DECK_ENHANCER_RECIPES: ${file} does not exist`);
  const parsed = recipesSchema.safeParse(json);
  if (!parsed.success) throw new RecipeError(`SERVICE_DECK_ENHANCER_RECIPES: ${file} is not { t2i: Recipe, i2i: Recipe }: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  return parsed.data;
}

export const taskDir = (enhancersDir: string, task: EnhancerTask) => path.join(enhancersDir, task);
export const installedFile = (enhancersDir: string, task: EnhancerTask) => path.join(taskDir(enhancersDir, task), 'installed.json');
export const installFile = (enhancersDir: string, task: EnhancerTask) => path.join(taskDir(enhancersDir, task), 'install.json');
/** Where a recipe file lay before the store: in its task folder, its path flattened (no sub-folders). */
export const localName = (repoPath: string) => repoPath.replaceAll('/', '__');
export const storeDir = (enhancersDir: string) => path.join(enhancersDir, 'files');
export const storeRecordFile = (enhancersDir: string) => path.join(enhancersDir, 'files.json');

/** A file of the store: which repository, at which revision, which path in it. */
export interface StoreKey {
  repo: string;
  revision: string;
  path: string;
}
const storeKeySchema = z.object({ repo: repoId, revision: revisionId, path: repoPath });
export const sameKey = (a: StoreKey, b: StoreKey) => a.repo === b.repo && a.revision === b.revision && a.path === b.path;

/**
 * Where the store keeps a file: `files/<owner>/<name>/<revision as one folder>/<path>`. Null for a
 * key the recipe schema would refuse (a hand-edited record): such a file has no place there, and
 * a key that passes cannot leave the store (checked again where the bytes land).
 */
export function storedPath(enhancersDir: string, key: StoreKey): string | null {
  if (!storeKeySchema.safeParse(key).success) return null;
  return path.join(storeDir(enhancersDir), ...key.repo.split('/'), encodeURIComponent(key.revision), ...key.path.split('/'));
}

/** A sha256 as the store records it: 64 lower-case hex digits. */
export const SHA256_HEX = /^[0-9a-f]{64}$/;
const storedFileSchema = z.object({
  repo: z.string(),
  revision: z.string(),
  path: z.string(),
  size: z.number().int().nonnegative(),
  sha256: z.string().regex(SHA256_HEX),
  /** `fileStamp` (inode, size, mtime) when it was verified. */
  stamp: z.string(),
  verified_at: z.string(),
});
export type StoredFile = z.output<typeof storedFileSchema>;
const storeRecordSchema = z.object({ files: z.array(z.unknown()) });

/**
 * What `files.json` says was verified. It only spares work: a missing or damaged record (or entry)
 * leaves the stored files it named unverified (hashed again before an install reuses them), and
 * is rewritten whole at the next verification.
 */
export async function readStoreRecord(enhancersDir: string): Promise<StoredFile[]> {
  const parsed = storeRecordSchema.safeParse(await readJsonFile(storeRecordFile(enhancersDir)).catch(() => undefined));
  if (!parsed.success) return [];
  return parsed.data.files.flatMap((entry) => {
    const file = storedFileSchema.safeParse(entry);
    return file.success ? [file.data] : [];
  });
}

export const installedSchema = z.object({
  repo: z.string(),
  revision: z.string(),
  files: z.array(z.object({ path: z.string(), role: z.enum(['model', 'mmproj']), size: z.number(), sha256: z.string() })),
  installed_at: z.string(),
});
export type InstalledRecord = z.output<typeof installedSchema>;
/** An installed record whose every file was found: `at` is where it is. */
export type LocatedRecord = Omit<InstalledRecord, 'files'> & { files: Array<InstalledRecord['files'][number] & { at: string }> };

/** The task's `installed.json` as written, its files not looked at; null when there is none or it is not one. */
export async function readInstalledRecord(enhancersDir: string, task: EnhancerTask): Promise<InstalledRecord | null> {
  const parsed = installedSchema.safeParse(await readJsonFile(installedFile(enhancersDir, task)).catch(() => null));
  return parsed.success ? parsed.data : null;
}

/**
 * Where an installed file is: in the store, when a regular file of the recorded size is there and
 * `files.json` gives it no other sha256 (another revision's bytes, put there since by the other
 * task's install); else in the task folder of the layout before the store (not yet moved); else null.
 */
async function locate(enhancersDir: string, task: EnhancerTask, record: InstalledRecord, file: InstalledRecord['files'][number], verified: StoredFile[]): Promise<string | null> {
  const key = { repo: record.repo, revision: record.revision, path: file.path };
  const stored = storedPath(enhancersDir, key);
  if (stored) {
    const info = await lstat(stored).catch(() => null);
    const entry = verified.find((e) => sameKey(e, key));
    if (info?.isFile() && info.size === file.size && (!entry || entry.sha256 === file.sha256)) return stored;
  }
  const before = path.join(taskDir(enhancersDir, task), localName(file.path));
  const info = await stat(before).catch(() => null);
  return info?.isFile() && info.size === file.size ? before : null;
}

/** The task's installed record when every file it names is there with its size (`at` says where); else null. */
export async function readInstalled(enhancersDir: string, task: EnhancerTask): Promise<LocatedRecord | null> {
  const record = await readInstalledRecord(enhancersDir, task);
  if (!record) return null;
  const verified = await readStoreRecord(enhancersDir);
  const files: LocatedRecord['files'] = [];
  for (const file of record.files) {
    const at = await locate(enhancersDir, task, record, file, verified);
    if (at === null) return null;
    files.push({ ...file, at });
  }
  return { ...record, files };
}
