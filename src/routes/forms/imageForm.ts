// The multipart form of an image edit and of the enhancer preview: reference images streamed
// into a private job folder (never held in memory), checked by their bytes, and the text fields.
import { open } from 'node:fs/promises';
import type { Multipart, MultipartFile } from '@fastify/multipart';
import { declaredSize } from '../../adapters/png.js';
import type { FastifyRequest } from 'fastify';
import { errors } from '../../errors.js';
import { notOffered } from '../../workers/fields.js';
import { editSchema, IMAGE_LIMITS } from '../../workers/image/image.schema.js';
import { JobFolder } from '../../workers/jobFolder.js';
import type { UploadRoom } from '../../workers/uploadRoom.js';
import { declaredLength, diskFailure, readForm } from '../multipart.js';

/**
 * Checks a form makes while it is read, before the images that follow are: `field` for each text
 * field as it arrives (the edit resolves `model` at once), `image` before the image `count` is
 * read (the profile's reference capability, once the model is known).
 */
export interface FormChecks {
  field?: (name: string, value: string) => Promise<void>;
  image?: (count: number, fields: Readonly<Record<string, string>>) => void;
}

/** The first `bytes` of a file (a JPEG's frame header may follow large metadata: then the whole file). */
async function head(file: string, bytes: number): Promise<Buffer> {
  const handle = await open(file, 'r');
  try {
    const buffer = Buffer.alloc(bytes);
    const { bytesRead } = await handle.read(buffer, 0, bytes, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/**
 * A reference image's declared size, read from its header without decoding it: one that declares
 * more than IMAGE_LIMITS.maxReferenceSide on a side, or no readable size, is refused (a 20 KB PNG
 * may declare 100000x100000 pixels, which sd-cli would try to allocate).
 */
async function checkDeclaredSize(file: string, index: number): Promise<void> {
  const size = declaredSize(await head(file, 256 * 1024)) ?? declaredSize(await head(file, IMAGE_LIMITS.maxReferenceBytes));
  const limit = IMAGE_LIMITS.maxReferenceSide;
  if (!size || size.width === 0 || size.height === 0) throw errors.invalidValue('image', `Image ${index} has no readable width and height in its header: it is damaged or cut off.`);
  if (Math.max(size.width, size.height) > limit) {
    throw errors.invalidValue('image', `Image ${index} declares ${size.width}x${size.height} pixels: at most ${limit} on the long side are accepted; scale it down.`);
  }
}

/** The multipart fields of an edit, as text, and the reference images written into `folder` in order. */
async function readParts(parts: AsyncIterable<Multipart>, allowed: readonly string[], folder: JobFolder, checks: FormChecks) {
  const fields: Record<string, string> = {};
  for await (const part of parts) {
    if (part.fieldname === 'mask') throw errors.invalidValue('mask', notOffered('mask', 'the reference images guide the whole picture') + '.');
    if (part.type === 'file') {
      const file = part as MultipartFile;
      if (file.fieldname !== 'image' && file.fieldname !== 'image[]') throw errors.unknownParameter(file.fieldname);
      const index = folder.references.length + 1;
      checks.image?.(index, fields);
      await folder.addReference(file.file as AsyncIterable<Buffer>, () =>
        errors.invalidValue('image', `Image ${index} (${JSON.stringify(file.filename)}) is not a PNG, JPEG or WebP file by its bytes, whatever its name says.`),
      );
      if (file.file.truncated) throw errors.tooLarge(`Image ${index} is larger than 10 MiB, the limit per reference image.`, 'image');
      await checkDeclaredSize(folder.references.at(-1)!, index);
      continue;
    }
    if (!allowed.includes(part.fieldname)) throw errors.unknownParameter(part.fieldname);
    fields[part.fieldname] = String(part.value);
    await checks.field?.(part.fieldname, fields[part.fieldname]!);
  }
  return fields;
}

/** The text fields an edit takes beside its images. */
export const EDIT_FIELDS = Object.keys(editSchema.shape);

/**
 * A multipart form with reference images (`image[]`, one to four, 10 MiB each, PNG, JPEG or WebP
 * by their bytes) and the text fields `allowed`: the edit route's and the enhancer preview's. The
 * images are streamed into a new private job folder under the state directory, never held in
 * memory, once the folder has reserved disk room for the request's declared length (at most four
 * images; a 507 when the disk has none);
 * the caller removes the folder (on an error here it is removed already).
 */
export async function readImageForm(
  request: FastifyRequest,
  allowed: readonly string[],
  uploads: { config: { stateDir: string }; uploads: UploadRoom },
  checks: FormChecks = {},
): Promise<{ fields: Record<string, string>; images: JobFolder }> {
  const maxBytes = IMAGE_LIMITS.maxReferences * IMAGE_LIMITS.maxReferenceBytes;
  const images = await JobFolder.create(uploads.config.stateDir, 'image', { room: uploads.uploads, maxBytes, declared: declaredLength(request) }).catch((error: unknown) => {
    throw diskFailure(error) ?? error;
  });
  try {
    const fields = await readForm(
      request,
      { limits: { files: IMAGE_LIMITS.maxReferences, fileSize: IMAGE_LIMITS.maxReferenceBytes, fields: 20, fieldSize: IMAGE_LIMITS.maxPromptChars * 4, parts: 24 } },
      (parts) => readParts(parts, allowed, images, checks),
    );
    // Whole: the job may wait with its images on disk, which the free space counts already.
    images.settle();
    return { fields, images };
  } catch (error) {
    await images.remove();
    switch ((error as { code?: string }).code) {
      case 'FST_FILES_LIMIT':
        throw errors.invalidValue('image', `At most ${IMAGE_LIMITS.maxReferences} reference images (image[]) per request.`);
      case 'FST_REQ_FILE_TOO_LARGE':
        throw errors.tooLarge('A reference image is larger than 10 MiB, the limit per image.', 'image');
      case 'FST_PARTS_LIMIT':
      case 'FST_FIELDS_LIMIT':
        throw errors.invalidValue(null, `Too many form fields: this form takes ${allowed.join(', ')} and image[] (one to four).`);
      default:
        throw error;
    }
  }
}
