// Spec 4.3 and 4.4: POST /v1/images/generations (JSON) and POST /v1/images/edits (multipart). The
// model is `service-image` (the published image profile) or the name of a published image profile;
// with none published: 404 model_not_found. `n` only 1; `size` is only a wish (`WIDTHxHEIGHT` or
// `auto`): the profile's resolution, steps, guidance and seed always apply; only `b64_json` comes
// back (no public URLs). Edits take `image[]` one to four times (order kept), each PNG, JPEG or
// WebP by its magic bytes and at most 10 MiB, up to the active profile's reference capability.
// The answer is the OpenAI images response plus `service_deck: { size, requested_size,
// size_policy: "profile", enhancer }`; when the profile's prompt enhancer rewrote the prompt (4.7),
// `data[0].revised_prompt` is the rewrite and `enhancer.wh_ratio` its suggested shape (only a
// suggestion). The prompt is never logged.
import type { Multipart, MultipartFile } from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Service } from '../../service.js';
import type { ImageProfile } from '../../workers/image/image.js';
import { runImageJob, type ImageResult } from '../../workers/image/imageJob.js';
import { JobFolder } from '../../workers/jobFolder.js';
import { clientGone } from '../client.js';
import { readForm } from '../multipart.js';
import { errors } from '../../errors.js';
import { notOffered, type FieldFates } from '../../workers/fields.js';

export const IMAGE_LIMITS = { maxReferences: 4, maxReferenceBytes: 10 * 1024 * 1024, maxPromptChars: 32_000 } as const;

const SIZE = /^(auto|[1-9]\d{0,4}x[1-9]\d{0,4})$/;
const URL_REFUSED = 'Only response_format b64_json is supported: this endpoint gives no public image URLs.';

/** An image prompt: not blank, bounded, and without NUL (it becomes a command-line argument of sd-cli). */
export const imagePrompt = z
  .string()
  .refine((text) => text.trim().length > 0, 'prompt must not be empty')
  .refine((text) => text.length <= IMAGE_LIMITS.maxPromptChars, `prompt has at most ${IMAGE_LIMITS.maxPromptChars} characters`)
  .refine((text) => !text.includes('\0'), 'prompt must not contain NUL characters');

/** The fields generations and edits share; `null` counts as not set, as in OpenAI's schema. */
const imageFields = {
  model: z.string().min(1),
  prompt: imagePrompt,
  n: z.literal(1, 'n must be 1: one image per request').nullish(),
  size: z.string().regex(SIZE, 'size is WIDTHxHEIGHT or auto').nullish(),
  response_format: z.literal('b64_json', URL_REFUSED).nullish(),
  output_format: z.literal('png', notOffered('jpeg and webp output', 'the image is a PNG')).nullish(),
  background: z
    .enum(['auto', 'opaque', 'transparent'])
    .refine((background) => background !== 'transparent', notOffered('a transparent background', 'the image is opaque'))
    .nullish(),
  stream: z.literal(false, notOffered('streaming (stream: true)', 'the answer is the finished image')).nullish(),
  partial_images: z.literal(0, notOffered('partial images', 'the answer is the finished image')).nullish(),
  // Accepted and ignored: the profile's steps decide the quality, and a PNG has nothing to compress lossily.
  quality: z.enum(['standard', 'hd', 'low', 'medium', 'high', 'auto']).nullish(),
  output_compression: z.number().int().min(0).max(100).nullish(),
  user: z.string().max(256).nullish(),
};

export const generationSchema = z.strictObject({
  ...imageFields,
  // Accepted and ignored: nothing filters the images, and the prompt decides the style.
  moderation: z.enum(['low', 'auto']).nullish(),
  style: z.enum(['vivid', 'natural']).nullish(),
});

/** The text fields of an edit's form (its images come as files). */
const editSchema = z.strictObject({
  ...imageFields,
  // Accepted and ignored: every reference image is used as it is.
  input_fidelity: z.enum(['high', 'low']).nullish(),
});

/** The fate of the fields OpenAI's CreateImageRequest and CreateImageEditRequest share (src/workers/fields.ts). */
const SHARED_FIELDS = {
  model: 'honoured',
  prompt: 'honoured',
  n: 'honoured',
  response_format: 'honoured',
  output_format: 'honoured',
  background: 'honoured',
  stream: 'honoured',
  partial_images: 'honoured',
  // Echoed as service_deck.requested_size: the profile's resolution always applies (spec 4.3).
  size: 'ignored',
  quality: 'ignored',
  output_compression: 'ignored',
  user: 'ignored',
} as const satisfies FieldFates;

