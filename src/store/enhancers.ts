// Prompt enhancers on disk (CONTRACT section 8): the recipes (built in, or the JSON file that
// SERVICE_DECK_ENHANCER_RECIPES names), and per task the folder `<state>/enhancers/<task>/`
// (0700) with the downloaded files (0600), `install.json` (where an install stands, for the
// status and for a restart) and `installed.json`, written last, once every file is complete and
// checked: only that record makes a task installed, so a partial download never counts.
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { readJsonFile } from './files.js';

export const ENHANCER_TASKS = ['t2i', 'i2i'] as const;
export type EnhancerTask = (typeof ENHANCER_TASKS)[number];

/** Every segment of a slash-separated path names something: none empty, `.` or `..`. */
const plainSegments = (value: string) => value.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..');

/** Names in a task folder that a downloaded file may not take: its records, and partial downloads. */
const takenName = (repoPath: string) => ['installed.json', 'install.json'].includes(localName(repoPath)) || repoPath.endsWith('.part');

export const recipeSchema = z.strictObject({
  repo: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/, 'owner/name'),
  revision: z.string().min(1).max(200).regex(/^[A-Za-z0-9._/-]+$/).refine(plainSegments, 'a revision with no empty, . or .. segment'),
  files: z
    .array(
      z.strictObject({
        path: z
          .string()
          .min(1)
          .max(500)
          .regex(/^[^\0\\]+$/, 'no NUL or backslash in a path')
          .refine(plainSegments, 'a path with no empty, . or .. segment (it would land outside the task folder)')
          .refine((p) => !takenName(p), 'a path that is not installed.json, install.json or a .part file'),
        role: z.enum(['model', 'mmproj']),
      }),
    )
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
/** Where a recipe file lands: its path in the repo, flattened (no sub-folders). */
export const localName = (repoPath: string) => repoPath.replaceAll('/', '__');

export const installedSchema = z.object({
  repo: z.string(),
  revision: z.string(),
  files: z.array(z.object({ path: z.string(), role: z.enum(['model', 'mmproj']), size: z.number(), sha256: z.string() })),
  installed_at: z.string(),
});
export type InstalledRecord = z.output<typeof installedSchema>;

/** The task's installed record when every file it names is there with its size; else null. */
export async function readInstalled(enhancersDir: string, task: EnhancerTask): Promise<InstalledRecord | null> {
  const parsed = installedSchema.safeParse(await readJsonFile(installedFile(enhancersDir, task)).catch(() => null));
  if (!parsed.success) return null;
  for (const file of parsed.data.files) {
    const info = await stat(path.join(taskDir(enhancersDir, task), localName(file.path))).catch(() => null);
    if (!info?.isFile() || info.size !== file.size) return null;
  }
  return parsed.data;
}
