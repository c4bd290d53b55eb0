// Reading a multipart form (transcriptions, image edits, the admin transcription test). What the
// form parser refuses is the client's mistake, never a 500: no boundary or one it cannot search
// for, a body cut short, a part without its headers. A non-empty body in which no part was found
// (the boundary in Content-Type is not the one in the body) is malformed too, not an empty form.
// Limits (FST_* codes) stay as they are: the route or the error handler names them. A failure of
// the file system while an upload is written is no client mistake: a full disk or quota is 507
// insufficient_storage, anything else the error handler's 500, and neither names a path.
import type { Multipart } from '@fastify/multipart';
import type { FastifyRequest } from 'fastify';
import { ApiError, errors } from '../errors.js';

type PartsOptions = Parameters<FastifyRequest['parts']>[0];

const malformed = (detail: string) => errors.invalidValue(null, `The multipart body is malformed: ${detail}.`);

/** The length of the request's body as its Content-Length declares it, or undefined without one. */
export function declaredLength(request: FastifyRequest): number | undefined {
  const declared = Number(request.headers['content-length']);
  return request.headers['content-length'] !== undefined && Number.isSafeInteger(declared) && declared >= 0 ? declared : undefined;
}

/** A failure of the file system (node:fs throws them with an errno and the system call that failed). */
function fileSystemFailure(error: unknown): NodeJS.ErrnoException | undefined {
  const failure = error as NodeJS.ErrnoException;
  return error instanceof Error && typeof failure.errno === 'number' && typeof failure.syscall === 'string' ? failure : undefined;
}

/**
 * What an upload's file system failure answers: 507 `insufficient_storage` when the disk or the
 * quota is full (ENOSPC, EDQUOT); any other is thrown on as it is, for the error handler's 500
 * (which logs it and names no path). Anything else is not a disk's failure: undefined.
 */
export function diskFailure(error: unknown): unknown {
  const failure = fileSystemFailure(error);
  if (!failure) return undefined;
  if (failure.code === 'ENOSPC' || failure.code === 'EDQUOT') {
    const full = failure.code === 'ENOSPC' ? 'the disk is full' : 'the disk quota of the service is used up';
    return errors.insufficientStorage(`The upload could not be written: ${full}. Nothing of it is kept; retry later.`);
  }
  return failure;
}

/** Runs `read` over the request's parts; the parser's own failures become a 400, the disk's a 507 or 500. */
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
    throw diskFailure(error) ?? malformed((error as Error).message);
  }
}
