// A disk that fails while an upload is written is the service's failure, not the client's: a full
// disk or quota (ENOSPC, EDQUOT) answers 507 insufficient_storage with Retry-After, any other
// failure of the file system a 500 internal_error; neither answer names a path, and neither is the
// 400 of a malformed multipart body.
import { createWriteStream } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import fastifyMultipart from '@fastify/multipart';
import Fastify from 'fastify';
import t from 'tap';
import { installErrorHandling } from '../../src/routes/errors.js';
import { readForm } from '../../src/routes/multipart.js';
import { build } from '../helpers/build.js';
import { field, file, form, MULTIPART, uploadRoutes } from '../helpers/form.js';


/** An errno error as node:fs throws it. */
const systemError = (code: string, errno: number, syscall: string, at?: string) =>
  Object.assign(new Error(`${code}: failed, ${syscall}${at ? ` '${at}'` : ''}`), { code, errno, syscall, ...(at ? { path: at } : {}) });

t.test('a full disk or quota while a form is read is 507 insufficient_storage, any other disk failure 500, no path named', async (t) => {
  const app = Fastify();
  t.teardown(() => app.close());
  installErrorHandling(app);
  await app.register(fastifyMultipart);
  let failure: Error | undefined;
  app.post('/upload', async (request) =>
    readForm(request, undefined, async (parts) => {
      for await (const part of parts) {
        if (part.type !== 'file') continue;
        if (failure) throw failure;
        // /dev/full: every write fails with the kernel's own ENOSPC.
        await pipeline(part.file, createWriteStream('/dev/full'));
      }
      return { ok: true };
    }),
  );
  const send = () => app.inject({ method: 'POST', url: '/upload', headers: MULTIPART, payload: form([field('model', 'x'), file('file', 'x'.repeat(64 * 1024))]) });

  const full = await send();
  t.equal(full.statusCode, 507, 'ENOSPC from a real write: 507');
  t.equal(full.headers['retry-after'], '30', 'with Retry-After');
  t.match(full.json(), { error: { type: 'server_error', code: 'insufficient_storage', message: /the disk is full.*retry later/ } });

  failure = systemError('EDQUOT', -122, 'write');
  const quota = await send();
  t.equal(quota.statusCode, 507, 'EDQUOT: 507');
  t.match(quota.json(), { error: { code: 'insufficient_storage', message: /quota/ } });

  failure = systemError('EIO', -5, 'open', '/var/lib/service-deck/jobs/transcription-1/recording.wav');
  const broken = await send();
  t.equal(broken.statusCode, 500, 'EIO: 500');
  t.match(broken.json(), { error: { type: 'server_error', code: 'internal_error' } });
  t.notMatch(broken.body, /service-deck|jobs|EIO/, 'the answer names neither the path nor the failure');
});

t.test('a job folder that cannot be made is a 500 that names no path, on every upload route', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // Where the job folders go is no folder now: mkdir fails with ENOTDIR.
  const jobs = path.join(b.stateDir, 'jobs');
  await rename(jobs, `${jobs}.moved`);
  await writeFile(jobs, '');
  for (const [name, send] of uploadRoutes(b)) {
    const answer = await send();
    const text = await answer.text();
    t.equal(answer.status, 500, `${name}: 500, not a malformed form`);
    t.match(JSON.parse(text), { error: { type: 'server_error', code: 'internal_error' } }, `${name}: internal_error`);
    t.notOk(text.includes(b.stateDir) || text.includes('ENOTDIR'), `${name}: no path or system error in the answer`);
  }
  t.ok(b.logLines.some((line) => line.includes('ENOTDIR')), 'the log has the cause');
});
