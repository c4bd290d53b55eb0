// Spec 4.6: POST /v1/audio/transcriptions, a multipart form with `model`, `file`, `language`
// (de, en, auto; by default the profile's defaultLanguage, itself de unless set) and
// `response_format` (json only). The file is checked from its bytes (src/adapters/wav.ts: PCM16
// WAV, mono, 16 kHz, at most 120 s and 8 MiB, a larger upload is 413); chunked
// uploads (refused for every route), timestamps, streaming, several languages and speaker names
// are rejected with a 400 that says which rule failed; OpenAI's decoder hints (prompt,
// temperature, keywords) are accepted and ignored (TRANSCRIPTION_FIELDS). The job goes through the scheduler (one STT job at a time) to the STT worker
// on the CPU, which stays loaded for further recordings. The answer is `{ "text": string }`.
import type { MultipartFile } from '@fastify/multipart';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { TRANSCRIPTION_WAV } from '../../adapters/wav.js';
import type { Service } from '../../service.js';
import { recordingOf, transcribe, transcriptionLanguage } from '../../workers/speech/speechJobs.js';
import { STT_LANGUAGE_CHOICES, type SttLanguage } from '../../store/profile.schema.js';
import type { SttProfile } from '../../workers/speech/stt.js';
import { clientGone } from '../client.js';
import { readForm } from '../multipart.js';
import { errors } from '../../errors.js';
import { notOffered, type FieldFates } from '../../workers/fields.js';

/** The fate of every field of OpenAI's CreateTranscriptionRequest (src/workers/fields.ts). */
export const TRANSCRIPTION_FIELDS = {
  file: 'honoured',
  model: 'honoured',
  language: 'honoured',
  response_format: 'honoured',
  stream: 'honoured',
  // Accepted and ignored: hints for the decoder, which decodes greedily without them.
  prompt: 'ignored',
  temperature: 'ignored',
  keywords: 'ignored',
  languages: 'refused',
  include: 'refused',
  timestamp_granularities: 'refused',
  chunking_strategy: 'refused',
  known_speaker_names: 'refused',
  known_speaker_references: 'refused',
} as const satisfies FieldFates;

/** A refused field: what it asks for that is not offered, and the one value that asks for nothing (`stream=false`). */
interface Refusal {
  why: string;
  harmless?: string;
}

/**
 * OpenAI fields this endpoint refuses, with the rule that refuses them. A Map: a field named
 * `constructor` or `__proto__` must find nothing here, it is an unknown parameter.
 */
const REFUSED: ReadonlyMap<string, Refusal> = new Map([
  ['stream', { why: 'the answer is one JSON object, never a stream', harmless: 'false' }],
  ['timestamp_granularities', { why: 'there are no timestamps: the answer is { "text": string }' }],
  ['chunking_strategy', { why: 'there is no chunking: send one recording of at most 120 s' }],
  ['include', { why: 'there are no logprobs' }],
  ['languages', { why: 'send one language (de, en or auto) in language' }],
  ['known_speaker_names', { why: 'speakers are not told apart: the answer is one text' }],
  ['known_speaker_references', { why: 'speakers are not told apart: the answer is one text' }],
]);

/** The text fields the route takes: those that are not refused (the file is a file part). */
const ACCEPTED = Object.entries(TRANSCRIPTION_FIELDS).flatMap(([field, fate]) => (fate === 'refused' || field === 'file' ? [] : [field]));

/** The fields OpenAI's clients send as arrays, one `name[]` part per item. */
const ARRAYS = new Set(['keywords', 'languages', 'include', 'timestamp_granularities', 'known_speaker_names', 'known_speaker_references']);

/** The temperature, when sent, is a number from 0 to 1 (OpenAI's range), though it changes nothing. */
function checkTemperature(value: string | undefined): void {
  if (value === undefined) return;
  const number = Number(value);
  if (value.trim() === '' || !(number >= 0 && number <= 1)) throw errors.invalidValue('temperature', `temperature is a number from 0 to 1, not ${JSON.stringify(value)}.`);
}

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
export async function readRecordingForm(
  request: FastifyRequest,
  accepted: readonly string[],
  refused: ReadonlyMap<string, Refusal> = new Map(),
  arrays: ReadonlySet<string> = new Set(),
) {
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
      // An array's items come as `name[]`: the field is `name`.
      const bare = part.fieldname.replace(/\[\]$/, '');
      const name = arrays.has(bare) ? bare : part.fieldname;
      const value = String(part.value);
      const refusal = refused.get(name);
      if (refusal && value !== refusal.harmless) throw errors.invalidValue(name, `${notOffered(name, refusal.why)}.`);
      if (!refusal && !accepted.includes(name)) throw errors.unknownParameter(part.fieldname);
      fields[name] = value;
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
  // A chunked upload is read up to a recording and its fields before its refusal (src/routes/chunked.ts).
  app.post('/v1/audio/transcriptions', { config: { uploadLimit: TRANSCRIPTION_WAV.maxBytes + 64 * 1024 } }, async (request, reply) => {
    const signal = clientGone(reply);
    const { fields, file } = await readRecordingForm(request, ACCEPTED, REFUSED, ARRAYS);

    const model = fields.model;
    if (!model) throw errors.invalidValue('model', "The field 'model' is required: the API name of a published STT profile.");
    const format = fields.response_format ?? 'json';
    if (format !== 'json') throw errors.invalidValue('response_format', `Only response_format json is supported, not ${JSON.stringify(format)}.`);
    const requested = requestedLanguage(fields.language);
    checkTemperature(fields.temperature);
    if (!file) throw noFile();

    const profile = (await service.catalog.require('stt', model)) as SttProfile;
    request.metricsModel = model;
    const language = transcriptionLanguage(profile, requested);
    const text = await transcribe(service, profile, recordingOf(file), language, 'api', signal);
    return { text };
  });
};
