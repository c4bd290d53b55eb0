// The image requests' schemas (spec 4.3, 4.4), shared by the API's routes and the operator's
// tests: the prompt rule, the fields generations and edits take with their fates, the values a
// multipart form writes as text, and whether a profile takes the reference images an edit sends.
import { z } from 'zod';
import { errors } from '../../errors.js';
import { notOffered, type FieldFates } from '../fields.js';
import type { ImageProfile } from './image.js';

/** `maxReferenceSide`: the longest side a reference image may declare (the largest models work at 2048; twice that is generous). */
export const IMAGE_LIMITS = { maxReferences: 4, maxReferenceBytes: 10 * 1024 * 1024, maxReferenceSide: 4096, maxPromptChars: 32_000 } as const;

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
export const editSchema = z.strictObject({
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
export function imageFormValues(fields: Record<string, string>): Record<string, unknown> {
  const values: Record<string, unknown> = { ...fields };
  for (const key of ['n', 'output_compression', 'partial_images']) if (fields[key] !== undefined) values[key] = Number(fields[key]);
  if (fields.stream === 'true' || fields.stream === 'false') values.stream = fields.stream === 'true';
  return values;
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
