// Reading a multipart form (transcriptions, image edits, the admin transcription test). What the
// form parser refuses is the client's mistake, never a 500: no boundary or one it cannot search
// for, a body cut short, a part without its headers. A non-empty body in which no part was found
// (the boundary in Content-Type is not the one in the body) is malformed too, not an empty form.
// Limits (FST_* codes) stay as they are: the route or the error handler names them.
import type { Multipart } from '@fastify/multipart';
import type { FastifyRequest } from 'fastify';
import { ApiError, errors } from '../errors.js';

type PartsOptions = Parameters<FastifyRequest['parts']>[0];

const malformed = (detail: string) => errors.invalidValue(null, `The multipart body is malformed: ${detail}.`);

/** Runs `read` over the request's parts; the parser's own failures become a 400. */
export async function readForm<T>(request: FastifyRequest, options: PartsOptions, read: (parts: AsyncIterable<Multipart>) => Promise<T>): Promise<T> {
  let seen = 0;
  async function* counted() {
    for await (const part of request.parts(options)) {
      seen += 1;
      yield part;
    }
  }
  try {
    const result = await read(counted());
    if (seen === 0 && Number(request.headers['content-length'] ?? 0) > 0) throw malformed('no part found: the boundary in Content-Type does not match the body');
    return result;
  } catch (error) {
    if (error instanceof ApiError || (error as { code?: string }).code?.startsWith('FST_')) throw error;
    throw malformed((error as Error).message);
  }
}
