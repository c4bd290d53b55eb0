// Profiles (spec 2.1, CONTRACT section 4): one zod schema per category for the stored parameters,
// the bodies the admin API accepts, and the record kept in `profiles/<id>.json`.
import { z } from 'zod';

export const CATEGORIES = ['chat', 'image', 'tts', 'stt'] as const;
export type Category = (typeof CATEGORIES)[number];

/** The fixed alias of the published image profile (spec 2.2); no profile may take this name. */
export const IMAGE_ALIAS = 'service-image';

const filePath = z.string().min(1).max(4096).refine((p) => !p.includes('\0'), 'must not contain NUL');

export const samplingSchema = z
  .strictObject({
    temperature: z.number().min(0).max(5).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().min(0).max(1000).optional(),
    min_p: z.number().min(0).max(1).optional(),
    repeat_penalty: z.number().min(0).max(5).optional(),
    max_tokens: z.number().int().min(1).max(1_048_576).optional(),
  })
  .default({});

export const chatParamsSchema = z.strictObject({
  model: filePath.describe('the GGUF model file on this host'),
  context: z.number().int().min(256).max(1_048_576).default(8192).describe('the context window in tokens, shared by the slots'),
  slots: z.number().int().min(1).max(64).default(1).describe('how many requests the worker answers at once'),
  gpuSplit: z.array(z.number().min(0)).min(1).max(16).nullable().default(null).describe('the share of the model per GPU, in GPU UUID order; empty: the fit decides'),
  gpuLayers: z.number().int().min(0).max(100_000).nullable().default(null).describe('layers on the GPUs; empty: llama-fit-params decides (none without a GPU)'),
  sampling: samplingSchema.describe('the defaults of requests that do not set them'),
});

export const imageParamsSchema = z.strictObject({
  backend: z.literal('sd-cli').default('sd-cli'),
  model: filePath.describe("the diffusion model file (sd-cli's --model or --diffusion-model)"),
  files: z
    .strictObject({ vae: filePath.optional(), llm: filePath.optional(), clip_l: filePath.optional(), t5xxl: filePath.optional() })
    .default({})
    .describe('the other model files the family needs, each a path'),
  width: z.number().int().min(64).max(4096).multipleOf(8).default(1024).describe("pixels; a request's size is only a wish"),
  height: z.number().int().min(64).max(4096).multipleOf(8).default(1024).describe('pixels'),
  steps: z.number().int().min(1).max(200).default(20).describe('sampling steps per image'),
  guidance: z.number().min(0).max(50).default(3.5),
  cfgScale: z.number().min(0).max(50).default(1.0),
  seed: z.number().int().min(-1).max(2 ** 32 - 1).default(42).describe('-1: a new seed for every image'),
  referenceImages: z.number().int().min(0).max(4).default(0).describe('how many reference images an edit may send (0: no edits)'),
});

/** A GPU by its UUID, as nvidia-smi names it (`GPU-` and hex groups; a simulated inventory's `GPU-a` too). */
const GPU_UUID = /^GPU-[A-Za-z0-9-]+$/;
const gpuDevice = z.union([z.literal('cpu'), z.string().regex(GPU_UUID, 'a GPU UUID such as GPU-1234…')]);

/**
 * The voices the espeak-ng backend has: OpenAI's preset names, each of which the TTS worker maps to
 * an espeak-ng variant (src/workers/speech/tts.ts); `alloy` is the default. An openai-server
 * backend has voices of its own, which the service cannot list.
 */
export const ESPEAK_VOICE_NAMES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse'] as const;
export type EspeakVoice = (typeof ESPEAK_VOICE_NAMES)[number];

