// Image-edit uploads are streamed into their job's private folder, never held in memory: while
// several uploads are held open before their last bytes, what they sent is already
// on disk (0700 folders, 0600 files) and the service's memory does not grow with it; a `model`
// sent before the images is checked before they are read, and an image's first bytes before its
// rest; every refusal and a client that leaves mid-upload leave no folder behind.
import { readdir, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const BOUNDARY = 'deck-upload-boundary';
const MiB = 1024 * 1024;
/** A PNG's signature and IHDR (64x64): the size a reference declares is read from it. */
const PNG_HEAD = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]),
  Buffer.from('IHDR', 'latin1'),
  Buffer.from([0, 0, 0, 64, 0, 0, 0, 64, 8, 2, 0, 0, 0, 0, 0, 0, 0]),
]);

const field = (name: string, value: string) => Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`);
const fileHeader = (n: number) => Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="image[]"; filename="r${n}.png"\r\nContent-Type: image/png\r\n\r\n`);

const imagePart = (n: number, head: Buffer, bytes: number) => ({ header: fileHeader(n), head, bytes, tail: Buffer.from('\r\n') });
const END = Buffer.from(`--${BOUNDARY}--\r\n`);

/** The Content-Length of a form of text fields and images of `bytes` each (chunked bodies are refused). */
const formLength = (fields: Buffer[], images: Array<ReturnType<typeof imagePart>>) =>
  fields.reduce((sum, f) => sum + f.length, 0) + images.reduce((sum, i) => sum + i.header.length + i.bytes + i.tail.length, 0) + END.length;

/** A multipart edit of `length` bytes sent by hand, a piece at a time: the answer may come while the body is still open. */
function openUpload(b: Built, length: number) {
  const url = new URL(`${b.apiUrl()}/v1/images/edits`);
  const request = http.request({
    host: url.hostname,
    port: url.port,
    path: url.pathname,
    method: 'POST',
    agent: false,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': `multipart/form-data; boundary=${BOUNDARY}`, 'content-length': String(length) },
  });
  let closed = false;
  request.on('error', () => undefined);
  request.on('close', () => {
    closed = true;
    request.emit('drain');
  });
  const answered = new Promise<{ status: number; body: string }>((resolve) => {
    request.on('response', (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      response.on('error', () => resolve({ status: response.statusCode ?? 0, body }));
    });
  });
  return {
    answered,
    /** Resolves once the chunk may be followed by the next (at once after the connection closed). */
    send: (chunk: Buffer) => new Promise<void>((resolve) => (closed || request.write(chunk) ? resolve() : request.once('drain', () => resolve()))),
    leave: () => request.destroy(),
  };
}

async function setUp(t: Test) {
  // Time enough to hold uploads open on a busy machine.
  const b = await build(t, { env: { SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_REQUEST_TIMEOUT_MS: '120000' } });
  await b.startEndpoint();
  const dir = await tempDir(t);
  const model = path.join(dir, 'painter.gguf');
  await writeFile(model, 'ok');
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model, width: 64, height: 64, steps: 2, referenceImages: 4 } });
  const { id } = (await created.json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return b;
}

const jobsOf = (b: Built) => readdir(path.join(b.stateDir, 'jobs'));

/** The bytes on disk in each job folder, with their modes. */
async function onDisk(b: Built) {
  const folders = [];
  for (const name of await jobsOf(b)) {
    const dir = path.join(b.stateDir, 'jobs', name);
    const files = await readdir(dir).catch(() => [] as string[]);
    const stats = await Promise.all(files.map((file) => stat(path.join(dir, file))));
    folders.push({ mode: (await stat(dir)).mode & 0o777, bytes: stats.reduce((sum, s) => sum + s.size, 0), modes: stats.map((s) => s.mode & 0o777) });
  }
  return folders;
}

