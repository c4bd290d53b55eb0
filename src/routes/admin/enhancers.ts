// Spec 4.7 / CONTRACT section 8, the prompt enhancer routes: where each task's install stands,
// install (one at a time, 202, then followed in GET and the console's event stream), cancel (the
// partial files removed), the preview (the enhancer alone under the image reservation: original,
// suggestion and wh_ratio, kept in RAM for GET and the image test), and the per-profile choice
// saved with a revision like any edit: `null` becomes the official repository of that task,
// `false` switches the task off.
import fastifyMultipart from '@fastify/multipart';
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ENHANCER_TASKS } from '../../store/enhancers.js';
import { enhancerDeviceSchema, type profileInputSchema } from '../../store/profile.schema.js';
import { ProfileError } from '../../store/profiles.js';
import type { Service } from '../../service.js';
import { enhancersView } from '../../workers/consoleFeed.js';
import { adminAuth } from '../auth.js';
import { errors } from '../../errors.js';
import { clientGone } from '../client.js';
import { validationError } from '../errors.js';
import { checkReferenceCount, IMAGE_LIMITS, imagePrompt } from '../../workers/image/image.schema.js';
import { readImageForm } from '../forms/imageForm.js';
import type { JobFolder } from '../../workers/jobFolder.js';
import { testProfile } from './testProfile.js';

const taskChoice = z.union([z.string().min(1).max(200).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/, 'a repository id owner/name'), z.null(), z.literal(false)]);

const previewBody = z.strictObject({ profile_id: z.string().min(1).max(100), prompt: imagePrompt });

const choiceBody = z.strictObject({
  id: z.string().min(1).max(100),
  revision: z.number().int().min(1),
  prompt_enhancer: z.strictObject({ t2i: taskChoice, i2i: taskChoice, device: enhancerDeviceSchema.default('auto') }),
});

export const adminEnhancerRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));
  // The preview's reference images; each request sets the image limits (readImageForm).
  await app.register(fastifyMultipart, { limits: { fileSize: IMAGE_LIMITS.maxReferenceBytes, files: IMAGE_LIMITS.maxReferences } });
  const { enhancers } = service;
  const view = () => enhancersView(service);

  app.get('/api/v1/prompt-enhancers', async () => view());

  // What an install would download and whether it fits, asked of the hub before any byte moves; a
  // hub that cannot be asked is part of the answer (`hub_error`), not a 502.
  app.get('/api/v1/prompt-enhancers/plan', { schema: { querystring: z.strictObject({ task: z.enum(ENHANCER_TASKS) }) } }, async (request, reply) =>
    enhancers.plan(request.query.task, clientGone(reply)),
  );

  app.post('/api/v1/prompt-enhancers/install', { schema: { body: z.strictObject({ task: z.enum(ENHANCER_TASKS) }) } }, async (request, reply) => {
    const started = enhancers.install(request.body.task);
    if (!started.ok) throw errors.conflict(started.code, started.message);
    return reply.code(202).send(view());
  });

  app.post('/api/v1/prompt-enhancers/cancel', { schema: { body: z.strictObject({}).nullish() } }, async () => {
    const cancelled = await enhancers.cancel();
    return { cancelled, ...view() };
  });

  // The preview (4.7): JSON { profile_id, prompt }, or multipart with image[] as well (i2i).
  app.post('/api/v1/prompt-enhancers/preview', async (request, reply) => {
    const signal = clientGone(reply);
    let body: unknown = request.body;
    let images: JobFolder | undefined;
    if (request.isMultipart()) {
      const form = await readImageForm(request, ['profile_id', 'prompt'], service);
      body = form.fields;
      images = form.images;
    }
    try {
      const parsed = previewBody.safeParse(body);
      if (!parsed.success) throw validationError(parsed.error.issues);
      const profile = await testProfile(service, parsed.data.profile_id, 'image');
      checkReferenceCount(profile, images?.references.length ?? 0);
      const preview = await service.enhancerPreviews.run(profile, { prompt: parsed.data.prompt, ...(images ? { references: images } : {}) }, signal);
      return { original: preview.original, suggestion: preview.suggestion, wh_ratio: preview.wh_ratio, task: preview.task };
    } finally {
      await images?.remove();
    }
  });

  app.post('/api/v1/profiles/prompt-enhancer', { schema: { body: choiceBody } }, async (request) => {
    const { id, revision, prompt_enhancer: choice } = request.body;
    const profile = service.profiles.get(id);
    if (!profile) throw errors.notFound('profile_not_found', `No profile with id ${id}.`);
    if (profile.category !== 'image') throw errors.invalidValue('id', `Profile ${profile.name} is a ${profile.category} profile: prompt enhancers belong to image profiles.`);
    const resolve = (task: (typeof ENHANCER_TASKS)[number]) => {
      const value = choice[task];
      return value === false ? null : value === null ? enhancers.recipes[task].repo : value;
    };
    const input = {
      name: profile.name,
      category: profile.category,
      params: profile.params,
      prompt_enhancer: { t2i: resolve('t2i'), i2i: resolve('i2i'), device: choice.device },
    } as z.output<typeof profileInputSchema>;
    try {
      return await service.catalog.view(await service.profiles.update(id, revision, input));
    } catch (error) {
      if (error instanceof ProfileError && error.code === 'stale_revision') throw errors.conflict('stale_revision', error.message);
      throw error;
    }
  });
};