/** The fate of every field of OpenAI's CreateImageRequest. */
export const IMAGE_GENERATION_FIELDS = { ...SHARED_FIELDS, moderation: 'ignored', style: 'ignored' } as const satisfies FieldFates;

/** The fate of every field of OpenAI's CreateImageEditRequest. */
export const IMAGE_EDIT_FIELDS = { ...SHARED_FIELDS, image: 'honoured', mask: 'refused', input_fidelity: 'ignored' } as const satisfies FieldFates;

/** A form's text values as the schema's types: the numbers and booleans OpenAI's clients write as text. */
function formValues(fields: Record<string, string>): Record<string, unknown> {
  const values: Record<string, unknown> = { ...fields };
  for (const key of ['n', 'output_compression', 'partial_images']) if (fields[key] !== undefined) values[key] = Number(fields[key]);
  if (fields.stream === 'true' || fields.stream === 'false') values.stream = fields.stream === 'true';
  return values;
}

/** The OpenAI images response with the service's size note. */
function answer(result: ImageResult, requested: string | undefined) {
  return {
    created: Math.floor(Date.now() / 1000),
    // The prompt the image was made from when the profile's enhancer rewrote it (4.7), as OpenAI names it.
    data: [{ b64_json: result.png.toString('base64'), ...(result.enhanced ? { revised_prompt: result.enhanced.prompt } : {}) }],
    output_format: 'png',
    service_deck: {
      size: `${result.width}x${result.height}`,
      requested_size: requested ?? null,
      size_policy: 'profile',
      // Only a suggestion: the profile's resolution is never changed by it.
      enhancer: result.enhanced ? { wh_ratio: result.enhanced.whRatio } : null,
    },
  };
}

const imageProfile = async (service: Service, model: string) => (await service.catalog.require('image', model)) as ImageProfile;

/**
 * Checks a form makes while it is read, before the images that follow are: `field` for each text
 * field as it arrives (the edit resolves `model` at once), `image` before the image `count` is
 * read (the profile's reference capability, once the model is known).
 */
export interface FormChecks {
  field?: (name: string, value: string) => Promise<void>;
  image?: (count: number, fields: Readonly<Record<string, string>>) => void;
}

/** The multipart fields of an edit, as text, and the reference images written into `folder` in order. */
async function readParts(parts: AsyncIterable<Multipart>, allowed: readonly string[], folder: JobFolder, checks: FormChecks) {
  const fields: Record<string, string> = {};
  for await (const part of parts) {
    if (part.fieldname === 'mask') throw errors.invalidValue('mask', notOffered('mask', 'the reference images guide the whole picture') + '.');
    if (part.type === 'file') {
      const file = part as MultipartFile;
      if (file.fieldname !== 'image' && file.fieldname !== 'image[]') throw errors.unknownParameter(file.fieldname);
      const index = folder.references.length + 1;
      checks.image?.(index, fields);
      await folder.addReference(file.file as AsyncIterable<Buffer>, () =>
        errors.invalidValue('image', `Image ${index} (${JSON.stringify(file.filename)}) is not a PNG, JPEG or WebP file by its bytes, whatever its name says.`),
      );
      if (file.file.truncated) throw errors.tooLarge(`Image ${index} is larger than 10 MiB, the limit per reference image.`, 'image');
      continue;
    }
    if (!allowed.includes(part.fieldname)) throw errors.unknownParameter(part.fieldname);
    fields[part.fieldname] = String(part.value);
    await checks.field?.(part.fieldname, fields[part.fieldname]!);
  }
  return fields;
}

/** The text fields an edit takes beside its images. */
const EDIT_FIELDS = Object.keys(editSchema.shape);

/**
 * A multipart form with reference images (`image[]`, one to four, 10 MiB each, PNG, JPEG or WebP
 * by their bytes) and the text fields `allowed`: the edit route's and the enhancer preview's. The
 * images are streamed into a new private job folder under `stateDir`, never held in memory; the
 * caller removes the folder (on an error here it is removed already).
 */