export const ttsParamsSchema = z
  .strictObject({
    backend: z.enum(['espeak-ng', 'openai-server']).default('espeak-ng'),
    voice: z.string().min(1).max(100).optional().describe("the voice of requests that name none (default: OpenAI's preset alloy)"),
    speed: z.number().min(0.25).max(4).default(1.0),
    device: gpuDevice.default('cpu').describe('cpu, or the UUID of the GPU the speech server runs on'),
    memoryMiB: z.number().int().min(0).max(1_048_576).optional().describe('GPU memory the worker reserves (default 7168 on a GPU, 0 on the CPU)'),
    /**
     * openai-server: the command line that starts an OpenAI-compatible speech server; `{port}` is
     * replaced by the loopback port the service chose, `{host}` by 127.0.0.1.
     */
    command: z.array(z.string().min(1)).min(1).max(64).optional(),
    /** openai-server: the `model` its /v1/audio/speech expects. */
    model: z.string().min(1).max(200).optional(),
    /** openai-server: the language names it speaks (spec 4.5 `language`); unset: any name is passed on. */
    languages: z.array(z.string().min(1).max(100)).min(1).max(200).optional(),
  })
  .superRefine((p, ctx) => {
    if (p.backend === 'openai-server' && p.command === undefined) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'the openai-server backend needs a command line' });
    }
    if (p.backend === 'openai-server' && p.command !== undefined && !p.command.some((arg) => arg.includes('{port}'))) {
      ctx.addIssue({ code: 'custom', path: ['command'], message: 'the command line must take the port the service chooses: put {port} where the server expects it' });
    }
    if (p.backend === 'espeak-ng' && (p.command !== undefined || p.model !== undefined || p.languages !== undefined)) {
      ctx.addIssue({ code: 'custom', path: ['backend'], message: 'command, model and languages belong to the openai-server backend' });
    }
  })
  .transform((p) => ({ ...p, memoryMiB: p.memoryMiB ?? (p.device === 'cpu' ? 0 : 7168) }));

/** Spec 4.6: the languages a transcription may name. */
export const STT_LANGUAGE_CHOICES = ['de', 'en', 'auto'] as const;
export type SttLanguage = (typeof STT_LANGUAGE_CHOICES)[number];

/** The languages each STT backend can transcribe: pocketsphinx has only its en-us model. */
export const STT_LANGUAGES: Record<'pocketsphinx' | 'whisper.cpp', readonly SttLanguage[]> = {
  pocketsphinx: ['en', 'auto'],
  'whisper.cpp': ['de', 'en', 'auto'],
};

export const sttParamsSchema = z
  .strictObject({
    backend: z.enum(['pocketsphinx', 'whisper.cpp']).default('pocketsphinx'),
    model: filePath.optional().describe('the whisper.cpp model file (ggml); pocketsphinx uses its en-us model'),
    threads: z.number().int().min(1).max(256).default(2),
    /** The language of a request that names none (spec 4.6: de by default). */
    defaultLanguage: z.enum(STT_LANGUAGE_CHOICES).default('de').describe('the language of a request that names none (pocketsphinx: en or auto)'),
  })
  .superRefine((p, ctx) => {
    if (p.backend === 'whisper.cpp' && p.model === undefined) {
      ctx.addIssue({ code: 'custom', path: ['model'], message: 'the whisper.cpp backend needs a model path' });
    }
  });

/**
 * Where a prompt enhancer runs (CONTRACT section 8): `auto` (every GPU, the rest in RAM), `cpu`, or
 * one GPU by its UUID. What a save accepts; a stored file is read with any short string.
 */
export const enhancerDeviceSchema = z
  .string()
  .max(100)
  .refine((device) => device === 'auto' || device === 'cpu' || GPU_UUID.test(device), 'one of "auto", "cpu", or a GPU UUID such as GPU-1a2b3c4d-… (nvidia-smi -L)');

export const promptEnhancerSchema = z.strictObject({
  t2i: z.string().min(1).max(200).nullable().default(null),
  i2i: z.string().min(1).max(200).nullable().default(null),
  device: z.string().min(1).max(100).default('auto'),
});

export const paramsSchemas = {
  chat: chatParamsSchema,
  image: imageParamsSchema,
  tts: ttsParamsSchema,
  stt: sttParamsSchema,
} as const;

export type ChatParams = z.output<typeof chatParamsSchema>;
export type ImageParams = z.output<typeof imageParamsSchema>;
export type TtsParams = z.output<typeof ttsParamsSchema>;
export type SttParams = z.output<typeof sttParamsSchema>;
export type PromptEnhancer = z.output<typeof promptEnhancerSchema>;

