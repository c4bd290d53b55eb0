// The operator's speech and transcription tests (the console plays and records through them):
// POST /api/v1/speech-tests speaks a text with a TTS profile and answers the WAV;
// POST /api/v1/transcription-tests transcribes an uploaded WAV (multipart: profile_id, file,
// language) with an STT profile and answers `{ text, language }`. Both run through the same
// scheduler and workers as the API (source `test`), need no publication but an executable
// profile, and keep nothing: neither text, audio nor transcript is stored or logged.
import type { FastifyPluginAsync } from 'fastify';
import fastifyMultipart from '@fastify/multipart';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { TRANSCRIPTION_WAV } from '../../adapters/wav.js';
import type { Service } from '../../service.js';
import { speak, transcribe, transcriptionLanguage } from '../../workers/speech/speechJobs.js';
import { adminAuth } from '../auth.js';
import { clientGone } from '../client.js';
import { errors } from '../../errors.js';
import { speechRequestSchema } from '../../workers/speech/speech.schema.js';
import { speechJob } from '../../workers/speech/tts.js';
import { noFile, readRecordingForm, requestedLanguage } from '../forms/recordingForm.js';
import { testProfile } from './testProfile.js';

const speechTestBody = speechRequestSchema.omit({ model: true, response_format: true, stream_format: true, instructions: true }).extend({ profile_id: z.string().min(1).max(100) });

export const adminSpeechTestRoutes: FastifyPluginAsync<{ service: Service }> = async (base, { service }) => {
  const app = base.withTypeProvider<ZodTypeProvider>();
  app.addHook('onRequest', adminAuth(service));
  await app.register(fastifyMultipart, { limits: { fileSize: TRANSCRIPTION_WAV.maxBytes, files: 1, fields: 4, fieldSize: 200, parts: 5 } });

  app.post('/api/v1/speech-tests', { schema: { body: speechTestBody } }, async (request, reply) => {
    const profile = await testProfile(service, request.body.profile_id, 'tts');
    const job = speechJob(profile, { ...request.body, model: profile.name }, request.body.speed ?? profile.params.speed);
    const wav = await speak(service, profile, job, 'test', clientGone(reply));
    return reply.code(200).type('audio/wav').header('cache-control', 'no-store').send(wav);
  });

  app.post('/api/v1/transcription-tests', async (request, reply) => {
    const { fields, file } = await readRecordingForm(request, service, ['profile_id', 'language']);
    try {
      if (!fields.profile_id) throw errors.invalidValue('profile_id', "The field 'profile_id' is required: an STT profile.");
      const requested = requestedLanguage(fields.language);
      if (!file) throw noFile();
      const profile = await testProfile(service, fields.profile_id, 'stt');
      const language = transcriptionLanguage(profile, requested);
      await file.check();
      const text = await transcribe(service, profile, file, language, 'test', clientGone(reply));
      return { text, language };
    } finally {
      await file?.remove();
    }
  });
};
