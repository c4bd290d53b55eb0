// Spec 4.7 / 3.3, the image test routes: POST /api/v1/image-tests starts one image through the same
// reservation and image worker as the API and answers 202 once it holds the reservation, or 409
// `image_busy` at once when the reservation is busy (the API would wait); GET shows the current
// test: its phase, progress (steps done), and once done the image without metadata. POST
// /api/v1/image-tests/cancel ends it. The profile needs no publication, but it must be an
// executable image profile; the prompt is never kept or logged. `preview: "accept" | "keep"`
// after a preview of the same prompt uses its suggestion or the original, not enhanced again.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Service } from '../../service.js';
import { adminAuth } from '../auth.js';
import { errors } from '../../errors.js';
import { testProfile } from './testProfile.js';
import { imagePrompt } from '../../workers/image/image.schema.js';

const startBody = z.strictObject({
  profile_id: z.string().min(1).max(100),
  prompt: imagePrompt,
  /** After a preview of this prompt (4.7): take its suggestion, or keep the original; either way not enhanced again. */
  preview: z.enum(['accept', 'keep']).optional(),
});
const emptyBody = z.strictObject({}).nullish();

export const adminImageTestRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));
  const tests = service.imageTests;

  app.get('/api/v1/image-tests', async () => ({ job: tests.current() }));

  app.post('/api/v1/image-tests', { schema: { body: startBody } }, async (request, reply) => {
    const { profile_id: id, prompt, preview } = request.body;
    const profile = await testProfile(service, id, 'image');
    if (tests.running()) throw errors.conflict('image_busy', 'An image test is running: the image reservation is busy.');
    const chosen = preview ? service.enhancerPreviews.choose(profile, prompt, preview) : prompt;
    const started = await tests.start(profile, chosen, { fromPreview: preview !== undefined });
    if (!started.ok) throw started.error;
    return reply.code(202).send({ job: started.job });
  });

  app.post('/api/v1/image-tests/cancel', { schema: { body: emptyBody } }, async () => {
    const cancelled = tests.cancel();
    await tests.settled();
    return { cancelled, job: tests.current() };
  });
};