t.test('held uploads are on disk in private folders, not in memory, and leave nothing when their clients leave', async (t) => {
  const b = await setUp(t);
  const UPLOADS = 4;
  const IMAGES = 4;
  const IMAGE_BYTES = 8 * MiB;
  const block = Buffer.alloc(MiB, 7);
  // The images come first, as a client may send them; the model after them.
  const images = Array.from({ length: IMAGES }, (_, i) => imagePart(i + 1, PNG_HEAD, IMAGE_BYTES));
  const fields = [field('prompt', 'a lighthouse'), field('model', 'painter')];
  const length = formLength(fields, images);
  const before = process.memoryUsage().rss;
  const started = Date.now();
  const uploads = Array.from({ length: UPLOADS }, () => openUpload(b, length));
  // Each upload stops 1 MiB before the end of its last image.
  await Promise.all(
    uploads.map(async (upload) => {
      for (const [i, image] of images.entries()) {
        await upload.send(image.header);
        await upload.send(image.head);
        const last = i === IMAGES - 1 ? image.bytes - MiB : image.bytes;
        for (let sent = image.head.length; sent < last; sent += MiB) await upload.send(sent + MiB <= last ? block : block.subarray(0, last - sent));
        if (i < IMAGES - 1) await upload.send(image.tail);
      }
    }),
  );
  t.comment(`sent in ${Date.now() - started} ms`);
  const sent = IMAGES * IMAGE_BYTES - MiB;
  const folders = await until('the held uploads to reach the disk', async () => {
    const seen = await onDisk(b);
    return seen.length === UPLOADS && seen.every((f) => f.bytes >= sent - 2 * MiB) ? seen : undefined;
  }, 30_000);
  const grown = (process.memoryUsage().rss - before) / MiB;
  t.ok(folders.every((f) => f.mode === 0o700 && f.modes.length === IMAGES && f.modes.every((m) => m === 0o600)), 'one 0700 folder per upload, its images 0600');
  t.ok(grown < 64, `${UPLOADS} uploads held with ${Math.round((UPLOADS * sent) / MiB)} MiB sent: the service grew by ${Math.round(grown)} MiB`);

  for (const upload of uploads) upload.leave();
  await until('the folders of the uploads that were left to go', async () => ((await jobsOf(b)).length === 0 ? true : undefined), 10_000);
  t.same(await jobsOf(b), [], 'a client that leaves mid-upload leaves no folder');
});

t.test('a model sent first is checked before the images are read; an image by its first bytes', async (t) => {
  const b = await setUp(t);
  const within = <T>(what: string, promise: Promise<T>) =>
    Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer ${what}`)), 5_000))]);

  const image = imagePart(1, PNG_HEAD, MiB);
  const model = field('model', 'no-such-model');
  const unknown = openUpload(b, formLength([model], [image]));
  await unknown.send(model);
  await unknown.send(image.header);
  await unknown.send(Buffer.concat([image.head, Buffer.alloc(64 * 1024)]));
  const refused = await within('while the image is still being sent', unknown.answered);
  t.equal(refused.status, 404, 'an unknown model is refused while its image is still open');
  t.equal((JSON.parse(refused.body) as { error: { code: string } }).error.code, 'model_not_found');
  unknown.leave();

  const gif = imagePart(1, Buffer.from('GIF89a'), MiB);
  const wrong = openUpload(b, formLength([], [gif]));
  await wrong.send(gif.header);
  await wrong.send(Buffer.concat([gif.head, Buffer.alloc(64 * 1024)]));
  const notAnImage = await within('after the first bytes of a GIF', wrong.answered);
  t.equal(notAnImage.status, 400, 'a GIF is refused by its first bytes, the rest unread');
  t.match(notAnImage.body, /not a PNG, JPEG or WebP file by its bytes/);
  wrong.leave();

  await until('no job folder', async () => ((await jobsOf(b)).length === 0 ? true : undefined), 5_000);
  t.same(await jobsOf(b), [], 'the refused uploads left no folder');
});
