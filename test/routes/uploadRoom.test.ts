// An upload is accepted only when the disk has room for what it declares (its Content-Length, at
// most the most it may write), beside what the uploads already accepted may still write, plus a
// margin for the state writes (20 held image edits used to put 800 MiB into jobs/ unchecked). A
// refusal is 507 insufficient_storage with Retry-After, before a byte of the upload is kept. What
// an upload wrote counts once (the free space has it), nothing once its job waits, and the
// reservation goes with its folder, on every way out.
import { readdir, rename, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { HostFacts, type HostReader } from '../../src/system/host.js';
import { UPLOAD_MARGIN_BYTES } from '../../src/workers/uploadRoom.js';
import { build, TOKEN, type Built } from '../helpers/build.js';
import { BOUNDARY, field, file, form, MULTIPART, uploadRoutes } from '../helpers/form.js';
import { png } from '../helpers/png.js';
import { openSocket } from '../helpers/raw.js';
import { padWav, stalledEngine } from '../helpers/speech.js';
import { until } from '../helpers/until.js';

const CRLF = '\r\n';
const MIB = 1024 * 1024;

/** The state directory's disk as statfs reports it: `free` bytes. */
function disk(b: Built, free: () => number | Promise<number>) {
  b.service.host = new HostFacts(b.stateDir, {} as HostReader, Date.now, async () => ({ bavail: await free(), bsize: 1 }));
}

const jobFolders = async (b: Built) => readdir(path.join(b.stateDir, 'jobs')).catch(() => [] as string[]);

/** Bytes in the files of every job folder: what the uploads have written. */
async function written(b: Built): Promise<number> {
  let bytes = 0;
  for (const folder of await jobFolders(b)) {
    const dir = path.join(b.stateDir, 'jobs', folder);
    for (const name of await readdir(dir).catch(() => [] as string[])) bytes += (await stat(path.join(dir, name)).catch(() => ({ size: 0 }))).size;
  }
  return bytes;
}

/**
 * An upload held open on its own connection: the request's head declaring `declared` bytes of body,
 * and `body` of it sent (the rest never comes).
 */
async function holdUpload(b: Built, route: string, declared: number, body: string) {
  const held = await openSocket(b.apiUrl());
  held.socket.write(`POST ${route} HTTP/1.1${CRLF}Host: 127.0.0.1${CRLF}Authorization: Bearer ${TOKEN}${CRLF}Content-Type: multipart/form-data; boundary=${BOUNDARY}${CRLF}Content-Length: ${declared}${CRLF}${CRLF}${body}`);
  return held;
}

/** The start of a transcription form, up to the first bytes of its file. */
const recordingHead = field('model', 'x') + `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="file"; filename="a.wav"${CRLF}${CRLF}RIFF`;

t.test('a disk without room refuses transcriptions and image edits with 507, keeping nothing', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // Room for the margin and not for the few hundred bytes each of these declares.
  disk(b, () => UPLOAD_MARGIN_BYTES + 100);
  for (const [name, send] of uploadRoutes(b)) {
    const answer = await send();
    t.equal(answer.status, 507, `${name}: 507`);
    t.equal(answer.headers.get('retry-after'), '30', `${name}: with Retry-After`);
    t.match(await answer.json(), { error: { type: 'server_error', code: 'insufficient_storage', message: /Not enough free disk space for this upload: it may need \d KiB, .* 512 MiB are kept free; 512 MiB are free/ } }, `${name}: naming the numbers`);
  }
  t.same(await jobFolders(b), [], 'no job folder was left');
});

