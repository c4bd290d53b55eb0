// The transcription request's fields (spec 4.6), shared by the API's route and the operator's
// transcription test: the fate of every field of OpenAI's CreateTranscriptionRequest, the rules
// that refuse some, and the schema of the text fields a form sends beside its recording.
import { z } from 'zod';
import { STT_LANGUAGE_CHOICES } from '../../store/profile.schema.js';
import type { FieldFates } from '../fields.js';

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
export interface Refusal {
  why: string;
  harmless?: string;
}

/**
 * OpenAI fields this endpoint refuses, with the rule that refuses them. A Map: a field named
 * `constructor` or `__proto__` must find nothing here, it is an unknown parameter.
 */
export const REFUSED: ReadonlyMap<string, Refusal> = new Map([
  ['stream', { why: 'the answer is one JSON object, never a stream', harmless: 'false' }],
  ['timestamp_granularities', { why: 'there are no timestamps: the answer is { "text": string }' }],
  ['chunking_strategy', { why: 'there is no chunking: send one recording of at most 120 s' }],
  ['include', { why: 'there are no logprobs' }],
  ['languages', { why: 'send one language (de, en or auto) in language' }],
  ['known_speaker_names', { why: 'speakers are not told apart: the answer is one text' }],
  ['known_speaker_references', { why: 'speakers are not told apart: the answer is one text' }],
]);

/** The text fields the route takes: those that are not refused (the file is a file part). */
export const ACCEPTED = Object.entries(TRANSCRIPTION_FIELDS).flatMap(([field, fate]) => (fate === 'refused' || field === 'file' ? [] : [field]));

/** The fields OpenAI's clients send as arrays, one `name[]` part per item. */
export const ARRAYS = new Set(['keywords', 'languages', 'include', 'timestamp_granularities', 'known_speaker_names', 'known_speaker_references']);

/** A language a form names: de, en or auto. */
export const sttLanguageField = z.enum(STT_LANGUAGE_CHOICES, { error: (issue) => `language must be de, en or auto, not ${JSON.stringify(issue.input)}.` });

const MODEL_REQUIRED = "The field 'model' is required: the API name of a published STT profile.";

/**
 * The text fields of a transcription form, in the order they are judged. Everything a form sends
 * is text: the temperature (OpenAI's range, though it changes nothing) is a number written out.
 */
export const transcriptionFields = z.object({
  model: z.string({ error: MODEL_REQUIRED }).min(1, MODEL_REQUIRED),
  response_format: z.literal('json', { error: (issue) => `Only response_format json is supported, not ${JSON.stringify(issue.input)}.` }).default('json'),
  language: sttLanguageField.optional(),
  temperature: z
    .string()
    .refine((value) => value.trim() !== '' && Number(value) >= 0 && Number(value) <= 1, { error: (issue) => `temperature is a number from 0 to 1, not ${JSON.stringify(issue.input)}.` })
    .optional(),
});
