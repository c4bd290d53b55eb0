// CONTRACT section 10, the model pulls through the admin API, against the local hub
// (test/helpers/hub.ts): a pull answered 202, followed in GET and the console's event stream,
// verified, then listed among the model files; names refused before the hub is asked; no room is
// a 507 before a byte or a folder is written; a restart mid-pull resumes from the partial file,
// the hub serving only the rest; the token goes to the hub origin only, never past the redirect
// to the CDN, never to the log, and a gated repository without it is a 502 naming the 401; and one
// copy of a file with the prompt enhancers, whichever of the two fetched it first.
import { randomBytes } from 'node:crypto';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { writeTinyModel } from '../../src/adapters/tinyModel.js';
import { HostFacts } from '../../src/system/host.js';
import type { ModelFilesView } from '../../src/system/models/modelFiles.js';
import type { PullView } from '../../src/system/models/modelPulls.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { startHub, type Hub, writeTinyRecipes } from '../helpers/hub.js';
import { until } from '../helpers/until.js';

const REPO = 'test-org/tiny-chat';
const TOKEN = 'hf_pull_secret_token_0123456789abcdef';

interface ErrorBody {
  error: { code: string; type: string; message: string; param: string | null };
}

const byteGets = (hub: Hub) => hub.requests.filter((r) => r.method === 'GET' && r.url.startsWith('/cdn/'));
const pullsOf = async (b: Built) => ((await (await b.admin('GET', '/api/v1/model-pulls')).json()) as { pulls: PullView[] }).pulls;
/** Waits until the pull `id` has ended, and answers it as GET lists it. */
const ended = (b: Built, id: string) =>
  until(`pull ${id} ended`, async () => {
    const pull = (await pullsOf(b)).find((p) => p.id === id);
    return pull && pull.state !== 'downloading' ? pull : undefined;
  });

/** The console's event stream, read from now on: every frame, in order. */
function events(t: Test, b: Built): Array<{ event: string; data: unknown }> {
  const frames: Array<{ event: string; data: unknown }> = [];
  const abort = new AbortController();
  t.teardown(() => abort.abort());
  void (async () => {
    const response = await fetch(`${b.adminUrl}/api/v1/events`, { headers: { 'x-service-deck': '1', cookie: b.session().cookie }, signal: abort.signal });
    let pending = '';
    for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
      pending += Buffer.from(chunk).toString('utf8');
      for (let end = pending.indexOf('\n\n'); end >= 0; end = pending.indexOf('\n\n')) {
        const block = pending.slice(0, end);
        pending = pending.slice(end + 2);
        const event = /^event: (.+)$/m.exec(block)?.[1];
        if (event) frames.push({ event, data: JSON.parse(/^data: (.+)$/m.exec(block)?.[1] ?? 'null') });
      }
    }
  })().catch(() => undefined);
  return frames;
}

