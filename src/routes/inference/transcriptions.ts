// Spec 4.6: POST /v1/audio/transcriptions, a multipart form with `model`, `file`, `language`
// (de, en, auto; by default the profile's defaultLanguage, itself de unless set) and
// `response_format` (json only). The file is checked from its headers (src/adapters/wav.ts: PCM16
// WAV, mono, 16 kHz, at most 120 s and 8 MiB, a larger upload is 413); chunked
// uploads (refused for every route), timestamps, streaming, several languages and speaker names
// are rejected with a 400 that says which rule failed; OpenAI's decoder hints (prompt,
// temperature, keywords) are accepted and ignored (TRANSCRIPTION_FIELDS). The job goes through the scheduler (one STT job at a time) to the STT worker
// on the CPU, which stays loaded for further recordings. The answer is `{ "text": string }`.
import type { FastifyPluginAsync } from 'fastify';
import { TRANSCRIPTION_WAV } from '../../adapters/wav.js';
import type { Service } from '../../service.js';
import { transcribe, transcriptionLanguage } from '../../workers/speech/speechJobs.js';
import type { SttProfile } from '../../workers/speech/stt.js';
import { ACCEPTED, ARRAYS, REFUSED, transcriptionFields } from '../../workers/speech/transcription.schema.js';
import { clientGone } from '../client.js';
import { formFields, noFile, readRecordingForm } from '../forms/recordingForm.js';

export const transcriptionRoutes: FastifyPluginAsync<{ service: Service }> = async (app, { service }) => {
  // A chunked upload is read up to a recording and its fields before its refusal (src/routes/chunked.ts).
  app.post('/v1/audio/transcriptions', { config: { uploadLimit: TRANSCRIPTION_WAV.maxBytes + 64 * 1024 } }, async (request, reply) => {
    const signal = clientGone(reply);
    const form = await readRecordingForm(request, service, ACCEPTED, REFUSED, ARRAYS);
    try {
      const { model, language: requested } = formFields(transcriptionFields, form.fields);
      if (!form.file) throw noFile();
      const profile = (await service.catalog.require('stt', model)) as SttProfile;
      request.metricsModel = model;
      const language = transcriptionLanguage(profile, requested);
      // Checked now from its headers; its samples go from the file to the engine when its job runs.
      await form.file.check();
      const text = await transcribe(service, profile, form.file, language, 'api', signal);
      return { text };
    } finally {
      await form.file?.remove();
    }
  });
};
