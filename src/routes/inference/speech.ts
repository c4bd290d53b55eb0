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
import { z } from 'zod';
import type { Service } from '../../service.js';
import { speak } from '../../workers/speech/speechJobs.js';
import { DEFAULT_VOICE, ESPEAK_LANGUAGES, ESPEAK_VOICES, type SpeechRequest, type TtsProfile } from '../../workers/speech/tts.js';

/** Spec 4.5: `language` defaults to German. */
const DEFAULT_LANGUAGE = 'German';
import { clientGone } from '../client.js';
import { errors } from '../../errors.js';
import { notOffered, type FieldFates } from '../../workers/fields.js';

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

/**
 * A language name the backend does not speak, or a voice it does not have: a 400 naming what it
 * has, and the profile setting that says so when the operator set the list (`setting`).
 */
function unsupported(param: 'language' | 'voice', name: string, supported: readonly string[], setting?: string) {
  const what = param === 'language' ? `The language ${JSON.stringify(name)} is not supported` : `The voice ${JSON.stringify(name)} is not one of the presets`;
  return errors.invalidValue(param, `${what}; supported: ${supported.join(', ')}${setting ? ` (${setting}, set by the operator)` : ''}.`);
}

/** The request for the profile's backend: language names map to its voices (spec 4.5). */
export function speechJob(profile: TtsProfile, body: z.output<typeof speechRequestSchema>, speed: number): SpeechRequest {
  const languageName = body.language ?? DEFAULT_LANGUAGE;
  const voice = body.voice ?? profile.params.voice ?? DEFAULT_VOICE;
  if (profile.params.backend === 'openai-server') {
    // The server's own languages, when the profile lists them; else the name is passed on as it is.
    const languages = profile.params.languages;
    if (languages && !languages.includes(languageName)) throw unsupported('language', languageName, languages, `the params.languages of ${profile.name}`);
    return { backend: 'openai-server', model: profile.params.model ?? 'tts-1', input: body.input, voice, speed, language: languageName };
  }
  const language = ESPEAK_LANGUAGES.get(languageName);
  if (!language) throw unsupported('language', languageName, [...ESPEAK_LANGUAGES.keys()]);
  const variant = ESPEAK_VOICES.get(voice);
  if (!variant) throw unsupported('voice', voice, [...ESPEAK_VOICES.keys()]);
  return { backend: 'espeak-ng', text: body.input, language, variant, speed };
}

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
