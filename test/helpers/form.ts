// Multipart bodies written by hand (a boundary the test knows, parts in the order it chooses), and
// the three routes that take an upload, each with a form that names nothing that exists.
import type { Built } from './build.js';

export const BOUNDARY = 'sd-upload-boundary';
const CRLF = '\r\n';
export const MULTIPART = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` };

export const field = (name: string, value: string) => `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"${CRLF}${CRLF}${value}${CRLF}`;
export const file = (name: string, bytes: string) =>
  `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="${name}"; filename="a.bin"${CRLF}Content-Type: application/octet-stream${CRLF}${CRLF}${bytes}${CRLF}`;
export const form = (parts: string[]) => parts.join('') + `--${BOUNDARY}--${CRLF}`;

/** The transcription, the image edit and the operator's transcription test, each sent a small form. */
export const uploadRoutes = (b: Built) =>
  [
    ['transcription', () => b.api('POST', '/v1/audio/transcriptions', form([field('model', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART)],
    ['image edit', () => b.api('POST', '/v1/images/edits', form([field('prompt', 'x'), file('image[]', 'RIFF....WEBP')]), MULTIPART)],
    ['transcription test', () => b.admin('POST', '/api/v1/transcription-tests', form([field('profile_id', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART)],
  ] as const;