export const profileNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, 'letters, digits and . _ : / - (1 to 128 characters, starting with a letter or digit)')
  .refine((n) => n !== IMAGE_ALIAS, `"${IMAGE_ALIAS}" is the fixed image alias and cannot be a profile name`);

const common = {
  name: profileNameSchema,
  prompt_enhancer: promptEnhancerSchema.optional(),
};

/** A profile's shape: `params` is checked against its category's schema. */
const profileShape = z.discriminatedUnion('category', [
  z.strictObject({ ...common, category: z.literal('chat'), params: chatParamsSchema }),
  z.strictObject({ ...common, category: z.literal('image'), params: imageParamsSchema }),
  z.strictObject({ ...common, category: z.literal('tts'), params: ttsParamsSchema }),
  z.strictObject({ ...common, category: z.literal('stt'), params: sttParamsSchema }),
]);
export type ProfileInput = z.output<typeof profileShape>;

/**
 * What a save refuses beyond the shape: a profile that could never run, because every request of
 * it would fail (a TTS voice the espeak-ng backend does not have, looked up in a list, never as a
 * key of an object, so `constructor` is refused too), or a choice that is none (an enhancer device).
 * Files saved before these checks are still read (storedProfileSchema has only the shape), so a
 * start never fails on them; their next save must fix them.
 */
function runnable(profile: ProfileInput, ctx: z.RefinementCtx): void {
  if (profile.category === 'tts') {
    const { backend, voice } = profile.params;
    if (backend === 'espeak-ng' && voice !== undefined && !(ESPEAK_VOICE_NAMES as readonly string[]).includes(voice)) {
      ctx.addIssue({ code: 'custom', path: ['params', 'voice'], message: `${JSON.stringify(voice)} is not a voice of the espeak-ng backend; it has ${ESPEAK_VOICE_NAMES.join(', ')}` });
    }
  }
  const device = profile.prompt_enhancer?.device;
  if (device !== undefined) {
    for (const issue of enhancerDeviceSchema.safeParse(device).error?.issues ?? []) {
      ctx.addIssue({ code: 'custom', path: ['prompt_enhancer', 'device'], message: issue.message });
    }
  }
}

/** What the operator writes: a profile that can run. */
export const profileInputSchema = profileShape.superRefine(runnable);

/** Read-only fields a client may send back unchanged in a PUT; they are ignored. */
const readOnly = {
  id: z.string().optional(),
  published: z.boolean().optional(),
  executable: z.boolean().optional(),
  blockers: z.array(z.string()).optional(),
  notices: z.array(z.string()).optional(),
  created_at: z.string().optional(),
  updated_at: z.string().optional(),
};
const revision = z.number().int().min(1);

export const profileUpdateSchema = z
  .discriminatedUnion('category', [
    z.strictObject({ ...common, ...readOnly, revision, category: z.literal('chat'), params: chatParamsSchema }),
    z.strictObject({ ...common, ...readOnly, revision, category: z.literal('image'), params: imageParamsSchema }),
    z.strictObject({ ...common, ...readOnly, revision, category: z.literal('tts'), params: ttsParamsSchema }),
    z.strictObject({ ...common, ...readOnly, revision, category: z.literal('stt'), params: sttParamsSchema }),
  ])
  .superRefine(runnable);

export const profileIdSchema = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/);

/** The record in `profiles/<id>.json`: the shape only (see runnable). */
export const storedProfileSchema = z.intersection(
  z.object({
    id: profileIdSchema,
    revision,
    created_at: z.string(),
    updated_at: z.string(),
  }),
  profileShape,
);
export type StoredProfile = z.output<typeof storedProfileSchema>;

/**
 * What the admin API shows: the stored record plus the computed, read-only fields. `notices` are
 * what does not block the profile but changes how it runs (the build's fit tool missing on a host
 * with GPUs).
 */
export type ProfileView = StoredProfile & { published: boolean; executable: boolean; blockers: string[]; notices: string[] };
