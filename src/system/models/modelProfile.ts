// CONTRACT section 10, from a model file to a profile: a file that the model folders' listing has
// becomes the body of a new profile (CONTRACT section 4). A GGUF makes a chat profile of it, at the
// operator's context or else at the largest one the memory check forecasts with every layer on the
// GPUs (`profileContext`, on the room the listing's forecast was made on); a whisper.cpp model makes
// an stt profile on whisper.cpp. A path the listing does not name is refused whatever it points at:
// only what the bounded walk of the configured folders found can become a profile.
import { errors } from '../../errors.js';
import type { ModelFileEntry } from './modelFiles.js';
import { profileContext } from './modelForecast.js';

/** What the operator asks for: a file as the listing names it, the profile's name, and perhaps its context. */
export interface FileProfileRequest {
  path: string;
  name: string;
  context?: number | undefined;
}

/** The body of the profile to create, before the profile schema checks it. */
export type FileProfileBody =
  | { name: string; category: 'chat'; params: { model: string; context: number } }
  | { name: string; category: 'stt'; params: { backend: 'whisper.cpp'; model: string } };

/** The file's error, naming the file once (a header's error names it already). */
const unreadable = (path: string, what: string, error: string) => errors.modelUnreadable(`${path} cannot be read as ${what}: ${error.startsWith(`${path}: `) ? error.slice(path.length + 2) : error}`);

/**
 * The profile body a model file makes; an ApiError when it makes none: a path the listing of `dirs`
 * does not have (400), a format that makes no profile (400), a header that cannot be read (422),
 * a context the model was not made for (400), or no room to choose a context on (503).
 */
export function fileProfile(entry: ModelFileEntry | null, request: FileProfileRequest, dirs: readonly string[]): FileProfileBody {
  const { path, name, context } = request;
  if (entry === null) {
    throw errors.invalidValue('path', `${path} is not a model file in the model folders (${dirs.join(', ')}): give a path as GET /api/v1/model-files lists it`);
  }
  const { file, shape, room } = entry;
  if (file.format === 'unknown') throw errors.invalidValue('path', `${path} is no GGUF or whisper.cpp model: only GGUF and whisper files (ggml-*.bin) make profiles`);
  if (file.format === 'whisper') {
    if (file.error !== null) throw unreadable(path, 'a whisper model', file.error);
    if (context !== undefined) throw errors.invalidValue('context', 'a whisper model makes a transcription (stt) profile, which has no context');
    return { name, category: 'stt', params: { backend: 'whisper.cpp', model: path } };
  }
  if (shape === null || file.facts === null) throw unreadable(path, 'a chat model', file.error ?? 'its header lacks what the memory check needs');
  const own = file.facts.context_length;
  if (context !== undefined) {
    if (own !== null && context > own) throw errors.invalidValue('context', `${context} tokens is more than the model's own context of ${own} tokens`);
    return { name, category: 'chat', params: { model: path, context } };
  }
  if (!('room' in room)) throw errors.unavailable('gpu_probe_failed', `No context can be chosen for ${path}: ${room.error}. Give the context yourself ("context").`);
  return { name, category: 'chat', params: { model: path, context: profileContext(room.room, shape, own) } };
}