t.test('a pull: 202, followed in GET and the event stream, verified, then one of the model files', async (t) => {
  const dir = await tempDir(t);
  const model = await readFile(await writeTinyModel(path.join(dir, 'tiny.gguf')));
  const hub = await startHub(t);
  const entry = hub.put(REPO, 'main', 'tiny-F32.gguf', model);
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  const frames = events(t, b);
  await until('the snapshot', async () => frames.find((f) => f.event === 'pulls'));
  t.same(frames.find((f) => f.event === 'pulls')?.data, { pulls: [] });

  const res = await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'tiny-F32.gguf' });
  t.equal(res.status, 202);
  const pull = (await res.json()) as PullView;
  t.same(Object.keys(pull).sort(), ['bytes_done', 'bytes_total', 'created_at', 'error', 'file', 'id', 'path', 'rate_bytes_per_s', 'repo', 'revision', 'sha256', 'state', 'updated_at', 'waiting']);
  t.match(pull, { repo: REPO, revision: 'main', path: 'tiny-F32.gguf', state: 'downloading', bytes_total: model.length, error: null, file: null });
  const file = path.join(b.stateDir, 'models', REPO, 'tiny-F32.gguf');
  t.match(await ended(b, pull.id), { state: 'done', bytes_done: model.length, file, sha256: entry.sha256, error: null });
  t.ok((await readFile(file)).equals(model));
  await until('the done pull on the event stream', async () => frames.find((f) => f.event === 'pulls' && (f.data as { pulls: PullView[] }).pulls[0]?.state === 'done'));

  const listed = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  t.match(
    listed.files.find((f) => f.path === file),
    { bytes: model.length, format: 'gguf', facts: { architecture: 'llama' }, error: null },
    'the pulled file is one of the model files, its header read',
  );

  const gets = byteGets(hub).length;
  const again = await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, revision: 'main', path: 'tiny-F32.gguf' });
  t.equal(again.status, 202);
  t.match(await again.json(), { id: pull.id, state: 'done', file }, 'pulled again: done at once');
  t.equal(byteGets(hub).length, gets, 'without a byte');

  const cancelDone = await b.admin('POST', `/api/v1/model-pulls/${pull.id}/cancel`, {});
  t.equal(cancelDone.status, 409);
  t.match(((await cancelDone.json()) as ErrorBody).error, { type: 'conflict', code: 'pull_ended' });
  const unknown = await b.admin('POST', '/api/v1/model-pulls/pull-0123456789ab/cancel', {});
  t.equal(unknown.status, 404);
  t.match(((await unknown.json()) as ErrorBody).error, { type: 'invalid_request_error', code: 'pull_not_found', message: /pull-0123456789ab/ });

  // A pull held by the hub is refused a second time, and its cancel removes the partial file.
  const slow = hub.put(REPO, 'main', 'held.gguf', randomBytes(500_000));
  let release = () => {};
  hub.options.gate = new Promise((resolve) => (release = resolve));
  t.teardown(() => release());
  const held = (await (await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'held.gguf' })).json()) as PullView;
  const running = await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'held.gguf' });
  t.equal(running.status, 409);
  t.match(((await running.json()) as ErrorBody).error, { type: 'conflict', code: 'pull_running' });
  const partial = path.join(b.stateDir, 'models', REPO, 'held.gguf.part');
  await until('the first bytes of the held pull', async () => (((await stat(partial).catch(() => null))?.size ?? 0) > 0 ? true : undefined));
  const cancelled = await b.admin('POST', `/api/v1/model-pulls/${held.id}/cancel`, {});
  t.equal(cancelled.status, 200);
  t.match(await cancelled.json(), { id: held.id, state: 'cancelled', bytes_total: slow.size });
  t.notOk(await stat(partial).catch(() => null), 'the partial file is removed');
  t.same((await pullsOf(b)).map((p) => [p.path, p.state]), [['held.gguf', 'cancelled'], ['tiny-F32.gguf', 'done']], 'newest first');
});

t.test('names that are not plain, and files that are no model, are refused before the hub is asked', async (t) => {
  const hub = await startHub(t);
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  for (const body of [
    { repo: REPO, path: '../../etc/passwd.gguf' },
    { repo: REPO, path: '/abs/model.gguf' },
    { repo: REPO, path: 'a//b.gguf' },
    { repo: REPO, path: './a.gguf' },
    { repo: REPO, path: 'sub/../a.gguf' },
    { repo: REPO, path: '' },
    { repo: REPO, revision: '..', path: 'a.gguf' },
    { repo: '../x', path: 'a.gguf' },
    { repo: 'just-a-name', path: 'a.gguf' },
    { repo: REPO, path: 'README.md' },
    { repo: REPO, path: 'model.safetensors' },
    { repo: REPO, path: 'ggml-tiny.bin.part' },
  ]) {
    const res = await b.admin('POST', '/api/v1/model-pulls', body);
    t.equal(res.status, 400, JSON.stringify(body));
    t.equal(((await res.json()) as ErrorBody).error.code, 'invalid_value', JSON.stringify(body));
  }
  // Without the admin session, nothing either.
  const anonymous = (method: string, url: string) =>
    fetch(`${b.adminUrl}${url}`, { method, headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, ...(method === 'POST' ? { body: JSON.stringify({ repo: REPO, path: 'a.gguf' }) } : {}) });
  for (const [method, url] of [['POST', '/api/v1/model-pulls'], ['GET', '/api/v1/model-pulls'], ['POST', '/api/v1/model-pulls/pull-0123456789ab/cancel']] as const) {
    t.equal((await anonymous(method, url)).status, 401, `${method} ${url} without a session`);
  }
  t.same(hub.requests, [], 'the hub was never asked');
  t.same(await readdir(path.join(b.stateDir, 'models')), [], 'nothing was written');
});

