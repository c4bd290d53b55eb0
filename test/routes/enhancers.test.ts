// The prompt enhancer installs and the per-profile choice (CONTRACT section 8) against a local hub
// laid out like huggingface.co (test/helpers/hub.ts): install with progress to `installed`, the
// profile's blocker cleared without touching the profile; one install at a time; cancel removes
// the partial files; a disk too small is a clear failure before any byte; a restart mid-install
// says so and the next install resumes with Range; and every refusal of the choice route.
// Both tasks share one copy of a file in the store (`<state>/enhancers/files/<repo>/<revision>/<path>`):
// the second install fetches none of its bytes, a cancel keeps what the other task uses, and an
// install in the layout before the store (one folder per task) is moved into it at start.
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, stat, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { HostFacts, type HostReader } from '../../src/system/host.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { startHub, writeTinyRecipes } from '../helpers/hub.js';
import { until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const REPO = 'test-org/tiny-enhancer';
const MODEL = Buffer.alloc(3 * 1024 * 1024, 7);
const MMPROJ = Buffer.alloc(512 * 1024, 9);

interface Install {
  repo: string;
  state: string;
  bytes_done: number;
  bytes_total: number | null;
  error: string | null;
}
type Installs = { t2i: Install; i2i: Install; preview: unknown };

async function setUp(t: Test, stateDir?: string) {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'tiny-Q4.gguf', MODEL);
  hub.put(REPO, 'main', 'mmproj/tiny-mmproj.gguf', MMPROJ);
  const dir = await tempDir(t);
  const recipes = await writeTinyRecipes(dir, REPO);
  const env = { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_SD_CLI: SD_CLI };
  const b = await build(t, { env, ...(stateDir ? { stateDir } : {}) });
  return { hub, b, env };
}

/** Every file under `dir`, as paths relative to it (none when it does not exist). */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    .sort();
}
/** The store's folder of the test repository at `main`. */
const storeOf = (b: Built) => path.join(b.stateDir, 'enhancers', 'files', REPO, 'main');
/** Whether the t2i folder has come to hold only its install record, and the store no file. */
const onlyRecordLeft = (b: Built) =>
  until(
    'only install.json in the task folder, nothing in the store',
    async () => ((await readdir(path.join(b.stateDir, 'enhancers', 't2i'))).join() === 'install.json' && (await filesUnder(storeOf(b))).length === 0 ? true : undefined),
    10_000,
  ).catch(() => false);
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
/** GET requests the hub had for a file's bytes (its resolve URL, or its CDN blob). */
const fetchesOf = (hub: { requests: Array<{ method: string; url: string }> }, bytes: Buffer) =>
  hub.requests.filter((r) => r.method === 'GET' && r.url.endsWith(`/cdn/${sha256(bytes)}`)).length;
/** The enhancers folder with both tasks installed: each file once in the store, the tasks' records. */
const BOTH_INSTALLED = [
  'files.json',
  'files/test-org/tiny-enhancer/main/mmproj/tiny-mmproj.gguf',
  'files/test-org/tiny-enhancer/main/tiny-Q4.gguf',
  'i2i/install.json',
  'i2i/installed.json',
  't2i/install.json',
  't2i/installed.json',
];

const installs = async (b: Built) => (await (await b.admin('GET', '/api/v1/prompt-enhancers')).json()) as Installs;
const settledIn = (b: Built, task: 't2i' | 'i2i', states: string[]) =>
  until(
    `${task} in ${states.join(' or ')}`,
    async () => {
      const view = (await installs(b))[task];
      return states.includes(view.state) ? view : undefined;
    },
    30_000,
  );

async function imageProfile(b: Built, t: Test) {
  const dir = await tempDir(t);
  const model = path.join(dir, 'sd.gguf');
  await writeFile(model, 'ok');
  const response = await b.admin('POST', '/api/v1/profiles', { name: 'painter', category: 'image', params: { model } });
  return (await response.json()) as { id: string; revision: number };
}

t.test('the official recipes before anything is installed', async (t) => {
  const b = await build(t);
  const view = await installs(b);
  t.same(view.preview, null);
  for (const task of ['t2i', 'i2i'] as const) {
    t.same(view[task], { repo: 'ggml-org/Qwen2.5-VL-32B-Instruct-GGUF', state: 'not_installed', bytes_done: 0, bytes_total: null, error: null, file: null }, task);
  }
});

