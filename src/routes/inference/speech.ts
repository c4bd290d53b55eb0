// Spec 4.5: POST /v1/audio/speech (JSON) answers a WAV file. `model` is an explicitly published TTS
// profile; `input` 1 to 1000 characters; `voice` optional (the preset `alloy` by default, or the
// profile's); `language` optional, default German; `speed` 0.25 to 4, else the profile's;
// `response_format` only wav, `stream_format` only audio (one file), `instructions` accepted and
// ignored. Anything else (mp3, sse, unknown fields) is a 400. The job
// goes through the scheduler to the TTS worker, which stays ready for further requests. espeak-ng
// maps language names and OpenAI's preset voices to its own; an openai-server profile passes the
// voice on and checks the language against the names it lists.
import type { FastifyPluginAsync } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Service } from '../../service.js';
import { speechRequestSchema } from '../../workers/speech/speech.schema.js';
import { speak } from '../../workers/speech/speechJobs.js';
import { speechJob, type TtsProfile } from '../../workers/speech/tts.js';
import { clientGone } from '../client.js';

export const speechRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();

  app.post('/v1/audio/speech', { schema: { body: speechRequestSchema } }, async (request, reply) => {
    const signal = clientGone(reply);
    const body = request.body;
    const profile = (await service.catalog.require('tts', body.model)) as TtsProfile;
    const speed = body.speed ?? profile.params.speed;
    const job = speechJob(profile, body, speed);

    const wav = await speak(service, profile, job, 'api', signal);
    return reply.code(200).type('audio/wav').send(wav);
  });
};
