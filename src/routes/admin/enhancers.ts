// Spec 4.7 / CONTRACT section 8, the prompt enhancer routes: where each task's install stands,
// install (one at a time, 202, then followed in GET and the console's event stream), cancel (the
// partial files removed), and the per-profile choice saved with a revision like any edit: `null`
// becomes the official repository of that task, `false` switches the task off.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ENHANCER_TASKS } from '../../store/enhancers.js';
import type { profileInputSchema } from '../../store/profile.schema.js';
import { ProfileError } from '../../store/profiles.js';
import type { Service } from '../../workers/service.js';
import { enhancersView } from '../../workers/consoleFeed.js';
import { adminAuth } from '../auth.js';
import { errors } from '../../errors.js';

const taskChoice = z.union([z.string().min(1).max(200).regex(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._-]*$/, 'a repository id owner/name'), z.null(), z.literal(false)]);

const choiceBody = z.strictObject({
  id: z.string().min(1).max(100),
  revision: z.number().int().min(1),
  prompt_enhancer: z.strictObject({ t2i: taskChoice, i2i: taskChoice, device: z.string().min(1).max(100).default('auto') }),
});

export const adminEnhancerRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));
  const { enhancers } = service;
  // The preview (issue 14) is not built yet: it stays an unknown route until it is.
  const view = () => enhancersView(service);

  app.get('/api/v1/prompt-enhancers', async () => view());

  app.post('/api/v1/prompt-enhancers/install', { schema: { body: z.strictObject({ task: z.enum(ENHANCER_TASKS) }) } }, async (request, reply) => {
    const started = enhancers.install(request.body.task);
    if (!started.ok) throw errors.conflict(started.code, started.message);
    return reply.code(202).send(view());
  });

  app.post('/api/v1/prompt-enhancers/cancel', { schema: { body: z.strictObject({}).nullish() } }, async () => {
    const cancelled = await enhancers.cancel();
    return { cancelled, ...view() };
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