t.test('install i2i with progress; the profile blocker goes without touching the profile', async (t) => {
  const { b, hub } = await setUp(t);
  const profile = await imageProfile(b, t);
  const chosen = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', { id: profile.id, revision: 1, prompt_enhancer: { t2i: false, i2i: null, device: 'auto' } });
  t.equal(chosen.status, 200);
  const saved = (await chosen.json()) as { revision: number; prompt_enhancer: unknown; executable: boolean; blockers: string[] };
  t.equal(saved.revision, 2);
  t.same(saved.prompt_enhancer, { t2i: null, i2i: REPO, device: 'auto' }, 'null became the recipe repository, false switched t2i off');
  t.same(saved.blockers, [`prompt enhancer not installed: ${REPO} (i2i)`]);

  const started = await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  t.equal(started.status, 202);
  const progress: number[] = [];
  b.service.enhancers.on('change', () => progress.push(b.service.enhancers.view().i2i.bytes_done));
  const done = await settledIn(b, 'i2i', ['installed', 'failed']);
  t.same(done, { repo: REPO, state: 'installed', bytes_done: MODEL.length + MMPROJ.length, bytes_total: MODEL.length + MMPROJ.length, error: null, file: null });
  t.ok(progress.every((n, i) => i === 0 || n >= progress[i - 1]!), 'progress only grows');
  await b.service.enhancers.settled();
  const folder = path.join(b.stateDir, 'enhancers', 'i2i');
  t.same((await readdir(folder)).sort(), ['install.json', 'installed.json'], 'the task folder holds its records');
  const store = storeOf(b);
  t.same(await filesUnder(store), ['mmproj/tiny-mmproj.gguf', 'tiny-Q4.gguf'], 'the files, by repository, revision and path');
  t.equal((await stat(path.join(store, 'tiny-Q4.gguf'))).mode & 0o777, 0o600);
  t.equal((await stat(path.join(store, 'mmproj/tiny-mmproj.gguf'))).mode & 0o777, 0o600);
  for (const dir of [folder, path.join(b.stateDir, 'enhancers', 'files'), store, path.join(store, 'mmproj')]) t.equal((await stat(dir)).mode & 0o777, 0o700, dir);
  t.ok(hub.requests.some((r) => r.url.includes('/resolve/main/mmproj/tiny-mmproj.gguf')), 'the file came from <hub>/<repo>/resolve/<revision>/<path>');

  const after = (await (await b.admin('GET', `/api/v1/profiles/${profile.id}`)).json()) as { revision: number; blockers: string[]; executable: boolean };
  t.same([after.revision, after.blockers], [2, []], 'the blocker is gone, the profile untouched');
});

