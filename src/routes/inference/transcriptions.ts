// Spec 4.6: POST /v1/audio/transcriptions, a multipart form with `model`, `file`, `language`
// (de, en, auto; by default the profile's defaultLanguage, itself de unless set) and
// `response_format` (json only). The file is checked from its bytes (src/adapters/wav.ts: PCM16
// WAV, mono, 16 kHz, at most 120 s and 8 MiB, a larger upload is 413); chunked
// uploads (refused for every route), timestamps and streaming are rejected with a 400 that says
// which rule failed. The job goes through the scheduler (one STT job at a time) to the STT worker
// on the CPU, which stays loaded for further recordings. The answer is `{ "text": string }`.
import type { MultipartFile } from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { TRANSCRIPTION_WAV } from '../../adapters/wav.js';
import type { Service } from '../../workers/service.js';
import { recordingOf, transcribe, transcriptionLanguage } from '../../workers/speechJobs.js';
import { STT_LANGUAGE_CHOICES, type SttLanguage } from '../../store/profile.schema.js';
import type { SttProfile } from '../../workers/stt.js';
import { clientGone } from '../client.js';
import { readForm } from '../multipart.js';
import { errors } from '../../errors.js';

/**
 * OpenAI fields this endpoint refuses, with the rule that refuses them. A Map: a field named
 * `constructor` or `__proto__` must find nothing here (issue 15), it is an unknown parameter.
 */
const REFUSED: ReadonlyMap<string, string> = new Map([
  ['stream', 'streamed transcription is not supported: the answer is one JSON object'],
  ['timestamp_granularities[]', 'timestamps are not supported: the answer is { "text": string }'],
  ['timestamp_granularities', 'timestamps are not supported: the answer is { "text": string }'],
  ['chunking_strategy', 'chunking is not supported: send one recording of at most 120 s'],
  ['include', 'logprobs are not supported'],
  ['include[]', 'logprobs are not supported'],
]);

/** The uploaded file's bytes; over 8 MiB is a 413 naming the limit. */
const readFile = async (part: MultipartFile): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const chunk of part.file) chunks.push(chunk as Buffer);
  if (part.file.truncated) {
    throw errors.tooLarge(`The file is larger than ${TRANSCRIPTION_WAV.maxBytes} bytes (8 MiB), the limit for a recording.`, 'file');
  }
  return Buffer.concat(chunks);
};

export const noFile = () => errors.invalidValue('file', "The field 'file' is required: a PCM16 WAV recording, mono, 16 kHz.");

/**
 * Reads a multipart recording form: at most one file, in the field `file`, and the `accepted`
 * text fields; a field of `refused` is a 400 with its rule, any other an unknown parameter.
 */
export async function readRecordingForm(request: FastifyRequest, accepted: readonly string[], refused: ReadonlyMap<string, string> = new Map()) {
  if (!request.isMultipart()) throw errors.mediaType(`Send the recording as multipart/form-data (fields ${[...accepted, 'file'].join(', ')}).`);
  return readForm(request, undefined, async (parts) => {
    const fields: Record<string, string> = {};
    let file: Buffer | undefined;
    for await (const part of parts) {
      if (part.type === 'file') {
        if (part.fieldname !== 'file') throw errors.unknownParameter(part.fieldname);
        if (file) throw errors.invalidValue('file', 'Send exactly one file.');
        file = await readFile(part);
        continue;
      }
      const rule = refused.get(part.fieldname);
      if (rule) throw errors.invalidValue(part.fieldname.replace(/\[\]$/, ''), `Not accepted: ${rule}.`);
      if (!accepted.includes(part.fieldname)) throw errors.unknownParameter(part.fieldname);
      fields[part.fieldname] = String(part.value);
    }
    return { fields, file };
  });
}

/** The language a form names (de, en, auto), or undefined when it names none. */
export function requestedLanguage(value: string | undefined): SttLanguage | undefined {
  if (value !== undefined && !STT_LANGUAGE_CHOICES.includes(value as SttLanguage)) {
    throw errors.invalidValue('language', `language must be de, en or auto, not ${JSON.stringify(value)}.`);
  }
  return value as SttLanguage | undefined;
}

export const transcriptionRoutes: FastifyPluginAsync<{ service: Service }> = async (app, { service }) => {
  app.post('/v1/audio/transcriptions', async (request, reply) => {
    const signal = clientGone(reply);
    const { fields, file } = await readRecordingForm(request, ['model', 'language', 'response_format'], REFUSED);

    const model = fields.model;
    if (!model) throw errors.invalidValue('model', "The field 'model' is required: the API name of a published STT profile.");
    const format = fields.response_format ?? 'json';
    if (format !== 'json') throw errors.invalidValue('response_format', `Only response_format json is supported, not ${JSON.stringify(format)}.`);
    const requested = requestedLanguage(fields.language);
    if (!file) throw noFile();

    const profile = (await service.catalog.resolve('stt', model)) as SttProfile | undefined;
    if (!profile) throw errors.modelNotFound(model);
    const language = transcriptionLanguage(profile, requested);
    const text = await transcribe(service, profile, recordingOf(file), language, 'api', signal);
    return { text };
  });
};
