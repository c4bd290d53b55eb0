// An upload is accepted only when the disk has room for the most it may write, beside
// what the uploads already accepted may still write, plus a margin for the state writes (20 held
// image edits used to put 800 MiB into jobs/ unchecked). A refusal is 507 insufficient_storage
// with Retry-After, before a byte of the upload is kept; a held upload's reservation goes with it.
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { HostFacts, type HostReader } from '../../src/system/host.js';
import { UPLOAD_MARGIN_BYTES } from '../../src/workers/uploadRoom.js';
import { build, TOKEN, type Built } from '../helpers/build.js';
import { BOUNDARY, field, file, form, MULTIPART, uploadRoutes } from '../helpers/form.js';
import { openSocket } from '../helpers/raw.js';
import { until } from '../helpers/until.js';

const CRLF = '\r\n';
const MIB = 1024 * 1024;

/** The state directory's disk as statfs reports it: `free` bytes. */
function disk(b: Built, free: () => number) {
  b.service.host = new HostFacts(b.stateDir, {} as HostReader, Date.now, async () => ({ bavail: free(), bsize: 1 }));
}

const jobFolders = async (b: Built) => readdir(path.join(b.stateDir, 'jobs')).catch(() => [] as string[]);

t.test('a disk without room refuses transcriptions and image edits with 507, keeping nothing', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  disk(b, () => UPLOAD_MARGIN_BYTES + 4 * MIB);
  for (const [name, send] of uploadRoutes(b)) {
    const answer = await send();
    t.equal(answer.status, 507, `${name}: 507`);
    t.equal(answer.headers.get('retry-after'), '30', `${name}: with Retry-After`);
    t.match(await answer.json(), { error: { type: 'server_error', code: 'insufficient_storage', message: /Not enough free disk space .* 512 MiB are kept free; 516 MiB are free/ } }, `${name}: naming the numbers`);
  }
  t.same(await jobFolders(b), [], 'no job folder was left');
});

t.test('held uploads reserve their most: the next is refused until one goes', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // Room for the margin and one recording (8 MiB) with a little to spare, not for two.
  disk(b, () => UPLOAD_MARGIN_BYTES + 12 * MIB);
  const held = await openSocket(b.apiUrl());
  const head = field('model', 'x') + `--${BOUNDARY}${CRLF}Content-Disposition: form-data; name="file"; filename="a.wav"${CRLF}${CRLF}RIFF`;
  held.socket.write(`POST /v1/audio/transcriptions HTTP/1.1${CRLF}Host: 127.0.0.1${CRLF}Authorization: Bearer ${TOKEN}${CRLF}Content-Type: multipart/form-data; boundary=${BOUNDARY}${CRLF}Content-Length: ${head.length + 1000}${CRLF}${CRLF}${head}`);
  await until('the held upload to have its folder', async () => ((await jobFolders(b)).length === 1 ? true : undefined));
  t.equal(b.service.uploads.reserved, 8 * MIB, 'it reserved a whole recording');
  const second = await b.api('POST', '/v1/audio/transcriptions', form([field('model', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART);
  t.equal(second.status, 507, 'a second upload does not fit beside it');
  held.socket.destroy();
  await until('the held upload to be gone', async () => ((await jobFolders(b)).length === 0 && b.service.uploads.reserved === 0 ? true : undefined));
  const third = await b.api('POST', '/v1/audio/transcriptions', form([field('model', 'x'), file('file', 'RIFF....WAVE')]), MULTIPART);
  t.not(third.status, 507, `once it went, the next is read (${third.status})`);
  t.equal(b.service.uploads.reserved, 0, 'and gives its room back when answered');
});