t.test('one install at a time; cancel removes the partial files', async (t) => {
  const { b, hub } = await setUp(t);
  hub.options.chunkDelayMs = 40;
  hub.options.chunkBytes = 16 * 1024;
  t.equal((await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' })).status, 202);
  await until('some bytes', async () => ((await installs(b)).t2i.bytes_done > 0 ? true : undefined), 20_000);
  const second = await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  t.equal(second.status, 409);
  t.equal(((await second.json()) as { error: { code: string } }).error.code, 'install_running');
  const cancelled = await b.admin('POST', '/api/v1/prompt-enhancers/cancel', {});
  t.equal(cancelled.status, 200);
  const body = (await cancelled.json()) as Installs & { cancelled: boolean };
  t.equal(body.cancelled, true);
  t.equal(body.t2i.state, 'cancelled');
  t.same(await readdir(path.join(b.stateDir, 'enhancers', 't2i')), ['install.json'], 'no record left');
  t.same(await filesUnder(path.join(b.stateDir, 'enhancers', 'files')), [], 'no partial file left');
  const again = (await (await b.admin('POST', '/api/v1/prompt-enhancers/cancel', {})).json()) as { cancelled: boolean };
  t.equal(again.cancelled, false, 'nothing to cancel');
});

/** A host whose disk has `free` bytes, as df and statfs both see it (the space checks ask statfs). */
function diskWith(b: Built, free: number) {
  const reader = { fsSize: async () => [{ mount: '/', available: free, size: 100 * 2 ** 30 }] } as unknown as HostReader;
  b.service.host = new HostFacts(b.stateDir, reader, Date.now, async () => ({ bavail: free / 1024, bsize: 1024 }));
}

t.test("the second task shares the first one's copy: no byte of it moves, the rest does", async (t) => {
  const { b, hub } = await setUp(t);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  t.equal((await settledIn(b, 't2i', ['installed', 'failed'])).state, 'installed');
  await b.service.enhancers.settled();
  // Room for the projector and the margin, not for a second copy of the model.
  diskWith(b, MMPROJ.length + 512 * 1024 * 1024 + 64 * 1024);
  const sentBefore = hub.sent();
  const requestsBefore = hub.requests.length;
  const seen: Array<[number, number | null]> = [];
  const working: Record<string, Set<string | null>> = { t2i: new Set(), i2i: new Set() };
  b.service.enhancers.on('change', () => {
    const view = b.service.enhancers.view();
    seen.push([view.i2i.bytes_done, view.i2i.bytes_total]);
    for (const task of ['t2i', 'i2i'] as const) working[task]!.add(view[task].file);
  });
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  const done = await settledIn(b, 'i2i', ['installed', 'failed']);
  await b.service.enhancers.settled();
  t.same([done.state, done.error, done.bytes_done, done.bytes_total], ['installed', null, MODEL.length + MMPROJ.length, MODEL.length + MMPROJ.length]);
  const moved = hub.sent() - sentBefore;
  t.comment(`second install: the hub sent ${moved} bytes (model ${MODEL.length}, projector ${MMPROJ.length})`);
  t.equal(moved, MMPROJ.length, 'the hub sent the projector only');
  const second = { requests: hub.requests.slice(requestsBefore) };
  t.equal(fetchesOf(second, MODEL), 0, 'no GET of the shared model');
  t.equal(fetchesOf(second, MMPROJ), 1, 'one GET of the projector');
  t.same(seen.find(([, total]) => total !== null), [MODEL.length, MODEL.length + MMPROJ.length], 'the progress says the shared bytes are there from the start');
  t.same([...working.i2i!], [null, 'mmproj/tiny-mmproj.gguf'], 'the shared model was taken on its record: neither read again nor fetched');
  const [t2i, i2i] = [await b.service.enhancers.installed('t2i'), await b.service.enhancers.installed('i2i')];
  t.ok(t2i && i2i && t2i.model === i2i.model, `one copy for both tasks: ${t2i?.model}`);
  t.equal(i2i?.mmproj, path.join(storeOf(b), 'mmproj', 'tiny-mmproj.gguf'));
  const enhancers = path.join(b.stateDir, 'enhancers');
  t.same(await filesUnder(enhancers), BOTH_INSTALLED);

  // A file touched since (a copy, a restore: its mtime changed) is hashed again, not fetched.
  diskWith(b, 100 * 2 ** 30);
  const model = path.join(storeOf(b), 'tiny-Q4.gguf');
  await utimes(model, new Date(), new Date(Date.now() - 60_000));
  const touched = hub.requests.length;
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  t.equal((await settledIn(b, 't2i', ['installed', 'failed'])).state, 'installed');
  await b.service.enhancers.settled();
  t.equal(fetchesOf({ requests: hub.requests.slice(touched) }, MODEL), 0, 'a touched file with the right sha256 is kept');
  t.ok(working.t2i!.has('tiny-Q4.gguf'), 'after it was read again');
  // A file whose bytes changed is fetched again, and both tasks use the repaired copy.
  await writeFile(model, Buffer.alloc(MODEL.length, 1));
  const damaged = hub.requests.length;
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  t.equal((await settledIn(b, 'i2i', ['installed', 'failed'])).state, 'installed');
  await b.service.enhancers.settled();
  t.equal(fetchesOf({ requests: hub.requests.slice(damaged) }, MODEL), 1, 'a damaged file is fetched again');
  t.equal(sha256(await readFile(model)), sha256(MODEL));
  t.ok(await b.service.enhancers.installed('t2i'), 't2i is installed still');
});

t.test('cancelling one task keeps the files the other uses; its own files go', async (t) => {
  const { b, hub } = await setUp(t);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  t.equal((await settledIn(b, 't2i', ['installed', 'failed'])).state, 'installed');
  await b.service.enhancers.settled();
  hub.options.chunkDelayMs = 40;
  hub.options.chunkBytes = 16 * 1024;
  const before = hub.requests.length;
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  await until('the projector part-way', async () => {
    const view = (await installs(b)).i2i;
    return view.bytes_done > MODEL.length + 32 * 1024 ? true : undefined;
  }, 20_000);
  const cancelled = (await (await b.admin('POST', '/api/v1/prompt-enhancers/cancel', {})).json()) as Installs & { cancelled: boolean };
  t.same([cancelled.cancelled, cancelled.i2i.state, cancelled.t2i.state], [true, 'cancelled', 'installed']);
  t.equal(fetchesOf({ requests: hub.requests.slice(before) }, MODEL), 0, 'the cancelled install fetched none of the shared model');
  t.same(await filesUnder(path.join(b.stateDir, 'enhancers', 'files')), ['test-org/tiny-enhancer/main/tiny-Q4.gguf'], "the projector's partial went, the shared model stayed");
  const t2i = await b.service.enhancers.installed('t2i');
  t.ok(t2i, 't2i is installed still');
  t.equal(sha256(await readFile(t2i!.model)), sha256(MODEL), 'with its bytes');
  const profile = await imageProfile(b, t);
  const chosen = (await (await b.admin('POST', '/api/v1/profiles/prompt-enhancer', { id: profile.id, revision: 1, prompt_enhancer: { t2i: null, i2i: null, device: 'auto' } })).json()) as { blockers: string[] };
  t.same(chosen.blockers, [`prompt enhancer not installed: ${REPO} (i2i)`], 't2i has no blocker, i2i has');

  // i2i first, then t2i cancelled at once (it had nothing to fetch): the shared model stays for i2i.
  const other = await setUp(t);
  await other.b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  t.equal((await settledIn(other.b, 'i2i', ['installed', 'failed'])).state, 'installed');
  await other.b.service.enhancers.settled();
  t.ok(other.b.service.enhancers.install('t2i').ok);
  t.equal(await other.b.service.enhancers.cancel(), true);
  t.equal((await installs(other.b)).t2i.state, 'cancelled');
  t.same(await filesUnder(path.join(other.b.stateDir, 'enhancers', 'files')), ['test-org/tiny-enhancer/main/mmproj/tiny-mmproj.gguf', 'test-org/tiny-enhancer/main/tiny-Q4.gguf'], 'i2i keeps both files');
  t.ok(await other.b.service.enhancers.installed('i2i'), 'i2i is installed still');
});

t.test('an install in the layout before the store counts as installed, and is moved into the store with one copy', async (t) => {
  const stateDir = await tempDir(t);
  const old = (task: string, files: Array<[string, string, Buffer]>) => ({
    task,
    record: { repo: REPO, revision: 'main', files: files.map(([p, role, bytes]) => ({ path: p, role, size: bytes.length, sha256: sha256(bytes) })), installed_at: '2025-01-01T00:00:00.000Z' },
    files,
  });
  for (const { task, record, files } of [
    old('t2i', [['tiny-Q4.gguf', 'model', MODEL]]),
    old('i2i', [['tiny-Q4.gguf', 'model', MODEL], ['mmproj/tiny-mmproj.gguf', 'mmproj', MMPROJ]]),
  ]) {
    const folder = path.join(stateDir, 'enhancers', task);
    await mkdir(folder, { recursive: true, mode: 0o700 });
    await writeFile(path.join(folder, 'installed.json'), JSON.stringify(record), { mode: 0o600 });
    await writeFile(path.join(folder, 'install.json'), JSON.stringify({ repo: REPO, state: 'installed', bytes_done: 1, bytes_total: 1, error: null, file: null }), { mode: 0o600 });
    for (const [p, , bytes] of files) await writeFile(path.join(folder, p.replaceAll('/', '__')), bytes, { mode: 0o600 });
  }
  const { b, hub } = await setUp(t, stateDir);
  const view = await installs(b);
  t.same([view.t2i.state, view.i2i.state], ['installed', 'installed']);
  t.same(await filesUnder(path.join(stateDir, 'enhancers')), BOTH_INSTALLED, 'moved into the store; the second copy of the model is gone');
  const [t2i, i2i] = [await b.service.enhancers.installed('t2i'), await b.service.enhancers.installed('i2i')];
  t.equal(t2i?.model, path.join(storeOf(b), 'tiny-Q4.gguf'));
  t.equal(i2i?.model, t2i?.model);
  t.equal(sha256(await readFile(i2i!.mmproj!)), sha256(MMPROJ));
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'i2i' });
  t.equal((await settledIn(b, 'i2i', ['installed', 'failed'])).state, 'installed');
  t.equal(hub.sent(), 0, 'installing again moves no byte: the moved files keep their record');
});

