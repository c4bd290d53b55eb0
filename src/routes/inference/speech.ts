// Spec 4.5: POST /v1/audio/speech (JSON) answers a WAV file. `model` is an explicitly published TTS
// profile; `input` 1 to 1000 characters; `voice` optional (the preset `alloy` by default, or the
// profile's); `language` optional, default German; `speed` 0.25 to 4, else the profile's;
// `response_format` only wav. Anything else (mp3, stream_format, unknown fields) is a 400. The job
// goes through the scheduler to the TTS worker, which stays ready for further requests.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Service } from '../../system/service.js';
import { onLease } from '../../workers/job.js';
import { DEFAULT_VOICE, ESPEAK_LANGUAGES, ESPEAK_VOICES, type TtsProfile } from '../../workers/tts.js';
import { clientGone } from '../client.js';
import { errors } from '../errors.js';

const characters = (text: string) => [...text].length;

export const speechRequestSchema = z.strictObject({
  model: z.string().min(1),
  input: z
    .string()
    .refine((text) => characters(text) >= 1, 'input must not be empty')
    .refine((text) => characters(text) <= 1000, 'input has at most 1000 characters'),
  voice: z.string().min(1).max(100).optional(),
  language: z.string().min(1).max(100).optional(),
  speed: z.number().min(0.25).max(4).optional(),
  response_format: z.literal('wav', 'only wav is supported (no mp3, opus, aac, flac or pcm)').optional(),
});

export const speechRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/audio/speech', { schema: { body: speechRequestSchema } }, async (request, reply) => {
    const signal = clientGone(reply);
    const body = request.body;
    const profile = (await service.catalog.resolve('tts', body.model)) as TtsProfile | undefined;
    if (!profile) throw errors.modelNotFound(body.model);
    const languageName = body.language ?? 'German';
    const language = ESPEAK_LANGUAGES[languageName];
    if (!language) throw errors.invalidValue('language', `The language ${JSON.stringify(languageName)} is not supported; supported: ${Object.keys(ESPEAK_LANGUAGES).join(', ')}.`);
    const voiceName = body.voice ?? profile.params.voice ?? DEFAULT_VOICE;
    const variant = ESPEAK_VOICES[voiceName];
    if (!variant) throw errors.invalidValue('voice', `The voice ${JSON.stringify(voiceName)} is not one of the presets: ${Object.keys(ESPEAK_VOICES).join(', ')}.`);
    const speed = body.speed ?? profile.params.speed;

    const lease = await service.scheduler.reserve(
      { kind: 'tts', source: 'api', profileId: profile.id, revision: profile.revision, slots: 1, device: profile.params.device, whenBusy: 'wait', profile },
      { signal },
    );
    const wav = await onLease(lease, signal, 'text-to-speech worker', async (both) => {
      service.tts.start(lease, profile);
      await service.tts.ready(lease.generation, both);
      return service.tts.synthesize(lease.generation, { text: body.input, language, variant, speed }, both);
    });
    return reply.code(200).type('audio/wav').send(wav);
  });
};
