// The multipart form of a recording (the API's transcription and the operator's transcription
// test): at most one file, in the field `file`, streamed into a private job folder up to the
// recording's limit (never held in memory; the folder first reserves disk room for the request's
// declared length, and gives back what it did not write once the form is read), and text
// fields, each accepted, refused with its rule, or an unknown parameter; then the text fields
// checked against their schema.
import type { MultipartFile } from '@fastify/multipart';
import type { FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { TRANSCRIPTION_WAV } from '../../adapters/wav.js';
import { errors } from '../../errors.js';
import { notOffered } from '../../workers/fields.js';
import { sttLanguageField, type Refusal } from '../../workers/speech/transcription.schema.js';
import { RecordingFile } from '../../workers/speech/speechJobs.js';
import { JobFolder } from '../../workers/jobFolder.js';
import type { UploadRoom } from '../../workers/uploadRoom.js';
import type { SttLanguage } from '../../store/profile.schema.js';
import { declaredLength, readForm } from '../multipart.js';

/** Where a recording goes: the state directory's job folders, and the disk room they share. */
export interface RecordingUploads {
  config: { stateDir: string };
  uploads: UploadRoom;
}

/** The uploaded file, written into a new job folder as it arrives; over 8 MiB is a 413 naming the limit. */
async function writeRecording(part: MultipartFile, uploads: RecordingUploads, declared: number | undefined): Promise<RecordingFile> {
  const folder = await JobFolder.create(uploads.config.stateDir, 'transcription', { room: uploads.uploads, maxBytes: TRANSCRIPTION_WAV.maxBytes, declared });
  try {
    const file = await folder.write('recording.wav', part.file as AsyncIterable<Buffer>);
    if (part.file.truncated) {
      throw errors.tooLarge(`The file is larger than ${TRANSCRIPTION_WAV.maxBytes} bytes (8 MiB), the limit for a recording.`, 'file');
    }
    return new RecordingFile(folder, file);
  } catch (error) {
    await folder.remove();
    throw error;
  }
}

/** How the clients of the inference API send a recording as a form with a length. */
const CLIENT_UPLOAD = ': with the openai client, `file: await toFile(await fs.promises.readFile(path), "name.wav")`; with curl, `-F file=@name.wav`';

export const noFile = () => errors.invalidValue('file', "The field 'file' is required: a PCM16 WAV recording, mono, 16 kHz.");

/**
 * Reads a multipart recording form: at most one file, in the field `file`, and the `accepted`
 * text fields; a field of `refused` is a 400 with its rule, any other an unknown parameter. The
 * caller removes the recording (on an error here it is removed already).
 */
export async function readRecordingForm(
  request: FastifyRequest,
  uploads: RecordingUploads,
  accepted: readonly string[],
  refused: ReadonlyMap<string, Refusal> = new Map(),
  arrays: ReadonlySet<string> = new Set(),
): Promise<{ fields: Record<string, string>; file: RecordingFile | undefined }> {
  if (!request.isMultipart()) {
    throw errors.mediaType(
      `Send the recording as multipart/form-data (fields ${[...accepted, 'file'].join(', ')})${request.url.startsWith('/v1/') ? CLIENT_UPLOAD : ''}.`,
    );
  }
  let file: RecordingFile | undefined;
  try {
    return await readForm(request, undefined, async (parts) => {
      const fields: Record<string, string> = {};
      for await (const part of parts) {
        if (part.type === 'file') {
          if (part.fieldname !== 'file') throw errors.unknownParameter(part.fieldname);
          if (file) throw errors.invalidValue('file', 'Send exactly one file.');
          file = await writeRecording(part, uploads, declaredLength(request));
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
      // Whole: the job may wait with its recording on disk, which the free space counts already.
      file?.folder.settle();
      return { fields, file };
    });
  } catch (error) {
    await file?.remove();
    throw error;
  }
}

/**
 * The form's text fields as `schema` reads them, or the 400 of the first one it refuses, naming
 * the field and saying the rule (the schema's messages are whole sentences).
 */
export function formFields<S extends z.ZodType>(schema: S, fields: Record<string, string>): z.output<S> {
  const parsed = schema.safeParse(fields);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw errors.invalidValue(issue?.path.map(String).join('.') || null, issue?.message ?? 'Invalid form.');
}

/** The language a form names (de, en, auto), or undefined when it names none. */
export function requestedLanguage(value: string | undefined): SttLanguage | undefined {
  if (value === undefined) return undefined;
  const parsed = sttLanguageField.safeParse(value);
  if (!parsed.success) throw errors.invalidValue('language', parsed.error.issues[0]?.message ?? 'language must be de, en or auto.');
  return parsed.data;
}