t.test("too little disk space fails before any byte, with the numbers: the state directory's own filesystem counts", async (t) => {
  const { b, hub } = await setUp(t);
  // The state directory is its own small mount (a tmpfs, say), which the mount list that
  // systeminformation reads from df leaves out: that list shows only a roomy root.
  const rootOnly = { fsSize: async () => [{ mount: '/', available: 100 * 2 ** 30, size: 200 * 2 ** 30 }] } as unknown as HostReader;
  const asked: string[] = [];
  const ownMount = async (dir: string) => {
    asked.push(dir);
    return { bavail: 1024, bsize: 1024 };
  };
  b.service.host = new HostFacts(b.stateDir, rootOnly, Date.now, ownMount);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const failed = await settledIn(b, 't2i', ['failed', 'installed']);
  t.equal(failed.state, 'failed');
  t.match(failed.error, /not enough free disk space .* needed .* 0\.0 GiB free/);
  t.ok(asked.length > 0 && asked.every((dir) => dir.startsWith(path.join(b.stateDir, 'enhancers'))), 'the filesystem of the enhancer folder itself was asked');
  t.notOk(hub.requests.some((r) => r.method === 'GET'), 'no byte was fetched (only HEAD probes)');
});

t.test('a hub that sends past the stated size fails the install there, and leaves no partial file', async (t) => {
  const { b, hub } = await setUp(t);
  hub.options.endless = true;
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const failed = await settledIn(b, 't2i', ['failed', 'installed']);
  t.equal(failed.state, 'failed');
  t.match(failed.error, /sent more than the 3145728 bytes it stated/);
  // Only install.json stays (its atomic rewrite may still hold a temporary file for a moment).
  t.ok(await onlyRecordLeft(b), 'no partial file left');
  t.ok(hub.sent() < MODEL.length + 8 * 1024 * 1024, `the download stopped at the stated size (the hub wrote ${hub.sent()} bytes)`);
});

