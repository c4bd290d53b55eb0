// One speech job and one transcription job on their lease: reserve through the scheduler (a grant
// that needs a worker start comes with it), wait for the worker start, run, give the reservation
// back. The inference routes run them for API
// clients (source `api`, published profiles); the admin routes run them as the operator's tests
// (source `test`, no publication needed), through the same scheduler and workers.
import type { JobSource } from '../../../machines/supervisor/index.js';
import { checkTranscriptionFile, WavError, type PcmFile } from '../../adapters/wav.js';
import { ApiError, errors } from '../../errors.js';
import { STT_LANGUAGES, type SttLanguage } from '../../store/profile.schema.js';
import type { JobFolder } from '../jobFolder.js';
import { onLease } from '../lease.js';
import type { Service } from '../../service.js';
import type { SttProfile } from './stt.js';
import type { SpeechRequest, TtsProfile } from './tts.js';

export async function speak(service: Pick<Service, 'scheduler' | 'tts'>, profile: TtsProfile, job: SpeechRequest, source: JobSource, signal: AbortSignal): Promise<Buffer> {
  const lease = await service.scheduler.reserve(
    { kind: 'tts', source, profileId: profile.id, revision: profile.revision, slots: 1, device: profile.params.device, whenBusy: 'wait', profile },
    { signal },
  );
  return onLease(lease, signal, 'text-to-speech worker', async (both) => {
    await service.tts.ready(lease.generation, both);
    return service.tts.synthesize(lease.generation, job, both);
  });
}

/** The language a transcription runs in: the request's, else the profile's; one its backend takes. */
export function transcriptionLanguage(profile: SttProfile, requested: SttLanguage | undefined): SttLanguage {
  // A request without a language takes the profile's (spec 4.6's default de unless it says otherwise).
  const language = requested ?? profile.params.defaultLanguage;
  const supported = STT_LANGUAGES[profile.params.backend];
  if (!supported.includes(language)) {
    // The request named it: a profile's own default that its backend lacks is a blocker instead.
    const backend = profile.params.backend;
    const others = Object.entries(STT_LANGUAGES).filter(([name, languages]) => name !== backend && languages.includes(language));
    const instead = others.map(([name]) => `; a profile with params.backend ${name} takes it`).join('');
    throw errors.invalidValue(
      'language',
      `The ${backend} backend of ${profile.name} (its params.backend) cannot transcribe language ${language}: it takes ${supported.join(', ')}${instead}.`,
    );
  }
  return language;
}

/** The one line that turns any audio file into what spec 4.6 takes (PCM16 WAV, mono, 16 kHz). */
export const CONVERSION = 'ffmpeg -i in -ar 16000 -ac 1 -c:a pcm_s16le out.wav';

/** The rules a conversion fixes: another container, encoding, channel count or sample rate. */
const CONVERTIBLE = new Set(['wav_not_riff', 'wav_not_wave', 'wav_not_pcm', 'wav_not_mono', 'wav_sample_rate', 'wav_bits_per_sample']);

/** Where the samples of an uploaded recording lie, or the 400 naming the rule it breaks (spec 4.6). */
async function checkedRecording(file: string): Promise<PcmFile> {
  try {
    return await checkTranscriptionFile(file);
  } catch (error) {
    if (error instanceof WavError) {
      const fix = CONVERTIBLE.has(error.rule) ? ` Convert it to a 16 kHz mono 16-bit WAV first: \`${CONVERSION}\`.` : '';
      throw new ApiError(400, 'invalid_request_error', error.rule, `The file is refused: ${error.message}.${fix}`, 'file');
    }
    throw error;
  }
}

/**
 * An uploaded recording in its job folder (written there as it arrived): checked from its headers
 * before its job waits, and handed to the engine as a file when the job runs (the engine reads
 * its samples from the file), so no recording is ever held whole in memory. Whoever read the form
 * removes it.
 */
export class RecordingFile {
  #checked: Promise<PcmFile> | undefined;

  constructor(
    readonly folder: JobFolder,
    readonly file: string,
  ) {}

  /** Where its samples lie, or the 400 naming the rule it breaks; checked once. */
  check(): Promise<PcmFile> {
    return (this.#checked ??= checkedRecording(this.file));
  }

  remove(): Promise<void> {
    return this.folder.remove();
  }
}

export async function transcribe(service: Pick<Service, 'scheduler' | 'stt'>, profile: SttProfile, recording: RecordingFile, language: SttLanguage, source: JobSource, signal: AbortSignal): Promise<string> {
  const lease = await service.scheduler.reserve(
    { kind: 'stt', source, profileId: profile.id, revision: profile.revision, slots: 1, device: 'cpu', whenBusy: 'wait', profile },
    { signal },
  );
  return onLease(lease, signal, 'speech-to-text worker', async (both) => {
    await service.stt.ready(lease.generation, both);
    // A recording is not dropped halfway: a client that leaves now still lets the engine finish
    // (a few seconds at most), so the next job never meets a busy engine. Only a revoked
    // reservation (endpoint stop, a dead worker) ends it early.
    return service.stt.transcribe(lease.generation, await recording.check(), language, lease.signal);
  });
}
