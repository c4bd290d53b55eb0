// The prompt enhancer installs and the per-profile choice (CONTRACT section 8) against a local hub
// laid out like huggingface.co (test/helpers/hub.ts): install with progress to `installed`, the
// profile's blocker cleared without touching the profile; one install at a time; cancel removes
// the partial files; a disk too small is a clear failure before any byte; a restart mid-install
// says so and the next install resumes with Range; and every refusal of the choice route.
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { HostFacts, type HostReader } from '../../src/system/host.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { startHub } from '../helpers/hub.js';
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
  const recipes = path.join(dir, 'recipes.json');
  await writeFile(
    recipes,
    JSON.stringify({
      t2i: { repo: REPO, revision: 'main', files: [{ path: 'tiny-Q4.gguf', role: 'model' }], context: 2048 },
      i2i: { repo: REPO, revision: 'main', files: [{ path: 'tiny-Q4.gguf', role: 'model' }, { path: 'mmproj/tiny-mmproj.gguf', role: 'mmproj' }], context: 2048 },
    }),
  );
  const env = { SERVICE_DECK_ENHANCER_HUB: hub.url, SERVICE_DECK_ENHANCER_RECIPES: recipes, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_SD_CLI: SD_CLI };
  const b = await build(t, { env, ...(stateDir ? { stateDir } : {}) });
  return { hub, b, env };
}

/** Whether the t2i folder has come to hold only its install record. */
const onlyRecordLeft = (b: Built) =>
  until('only install.json in the task folder', async () => ((await readdir(path.join(b.stateDir, 'enhancers', 't2i'))).join() === 'install.json' ? true : undefined), 10_000).catch(() => false);
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
  t.same((await readdir(folder)).sort(), ['install.json', 'installed.json', 'mmproj__tiny-mmproj.gguf', 'tiny-Q4.gguf']);
  t.equal((await stat(path.join(folder, 'tiny-Q4.gguf'))).mode & 0o777, 0o600);
  t.equal((await stat(folder)).mode & 0o777, 0o700);
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
  t.same(await readdir(path.join(b.stateDir, 'enhancers', 't2i')), ['install.json'], 'no partial file left');
  const again = (await (await b.admin('POST', '/api/v1/prompt-enhancers/cancel', {})).json()) as { cancelled: boolean };
  t.equal(again.cancelled, false, 'nothing to cancel');
});

t.test('too little disk space fails before any byte, with the numbers', async (t) => {
  const { b, hub } = await setUp(t);
  const small = { fsSize: async () => [{ mount: '/', available: 1024 * 1024, size: 10 * 2 ** 30 }] } as unknown as HostReader;
  b.service.host = new HostFacts(b.stateDir, small);
  await b.admin('POST', '/api/v1/prompt-enhancers/install', { task: 't2i' });
  const failed = await settledIn(b, 't2i', ['failed', 'installed']);
  t.equal(failed.state, 'failed');
  t.match(failed.error, /not enough free disk space .* needed .* 0\.0 GiB free/);
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
  // The host facts (df) saw room before the install; statfs during it says the disk has filled.
  const asked: string[] = [];
  const filling = async (dir: string) => {
    asked.push(dir);
    return { bavail: 256, bsize: 1024 * 1024 };
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