t.test('a hub that states no size is refused before any byte', async (t) => {
  const { b, hub } = await setUp(t);
  hub.options.linkedHeaders = false;
  hub.options.redirect = false;
  hub.options.endless = true;
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const failed = await settledIn(b, 't2i', ['failed', 'installed']);
  t.match(failed.error, /states no size for tiny-Q4\.gguf .* refused/);
  t.notOk(hub.requests.some((r) => r.method === 'GET'), 'no byte was fetched (only HEAD probes)');
});

t.test('a disk that fills up from elsewhere stops the install with room to spare; state writes go on', async (t) => {
  const { b } = await setUp(t);
  const roomy = { fsSize: async () => [{ mount: '/', available: 100 * 2 ** 30, size: 200 * 2 ** 30 }] } as unknown as HostReader;
  // The disk had room before the install; asked again during it, it has filled.
  const asked: string[] = [];
  const filling = async (dir: string) => {
    asked.push(dir);
    return asked.length === 1 ? { bavail: 100 * 1024, bsize: 1024 * 1024 } : { bavail: 256, bsize: 1024 * 1024 };
  };
  b.service.host = new HostFacts(b.stateDir, roomy, Date.now, filling);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const failed = await settledIn(b, 't2i', ['failed', 'installed']);
  t.equal(failed.state, 'failed');
  t.match(failed.error, /filling up during the install: .* to spare, \d+\.\d GiB free/);
  t.ok(asked.length > 0 && asked.every((dir) => dir.startsWith(path.join(b.stateDir, 'enhancers'))), 'statfs was asked about the enhancer folder');
  // Only install.json stays (its atomic rewrite may still hold a temporary file for a moment).
  t.ok(await onlyRecordLeft(b), 'no partial file left');
  const saved = await b.admin('POST', '/api/v1/profiles', { name: 'after-the-install', category: 'stt', params: { defaultLanguage: 'en' } });
  t.equal(saved.status, 201, 'a profile save still works');
});