export async function readImageForm(
  request: FastifyRequest,
  allowed: readonly string[],
  stateDir: string,
  checks: FormChecks = {},
): Promise<{ fields: Record<string, string>; images: JobFolder }> {
  const images = await JobFolder.create(stateDir);
  try {
    const fields = await readForm(
      request,
      { limits: { files: IMAGE_LIMITS.maxReferences, fileSize: IMAGE_LIMITS.maxReferenceBytes, fields: 20, fieldSize: IMAGE_LIMITS.maxPromptChars * 4, parts: 24 } },
      (parts) => readParts(parts, allowed, images, checks),
    );
    return { fields, images };
  } catch (error) {
    await images.remove();
    switch ((error as { code?: string }).code) {
      case 'FST_FILES_LIMIT':
        throw errors.invalidValue('image', `At most ${IMAGE_LIMITS.maxReferences} reference images (image[]) per request.`);
      case 'FST_REQ_FILE_TOO_LARGE':
        throw errors.tooLarge('A reference image is larger than 10 MiB, the limit per image.', 'image');
      case 'FST_PARTS_LIMIT':
      case 'FST_FIELDS_LIMIT':
        throw errors.invalidValue(null, `Too many form fields: this form takes ${allowed.join(', ')} and image[] (one to four).`);
      default:
        throw error;
    }
  }
}

/** The 400 of an edit form's first invalid or unknown field. */
function editRefusal(issues: ReadonlyArray<{ path: PropertyKey[]; code: string; message: string; keys?: string[] }>) {
  const issue = issues[0];
  const param = issue?.path.join('.') || null;
  if (issue?.code === 'unrecognized_keys') return errors.unknownParameter(issue.keys?.[0] ?? 'unknown');
  return errors.invalidValue(param, `Invalid value${param ? ` for '${param}'` : ''}: ${issue?.message ?? 'not accepted'}.`);
}

/** Whether the profile takes `count` reference images; the refusal names its capability. */
export function checkReferenceCount(profile: ImageProfile, count: number): void {
  const capability = profile.params.referenceImages;
  if (count > 0 && capability === 0) {
    throw errors.invalidValue(
      'image',
      `The image profile ${profile.name} takes no reference images (its params.referenceImages is 0): edits need an image profile whose params.referenceImages is 1 to 4, set by the operator.`,
    );
  }
  if (count > capability) {
    throw errors.invalidValue('image', `The image profile ${profile.name} takes at most ${capability} reference image(s) (its params.referenceImages); ${count} were sent.`);
  }
}

export const imageRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/images/generations', { schema: { body: generationSchema } }, async (request, reply) => {
    const signal = clientGone(reply);
    const body = request.body;
    const profile = await imageProfile(service, body.model);
    const result = await runImageJob(service, profile, { prompt: body.prompt }, { source: 'api', whenBusy: 'wait', signal });
    return answer(result, body.size ?? undefined);
  });

  // A chunked upload is read up to four references and the text fields before its refusal (src/routes/chunked.ts).
  app.post('/v1/images/edits', { config: { uploadLimit: IMAGE_LIMITS.maxReferences * IMAGE_LIMITS.maxReferenceBytes + 2 * 1024 * 1024 } }, async (request, reply) => {
    const signal = clientGone(reply);
    if (!request.isMultipart()) throw errors.mediaType('Send the edit as multipart/form-data (fields model, prompt, image[]).');
    // A `model` sent before the images is checked before they are read: an unknown model, or more
    // images than its profile takes, ends the upload there. The fields sent before the first image
    // are judged first, so a refused field is named whatever the model (the same answer as when
    // the whole form was read).
    let early: ImageProfile | undefined;
    let unknownModel: unknown;
    const { fields, images } = await readImageForm(request, EDIT_FIELDS, service.config.stateDir, {
      field: async (name, value) => {
        if (name !== 'model' || value === '') return;
        early = await imageProfile(service, value).catch((error: unknown) => {
          unknownModel = error;
          return undefined;
        });
      },
      image: (count, sent) => {
        if (unknownModel) {
          const sofar = editSchema.partial().safeParse(formValues({ ...sent }));
          if (!sofar.success) throw editRefusal(sofar.error.issues);
          throw unknownModel;
        }
        if (early) checkReferenceCount(early, count);
      },
    });
    try {
      const parsed = editSchema.safeParse(formValues(fields));
      if (!parsed.success) throw editRefusal(parsed.error.issues);
      if (images.references.length === 0) throw errors.invalidValue('image', 'An edit needs one to four reference images (image[]).');
      const profile = early ?? (await imageProfile(service, parsed.data.model));
      request.metricsModel = parsed.data.model;
      checkReferenceCount(profile, images.references.length);
      const result = await runImageJob(service, profile, { prompt: parsed.data.prompt, references: images }, { source: 'api', whenBusy: 'wait', signal });
      return answer(result, parsed.data.size ?? undefined);
    } finally {
      await images.remove();
    }
  });
};