t.test('a disk without room is a 507 before any byte or folder is written', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'model.gguf', randomBytes(2_000_000));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  // The file and the 512 MiB margin, less one MiB.
  const free = 2_000_000 + 512 * 2 ** 20 - 2 ** 20;
  b.service.host = new HostFacts(b.stateDir, b.service.host.reader, Date.now, async () => ({ bavail: free / 1024, bsize: 1024 }));
  const res = await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'model.gguf' });
  t.equal(res.status, 507);
  t.match(((await res.json()) as ErrorBody).error, { type: 'server_error', code: 'insufficient_storage', message: /not enough free disk space .*0\.5 GiB to spare/ });
  t.same(await readdir(path.join(b.stateDir, 'models')), [], 'nothing under <state>/models: no folder, no partial, no record');
  t.same(hub.requests.map((r) => r.method), ['HEAD', 'HEAD'], 'the hub was asked the size only (the resolve answer and its redirect), no GET');
  t.same(await pullsOf(b), []);
});

t.test('a restart mid-pull resumes from the partial file: the hub serves only the rest', async (t) => {
  const stateDir = await tempDir(t);
  const hub = await startHub(t);
  const bytes = randomBytes(1_000_000);
  const entry = hub.put(REPO, 'main', 'big.gguf', bytes);
  let release = () => {};
  hub.options.gate = new Promise((resolve) => (release = resolve));
  t.teardown(() => release());
  const env = { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' };
  const first = await build(t, { stateDir, env });
  const pull = (await (await first.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'big.gguf' })).json()) as PullView;
  const partial = path.join(stateDir, 'models', REPO, 'big.gguf.part');
  const chunk = hub.options.chunkBytes;
  await until('the first chunk on disk', async () => (((await stat(partial).catch(() => null))?.size ?? 0) === chunk ? true : undefined));
  const sentBefore = hub.sent();
  await first.service.shutdown();
  t.equal((await stat(partial)).size, chunk, 'the partial file stays');
  const record = JSON.parse(await readFile(path.join(stateDir, 'models', 'pulls.json'), 'utf8')) as { pulls: PullView[] };
  t.match(record.pulls, [{ id: pull.id, state: 'downloading' }], 'on record as downloading');

  // The held answer stays held: the next start asks again.
  hub.options.gate = null;
  const second = await build(t, { stateDir, env });
  t.match(await ended(second, pull.id), { state: 'done', sha256: entry.sha256, bytes_done: bytes.length }, 'resumed by itself, under its id');
  t.ok((await readFile(path.join(stateDir, 'models', REPO, 'big.gguf'))).equals(bytes));
  t.equal(byteGets(hub).at(-1)?.range, `bytes=${chunk}-`, 'the resume asked for the rest');
  t.equal(hub.sent() - sentBefore, bytes.length - chunk, 'and the hub served only the rest');
  t.ok(second.logLines.some((l) => l.includes('model pull resumed after a restart')));
});

t.test('the token goes to the hub origin only, never past the redirect to the CDN, never to the log; without it a gated repository is a 502', async (t) => {
  const hub = await startHub(t);
  const bytes = randomBytes(300_000);
  hub.put(REPO, 'main', 'gated.gguf', bytes);
  hub.gate(REPO, TOKEN);
  const port = new URL(hub.url).port;
  // The CDN is another origin of the same server, as the real hub's CDN is another host.
  hub.options.cdnOrigin = `http://localhost:${port}`;

  const without = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  const refused = await without.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'gated.gguf' });
  t.equal(refused.status, 502);
  t.match(((await refused.json()) as ErrorBody).error, { type: 'server_error', code: 'hub_refused', message: /answered 401/ });
  t.same(await readdir(path.join(without.stateDir, 'models')), [], 'nothing written');

  hub.requests.length = 0;
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_HUB_TOKEN: TOKEN } });
  const res = await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'gated.gguf' });
  t.equal(res.status, 202);
  const pull = (await res.json()) as PullView;
  t.match(await ended(b, pull.id), { state: 'done' }, 'the token opens the gated file');
  const toHub = hub.requests.filter((r) => r.host === `127.0.0.1:${port}`);
  const toCdn = hub.requests.filter((r) => r.host === `localhost:${port}`);
  t.same(toHub.map((r) => r.method), ['HEAD', 'GET'], 'the hub was asked for the size and the file');
  t.ok(toHub.every((r) => r.authorization === `Bearer ${TOKEN}`), 'each time with the token');
  t.same(toCdn.map((r) => [r.method, r.authorization]), [['HEAD', undefined], ['GET', undefined]], 'the CDN never got it');
  t.ok(b.logLines.some((line) => line.includes('model pull done')), 'the pull is in the log');
  t.notOk([...b.logLines, ...without.logLines].some((line) => line.includes(TOKEN)), 'the token never is');
  t.notOk(JSON.stringify(await pullsOf(b)).includes(TOKEN), 'nor in the pulls');
});