t.test('a restart mid-install says so; installing again resumes with Range', async (t) => {
  const stateDir = await tempDir(t);
  const first = await setUp(t, stateDir);
  first.hub.options.chunkDelayMs = 40;
  first.hub.options.chunkBytes = 16 * 1024;
  await first.b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  await until('some bytes', async () => ((await installs(first.b)).t2i.bytes_done > 256 * 1024 ? true : undefined), 20_000);
  await first.b.service.shutdown();

  const second = await setUp(t, stateDir);
  const view = (await installs(second.b)).t2i;
  t.equal(view.state, 'failed');
  t.match(view.error, /interrupted.*install again to resume/);
  t.ok(view.bytes_done > 0, `${view.bytes_done} bytes kept`);
  await second.b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const done = await settledIn(second.b, 't2i', ['installed', 'failed']);
  t.equal(done.state, 'installed');
  t.ok(second.hub.requests.some((r) => /^bytes=[1-9]\d*-$/.test(r.range ?? '')), 'the download resumed with Range');
});

t.test('a killed service left an install running: the next start says so, and the install resumes', async (t) => {
  const stateDir = await tempDir(t);
  const folder = path.join(stateDir, 'enhancers', 't2i');
  await mkdir(folder, { recursive: true, mode: 0o700 });
  await writeFile(path.join(folder, 'install.json'), JSON.stringify({ repo: REPO, state: 'installing', bytes_done: 10, bytes_total: MODEL.length, error: null, file: 'tiny-Q4.gguf' }));
  await writeFile(path.join(folder, 'tiny-Q4.gguf.part'), MODEL.subarray(0, 100_000), { mode: 0o600 });
  const { b, hub } = await setUp(t, stateDir);
  const view = (await installs(b)).t2i;
  t.same([view.state, view.bytes_done, view.bytes_total], ['failed', 100_000, MODEL.length]);
  t.match(view.error, /^interrupted by a restart at 0\.0 GiB: install again to resume from there$/);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  t.equal((await settledIn(b, 't2i', ['installed', 'failed'])).state, 'installed');
  t.ok(hub.requests.some((r) => r.method === 'GET' && r.range === 'bytes=100000-'), 'resumed from the 100000 bytes kept');
});

t.test('the choice route refuses what it cannot save', async (t) => {
  const { b } = await setUp(t);
  const profile = await imageProfile(b, t);
  const chat = (await (await b.admin('POST', '/api/v1/profiles', { name: 'talker', category: 'chat', params: { model: '/nowhere.gguf' } })).json()) as { id: string };
  const choice = { t2i: null, i2i: false, device: 'auto' };
  const cases: Array<[string, unknown, number, string]> = [
    ['a stale revision', { id: profile.id, revision: 7, prompt_enhancer: choice }, 409, 'stale_revision'],
    ['no such profile', { id: 'p-none', revision: 1, prompt_enhancer: choice }, 404, 'profile_not_found'],
    ['a chat profile', { id: chat.id, revision: 1, prompt_enhancer: choice }, 400, 'invalid_value'],
    ['a bad repository id', { id: profile.id, revision: 1, prompt_enhancer: { ...choice, t2i: 'not a repo' } }, 400, 'invalid_value'],
    ['true is not a choice', { id: profile.id, revision: 1, prompt_enhancer: { ...choice, t2i: true } }, 400, 'invalid_value'],
    ['a device that is no choice', { id: profile.id, revision: 1, prompt_enhancer: { ...choice, device: 'gpu0' } }, 400, 'invalid_value'],
    ['a device that is no GPU UUID', { id: profile.id, revision: 1, prompt_enhancer: { ...choice, device: 'GPU' } }, 400, 'invalid_value'],
    ['an unknown field', { id: profile.id, revision: 1, prompt_enhancer: choice, extra: 1 }, 400, 'unknown_parameter'],
  ];
  for (const [what, body, status, code] of cases) {
    const response = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', body);
    t.equal(response.status, status, what);
    t.equal(((await response.json()) as { error: { code: string } }).error.code, code, what);
  }
  const device = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', { id: profile.id, revision: 1, prompt_enhancer: { ...choice, device: 'gpu0' } });
  t.match(((await device.json()) as { error: object }).error, { param: 'prompt_enhancer.device', message: /one of "auto", "cpu", or a GPU UUID/ }, 'a device that is no choice: the error names the field and the choices');
  const install = await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 'x2y' });
  t.equal(install.status, 400, 'an unknown task');
  const own = await b.admin('POST', '/api/v1/profiles/prompt-enhancer', { id: profile.id, revision: 1, prompt_enhancer: { t2i: 'other-org/other-model', i2i: false, device: 'auto' } });
  t.same(((await own.json()) as { prompt_enhancer: unknown }).prompt_enhancer, { t2i: 'other-org/other-model', i2i: null, device: 'auto' }, 'a repository of its own is kept as given');
});

