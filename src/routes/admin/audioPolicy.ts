// Spec 4.7, the audio policy routes: GET answers `settings` (the two records of spec 2.4) and
// `errors` (what keeps a warm choice from being loaded now); POST saves one kind's choice, which
// takes effect at once. Mode `warm` requires an executable profile of that kind; a profile that
// only lacks its runtime is saved anyway (spec 3.6: "the selection stays saved, the error appears
// in `errors`"), and the preload is retried later.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { warmBlocker } from '../../system/audioPolicy.js';
import type { Service } from '../../service.js';
import { adminAuth } from '../auth.js';
import { errors } from '../../errors.js';

const setBody = z.strictObject({
  kind: z.enum(['tts', 'stt']),
  mode: z.enum(['auto', 'warm', 'per_request']),
  profile_id: z.string().min(1).max(100).nullable().default(null),
});

export const adminAudioPolicyRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));

  app.get('/api/v1/audio-policy', async () => service.audio.view());

  app.post('/api/v1/audio-policy', { schema: { body: setBody } }, async (request) => {
    const { kind, mode, profile_id: profileId } = request.body;
    if (profileId !== null) {
      const profile = service.profiles.get(profileId);
      if (!profile) throw errors.notFound('profile_not_found', `No profile with id ${profileId}.`);
      if (profile.category !== kind) throw errors.invalidValue('profile_id', `Profile ${profileId} is a ${profile.category} profile, not a ${kind} profile.`);
    }
    if (mode === 'warm') {
      if (profileId === null) throw errors.invalidValue('profile_id', 'Mode warm requires an executable profile: give its profile_id.');
      const blocker = await warmBlocker(kind, profileId, service.profiles, service.catalog.lookup);
      if (blocker && blocker.code !== 'runtime_missing') throw errors.invalidValue('profile_id', `Mode warm requires an executable profile: ${blocker.message}.`);
    }
    await service.audio.set({ kind, mode, profileId });
    return service.audio.view();
  });
};