t.test('a gated prompt enhancer installs with the token of the model hub, and a mirror elsewhere never gets it', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'tiny-Q4.gguf', randomBytes(200_000));
  hub.gate(REPO, TOKEN);
  const dir = await tempDir(t);
  const recipes = path.join(dir, 'recipes.json');
  const recipe = { repo: REPO, revision: 'main', files: [{ path: 'tiny-Q4.gguf', role: 'model' }], context: 2048 };
  await writeFile(recipes, JSON.stringify({ t2i: recipe, i2i: recipe }));
  const port = new URL(hub.url).port;
  const env = { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_HUB_TOKEN: TOKEN };

  // The enhancer hub is another origin than the model hub the token is for: it is not sent there.
  const mirror = await build(t, { env: { ...env, SERVICE_DECK_ENHANCER_HUB: `http://localhost:${port}` } });
  t.equal((await mirror.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' })).status, 202);
  await mirror.service.enhancers.settled();
  t.match(mirror.service.enhancers.view().t2i, { state: 'failed', error: /answered 401/ });
  t.same(hub.requests.map((r) => r.authorization), hub.requests.map(() => undefined), 'no request carried the token');

  const b = await build(t, { env: { ...env, SERVICE_DECK_ENHANCER_HUB: hub.url } });
  t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' })).status, 202);
  await b.service.enhancers.settled();
  t.match(b.service.enhancers.view().t2i, { state: 'installed' }, 'the gated enhancer installs with the token');
  t.notOk([...mirror.logLines, ...b.logLines].some((line) => line.includes(TOKEN)), 'which no log line holds');
});

t.test('one copy with the prompt enhancers: a pull links what an install fetched, an install links what a pull fetched', async (t) => {
  const hub = await startHub(t);
  const model = randomBytes(600_000);
  const mmproj = randomBytes(200_000);
  const modelEntry = hub.put(REPO, 'main', 'tiny-Q4.gguf', model);
  hub.put(REPO, 'main', 'mmproj/tiny-mmproj.gguf', mmproj);
  // The same projector in another repository: found by its sha256 and size.
  const copyEntry = hub.put('other-org/copies', 'main', 'mmproj-copy.gguf', mmproj);
  const dir = await tempDir(t);
  const recipes = await writeTinyRecipes(dir, REPO);
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_GPUS: 'none' } });
  const fetches = (sha256: string) => byteGets(hub).filter((r) => r.url.endsWith(sha256)).length;
  const store = (p: string) => path.join(b.stateDir, 'enhancers', 'files', REPO, 'main', p);
  const pulled = (repo: string, p: string) => path.join(b.stateDir, 'models', repo, p);

  // The install fetches the model; the pull of it then links it.
  t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' })).status, 202);
  await b.service.enhancers.settled();
  t.equal(b.service.enhancers.view().t2i.state, 'installed');
  t.equal(fetches(modelEntry.sha256), 1);
  const pull = (await (await b.admin('POST', '/api/v1/model-pulls', { repo: REPO, path: 'tiny-Q4.gguf' })).json()) as PullView;
  t.match(await ended(b, pull.id), { state: 'done', sha256: modelEntry.sha256, file: pulled(REPO, 'tiny-Q4.gguf') });
  t.equal(fetches(modelEntry.sha256), 1, 'the pull fetched no byte of it');
  t.equal((await stat(pulled(REPO, 'tiny-Q4.gguf'))).ino, (await stat(store('tiny-Q4.gguf'))).ino, 'one file, two names');
  t.ok(b.logLines.some((l) => l.includes('model pull taken from the prompt enhancer store')));

  // The pull fetches the projector (from another repository); the install then links it.
  const copy = (await (await b.admin('POST', '/api/v1/model-pulls', { repo: 'other-org/copies', path: 'mmproj-copy.gguf' })).json()) as PullView;
  t.match(await ended(b, copy.id), { state: 'done', sha256: copyEntry.sha256 });
  t.equal(fetches(copyEntry.sha256), 1);
  t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' })).status, 202);
  await b.service.enhancers.settled();
  t.equal(b.service.enhancers.view().i2i.state, 'installed');
  t.equal(fetches(copyEntry.sha256), 1, 'the install fetched no byte of the projector');
  t.equal(fetches(modelEntry.sha256), 1, 'nor of the model');
  t.equal((await stat(store('mmproj/tiny-mmproj.gguf'))).ino, (await stat(pulled('other-org/copies', 'mmproj-copy.gguf'))).ino, 'one file, two names');
  t.ok((await readFile(store('mmproj/tiny-mmproj.gguf'))).equals(mmproj));
  t.ok(b.logLines.some((l) => l.includes('prompt enhancer file taken from a model pull')));
});