t.test('the install plan: the size the hub states, what the store holds, the free disk and whether it fits, before any byte', async (t) => {
  const { b, hub } = await setUp(t);
  const MARGIN = 512 * 1024 * 1024;
  diskWith(b, 100 * 2 ** 30);
  const plan = async (task: string) => {
    const response = await b.admin('GET', `/api/v1/prompt-enhancers/plan?task=${task}`);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const first = await plan('i2i');
  t.equal(first.status, 200);
  t.same(first.body, {
    task: 'i2i',
    repo: REPO,
    revision: 'main',
    files: [
      { path: 'tiny-Q4.gguf', bytes: MODEL.length, bytes_on_disk: 0 },
      { path: 'mmproj/tiny-mmproj.gguf', bytes: MMPROJ.length, bytes_on_disk: 0 },
    ],
    bytes_total: MODEL.length + MMPROJ.length,
    bytes_on_disk: 0,
    bytes_to_download: MODEL.length + MMPROJ.length,
    free_bytes: 100 * 2 ** 30,
    margin_bytes: MARGIN,
    fits: true,
    reason: null,
    hub_error: null,
  });
  t.notOk(hub.requests.some((r) => r.method === 'GET'), 'asked with HEAD only: no byte moved');

  // With t2i installed, i2i has only its projector to fetch.
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  t.equal((await settledIn(b, 't2i', ['installed', 'failed'])).state, 'installed');
  t.match((await plan('i2i')).body, { bytes_total: MODEL.length + MMPROJ.length, bytes_on_disk: MODEL.length, bytes_to_download: MMPROJ.length, fits: true });

  // A disk one byte short of the download and its margin: it does not fit, and says by how much.
  diskWith(b, MMPROJ.length + MARGIN - 1024);
  const short = (await plan('i2i')).body;
  t.match(short, { fits: false, free_bytes: MMPROJ.length + MARGIN - 1024, reason: /not enough free disk space in .*enhancers.*: 0\.5 GiB needed \(0\.0 GiB to download and 0\.5 GiB to spare\), 0\.5 GiB free/ });

  // A hub that states no size: nothing can be told, and the install would be refused.
  hub.options.linkedHeaders = false;
  hub.options.redirect = false;
  hub.options.endless = true;
  t.match((await plan('t2i')).body, { bytes_total: null, bytes_to_download: null, fits: null, reason: /states no size for tiny-Q4\.gguf/ });

  // A hub that refuses: an answer that says so, not an error status (the console asks on every view).
  hub.options.status = 500;
  const refused = await plan('i2i');
  t.equal(refused.status, 200, 'a hub that cannot be asked is part of the answer');
  t.match(refused.body, { bytes_total: null, bytes_to_download: null, fits: null, hub_error: /tiny-Q4\.gguf: .*500/, reason: /the hub could not be asked what the install would download/ });
  hub.options.status = null;

  const unknown = await plan('x2y');
  t.equal(unknown.status, 400, 'an unknown task');
});
