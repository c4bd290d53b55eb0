// The speech request's schema (spec 4.5), shared by the API's route and the operator's speech test,
// with the fate of every field of OpenAI's CreateSpeechRequest.
import { z } from 'zod';
import { notOffered, type FieldFates } from '../fields.js';

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
  // `audio` (one whole file) is what every answer is; `sse` is refused.
  stream_format: z.literal('audio', notOffered('streamed audio (stream_format sse)', 'the answer is one WAV file')).optional(),
  // Accepted and ignored: neither espeak-ng nor the speech server's plain request takes a voice direction.
  instructions: z.string().max(4096).optional(),
});

/** The extension field beyond OpenAI's: the language (spec 4.5). */
export const SPEECH_EXTENSIONS = ['language'] as const;

/** The fate of every field of OpenAI's CreateSpeechRequest (src/workers/fields.ts). */
export const SPEECH_FIELDS = {
  model: 'honoured',
  input: 'honoured',
  voice: 'honoured',
  response_format: 'honoured',
  speed: 'honoured',
  stream_format: 'honoured',
  instructions: 'ignored',
} as const satisfies FieldFates;

/** A checked speech request. */
export type SpeechBody = z.output<typeof speechRequestSchema>;