t.test('held uploads reserve what they declare: the next is refused until one goes', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // Room for the margin and one recording (8 MiB) with a little to spare, not for two.
  disk(b, async () => UPLOAD_MARGIN_BYTES + 12 * MIB - (await written(b)));
  const declared = recordingHead.length + 8 * MIB;
  const held = await holdUpload(b, '/v1/audio/transcriptions', declared, recordingHead);
  await until('the held upload to have its folder', async () => ((await jobFolders(b)).length === 1 ? true : undefined));
  const reserved = b.service.uploads.reserved;
  t.ok(reserved > 8 * MIB - 1024 && reserved <= 8 * MIB, `it reserved its recording's declared length, at most 8 MiB (${reserved})`);
  const second = await holdUpload(b, '/v1/audio/transcriptions', declared, recordingHead);
  await until('the second upload to be answered', async () => (second.received().includes('\r\n\r\n') ? true : undefined));
  t.match(second.received(), /^HTTP\/1\.1 507 /, 'a second one as large does not fit beside it');
  second.socket.destroy();
  held.socket.destroy();
  await until('the held upload to be gone', async () => ((await jobFolders(b)).length === 0 && b.service.uploads.reserved === 0 ? true : undefined));
  const third = await b.api('POST', '/v1/audio/transcriptions', form([field('model', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART);
  t.not(third.status, 507, `once it went, the next is read (${third.status})`);
  t.equal(b.service.uploads.reserved, 0, 'and gives its room back when answered');
});

t.test('an upload reserves its declared length, not its most: two image edits still waiting for their bytes leave room for a recording', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // 84 MiB beside the margin: two edits at their most (40 MiB each) would leave 4, less than a recording.
  disk(b, () => UPLOAD_MARGIN_BYTES + 84 * MIB);
  const edits = [await holdUpload(b, '/v1/images/edits', 2048, ''), await holdUpload(b, '/v1/images/edits', 2048, '')];
  await until('both edits to have their folders', async () => ((await jobFolders(b)).length === 2 ? true : undefined));
  t.equal(b.service.uploads.reserved, 2 * 2048, 'each holds the 2 KiB it declares');
  const recording = await b.api('POST', '/v1/audio/transcriptions', form([field('model', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART);
  t.not(recording.status, 507, `a transcription is read beside them (${recording.status})`);
  for (const edit of edits) edit.socket.destroy();
  await until('the edits to be gone', async () => ((await jobFolders(b)).length === 0 && b.service.uploads.reserved === 0 ? true : undefined));
});

t.test('a recording whose job waits counts once: by the free space, not by its reservation too', async (t) => {
  const dir = t.testdir();
  const engine = await stalledEngine(dir);
  const b = await build(t, { env: { SERVICE_DECK_POCKETSPHINX: engine.binary, SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id: ((await created.json()) as { id: string }).id, enabled: true })).status, 200);
  // 20 MiB beside the margin, less what the uploads wrote.
  disk(b, async () => UPLOAD_MARGIN_BYTES + 20 * MIB - (await written(b)));
  const recording = (size: number) => form([field('model', 'listener'), file('file', padWav(encodeWav(new Int16Array(16_000), 16_000), size).toString('latin1'))]);
  const send = (size: number) => b.api('POST', '/v1/audio/transcriptions', Buffer.from(recording(size), 'latin1'), MULTIPART);
  const queue = async () => ((await (await b.admin('GET', '/api/v1/endpoint')).json()) as { queue: { running: unknown[]; waiting: unknown[] } }).queue;
  // One runs (the engine holds it), one waits: 14 MiB on disk, 6 MiB left beside the margin.
  const first = send(7 * MIB);
  await until('the first to run', async () => (engine.asked() ? true : undefined));
  const second = send(7 * MIB);
  await until('the second to wait', async () => ((await queue()).waiting.length === 1 ? true : undefined));
  t.equal(b.service.uploads.reserved, 0, 'the uploads are whole: they may write nothing more');
  let answered: number | undefined;
  const third = send(5 * MIB).then((answer) => (answered = answer.status));
  await until('the third to wait or be answered', async () => (answered !== undefined || (await queue()).waiting.length === 2 ? true : undefined));
  t.equal(answered, undefined, `a 5 MiB recording fits in the 6 MiB left and waits too (answered: ${answered})`);
  await engine.go();
  t.same(await Promise.all([first, second].map(async (answer) => (await answer).status)), [200, 200]);
  await third;
  t.equal(answered, 200);
  await until('every folder to be gone', async () => ((await jobFolders(b)).length === 0 && b.service.uploads.reserved === 0 ? true : undefined));
});

t.test('a reservation goes back even when its folder cannot be removed', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  disk(b, () => UPLOAD_MARGIN_BYTES + 100 * MIB);
  const held = await holdUpload(b, '/v1/audio/transcriptions', recordingHead.length + 1000, recordingHead);
  await until('the held upload to have its folder', async () => ((await jobFolders(b)).length === 1 ? true : undefined));
  t.ok(b.service.uploads.reserved > 0, 'it holds its room');
  // Where its folder was is no folder now: rm fails with ENOTDIR.
  const jobs = path.join(b.stateDir, 'jobs');
  await rename(jobs, `${jobs}.moved`);
  await writeFile(jobs, '');
  held.socket.destroy();
  await until('its room to go back', async () => (b.service.uploads.reserved === 0 ? true : undefined), 10_000);
  t.pass('the reservation went with the failed removal');
});

t.test('a failed image edit or enhancer preview gives its room back, whether the form or the route refused it', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  disk(b, () => UPLOAD_MARGIN_BYTES + 100 * MIB);
  const image = (bytes: string) => file('image[]', bytes);
  const body = (parts: string[]) => Buffer.from(form(parts), 'latin1');
  const cases = [
    ['an edit with a file that is no image', () => b.api('POST', '/v1/images/edits', body([field('prompt', 'x'), image('not an image at all')]), MULTIPART), 400],
    ['an edit of a model that does not exist', () => b.api('POST', '/v1/images/edits', body([field('prompt', 'x'), image(png().toString('latin1')), field('model', 'nope')]), MULTIPART), 404],
    ['a preview with a file that is no image', () => b.admin('POST', '/api/v1/prompt-enhancers/preview', body([field('profile_id', 'x'), field('prompt', 'x'), image('not an image at all')]), MULTIPART), 400],
    ['a preview for a profile that does not exist', () => b.admin('POST', '/api/v1/prompt-enhancers/preview', body([field('profile_id', 'nope'), field('prompt', 'x'), image(png().toString('latin1'))]), MULTIPART), 404],
  ] as const;
  for (const [name, send, status] of cases) {
    const answer = await send();
    t.equal(answer.status, status, `${name}: ${status}`);
    t.equal(b.service.uploads.reserved, 0, `${name}: no room held`);
    t.same(await jobFolders(b), [], `${name}: no folder left`);
  }
});
