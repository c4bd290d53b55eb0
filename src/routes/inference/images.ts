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
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../service.js';
import type { ImageProfile } from '../../workers/image/image.js';
import { checkReferenceCount, editSchema, generationSchema, IMAGE_LIMITS, imageFormValues } from '../../workers/image/image.schema.js';
import { runImageJob, type ImageResult } from '../../workers/image/imageJob.js';
import { clientGone } from '../client.js';
import { errors } from '../../errors.js';
import { validationError } from '../errors.js';
import { EDIT_FIELDS, readImageForm } from '../forms/imageForm.js';

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

const imageProfile = async (service: Pick<Service, 'catalog'>, model: string) => (await service.catalog.require('image', model)) as ImageProfile;

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
    const { fields, images } = await readImageForm(request, EDIT_FIELDS, service, {
      field: async (name, value) => {
        if (name !== 'model' || value === '') return;
        early = await imageProfile(service, value).catch((error: unknown) => {
          unknownModel = error;
          return undefined;
        });
      },
      image: (count, sent) => {
        if (unknownModel) {
          const sofar = editSchema.partial().safeParse(imageFormValues({ ...sent }));
          if (!sofar.success) throw validationError(sofar.error.issues);
          throw unknownModel;
        }
        if (early) checkReferenceCount(early, count);
      },
    });
    try {
      const parsed = editSchema.safeParse(imageFormValues(fields));
      if (!parsed.success) throw validationError(parsed.error.issues);
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
