// Model pulls (CONTRACT section 10) against the local hub (test/helpers/hub.ts): a pull verified
// into `<models>/<owner>/<name>/<path>` and done again at once without a byte; a wrong sha256
// fails and leaves nothing; a cut connection resumes by itself with Range, and one that stays cut
// fails after the retries and resumes when pulled again; a cancel removes the partial file and
// leaves a file verified there before; the disk room reserved for every pull before a byte, and
// asked again when a waiting pull starts; at most two pulls transfer, the others wait their turn;
// a redirect inward refused.
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { createLogger } from '../../../src/system/observe/log.js';
import { DISK_MARGIN_BYTES } from '../../../src/system/enhancers/enhancerInstalls.js';
import { MAX_ENDED, ModelPulls, type ModelPullsOptions, type PullStart, type PullView } from '../../../src/system/models/modelPulls.js';
import { freePort, tempDir } from '../../helpers/build.js';
import { startHub, type Hub } from '../../helpers/hub.js';
import { until } from '../../helpers/until.js';

const REPO = 'test-org/tiny-models';
const GIB = 2 ** 30;

interface Opened {
  pulls: ModelPulls;
  dir: string;
  lines: string[];
}

/** Model pulls into a fresh `<state>/models`, with a captured log and (unless given) a roomy disk. */
async function open(t: Test, hub: Hub, more: Partial<ModelPullsOptions> & { start?: boolean } = {}): Promise<Opened> {
  const { start = true, ...options } = more;
  const dir = options.dir ?? path.join(await tempDir(t), 'models');
  const lines: string[] = [];
  const log = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(line) } });
  const pulls = await ModelPulls.open({ hub: hub.url, token: undefined, room: async () => 100 * GIB, log, ...options, dir });
  t.teardown(() => pulls.stop());
  if (start) pulls.start();
  return { pulls, dir, lines };
}

function started(start: PullStart): PullView {
  if (!start.ok) throw new Error(`the pull was refused: ${start.code}: ${start.message}`);
  return start.pull;
}

const byteGets = (hub: Hub) => hub.requests.filter((r) => r.method === 'GET' && r.url.startsWith('/cdn/'));
const exists = (file: string) => stat(file).then(() => true, () => false);
const viewOf = (pulls: ModelPulls, id: string) => pulls.list().find((p) => p.id === id)!;
const partSize = async (file: string) => (await stat(`${file}.part`).catch(() => null))?.size ?? 0;
/** A promise the hub waits on before each chunk after the first, and its release. */
function gate(): { promise: Promise<void>; release: () => void } {
  let release = () => {};
  const promise = new Promise<void>((resolve) => (release = resolve));
  return { promise, release };
}

t.test('a pull is verified into <owner>/<name>/<path>, 0600 in 0700 folders; pulled again it is done at once', async (t) => {
  const hub = await startHub(t);
  const bytes = randomBytes(300_000);
  const entry = hub.put(REPO, 'main', 'sub/tiny-Q4.gguf', bytes);
  const { pulls, dir, lines } = await open(t, hub);

  const first = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'sub/tiny-Q4.gguf' }));
  t.match(first, { repo: REPO, revision: 'main', path: 'sub/tiny-Q4.gguf', state: 'downloading', bytes_total: 300_000, error: null, file: null, sha256: null });
  t.match(first.id, /^pull-[0-9a-f]{12}$/);
  await pulls.settled();
  const file = path.join(dir, 'test-org', 'tiny-models', 'sub', 'tiny-Q4.gguf');
  const done = viewOf(pulls, first.id);
  t.match(done, { state: 'done', bytes_done: 300_000, bytes_total: 300_000, file, sha256: entry.sha256, waiting: false, rate_bytes_per_s: null, error: null });
  t.ok((await readFile(file)).equals(bytes), 'the bytes are the hub’s');
  t.equal((await stat(file)).mode & 0o777, 0o600);
  for (const folder of ['test-org', 'test-org/tiny-models', 'test-org/tiny-models/sub']) t.equal((await stat(path.join(dir, folder))).mode & 0o777, 0o700, folder);
  t.notOk(await exists(`${file}.part`));
  const record = JSON.parse(await readFile(path.join(dir, 'pulls.json'), 'utf8')) as { pulls: Array<Record<string, unknown>> };
  t.match(record.pulls, [{ id: first.id, state: 'done', sha256: entry.sha256, expected_sha256: entry.sha256, stamp: /^\d+:300000:/ }], 'the record keeps the sha256 and the stamp');
  t.ok(lines.some((l) => l.includes('"msg":"model pull started"')), 'a line at the start');
  t.match(JSON.parse(lines.find((l) => l.includes('"msg":"model pull done"'))!), { bytes: 300_000, bytes_fetched: 300_000, from: 'hub', seconds: Number, mib_per_s: Number });

  const gets = byteGets(hub).length;
  const again = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'sub/tiny-Q4.gguf' }));
  t.match(again, { id: first.id, state: 'done', file, sha256: entry.sha256 }, 'the same pull, done in the answer');
  t.equal(byteGets(hub).length, gets, 'no byte was asked for');
  t.equal(pulls.list().length, 1);
  t.equal(pulls.verifiedCopy({ size: 300_000, sha256: entry.sha256 }), file, 'a done pull is a verified copy for the enhancer store');
  t.equal(pulls.verifiedCopy({ size: 300_001, sha256: entry.sha256 }), null, 'of that size only');
});

t.test('while it transfers, a pull shows its rate over the last seconds', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'slow.gguf', randomBytes(400_000));
  Object.assign(hub.options, { chunkBytes: 16 * 1024, chunkDelayMs: 40 });
  const { pulls } = await open(t, hub);
  const pull = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'slow.gguf' }));
  const moving = await until('a rate', async () => {
    const view = viewOf(pulls, pull.id);
    return view.rate_bytes_per_s !== null ? view : undefined;
  });
  t.equal(moving.state, 'downloading');
  t.ok(moving.rate_bytes_per_s! > 0 && moving.bytes_done > 0, `${moving.rate_bytes_per_s} bytes/s at ${moving.bytes_done} bytes`);
  // 16 KiB every 40 ms is at most 400 KiB/s; the network adds no speed.
  t.ok(moving.rate_bytes_per_s! < 1024 * 1024, 'about what the hub sends');
  await pulls.settled();
  t.match(viewOf(pulls, pull.id), { state: 'done', rate_bytes_per_s: null });
});

t.test('a wrong sha256 fails the pull and leaves no file and no partial', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'ggml-tiny.bin', randomBytes(200_000));
  const { pulls, dir, lines } = await open(t, hub);
  hub.options.etag = `"${'ab'.repeat(32)}"`;
  const pull = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'ggml-tiny.bin' }));
  await pulls.settled();
  t.match(viewOf(pulls, pull.id), { state: 'failed', error: /expected sha256 abab.*, got [0-9a-f]{64}/, file: null, sha256: null });
  const file = path.join(dir, REPO, 'ggml-tiny.bin');
  t.notOk(await exists(file), 'no file');
  t.notOk(await exists(`${file}.part`), 'no partial');
  t.ok(lines.some((l) => l.includes('"msg":"model pull failed"') && l.includes('sha256_mismatch')), 'the failure is logged with its code');
});

t.test('a cut connection resumes by itself with Range; one that stays cut fails after the retries, and pulling again resumes', async (t) => {
  const hub = await startHub(t);
  const bytes = randomBytes(400_000);
  const entry = hub.put(REPO, 'main', 'cut.gguf', bytes);
  // The first wait is long enough for the test to act between the cut and the next attempt.
  const { pulls, dir, lines } = await open(t, hub, { retryDelaysMs: [1_000, 50, 50] });
  const file = path.join(dir, REPO, 'cut.gguf');

  hub.options.cutAfter = 150_000;
  const pull = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'cut.gguf' }));
  await pulls.settled();
  t.match(viewOf(pulls, pull.id), { state: 'done', sha256: entry.sha256 });
  t.ok((await readFile(file)).equals(bytes));
  const gets = byteGets(hub);
  t.equal(gets.length, 2, 'two byte requests: the cut one and the resume');
  t.match(gets[1]?.range, /^bytes=\d+-$/, 'the resume asked for the rest with Range');
  t.ok(Number(gets[1]?.range?.slice(6, -1)) > 0, 'after the bytes kept');
  t.ok(lines.some((l) => l.includes('"msg":"model pull lost its connection: it resumes"')));

  // The hub sends the bytes to a port where nothing listens: every attempt loses the connection.
  const again = hub.put(REPO, 'main', 'stays-cut.gguf', bytes);
  const dead = `http://127.0.0.1:${await freePort()}/cdn/${again.sha256}`;
  hub.options.cutAfter = 100_000;
  const cut = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'stays-cut.gguf' }));
  const second = path.join(dir, REPO, 'stays-cut.gguf');
  await until('the first cut', async () => (lines.some((l) => l.includes('lost its connection') && l.includes(cut.id)) ? true : undefined));
  hub.options.location = dead;
  await pulls.settled();
  const failed = viewOf(pulls, cut.id);
  t.match(failed, { state: 'failed', error: /network error talking to 127\.0\.0\.1:\d+.*tried again 3 times/ });
  const kept = await partSize(second);
  t.ok(kept > 0 && kept <= 100_000, `the partial file stays (${kept} bytes)`);
  t.equal(failed.bytes_done, kept, 'bytes_done is what is on disk');

  hub.options.location = null;
  const resumed = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'stays-cut.gguf' }));
  t.match(resumed, { id: cut.id, state: 'downloading', bytes_done: kept }, 'pulled again under its id, from the partial file');
  await pulls.settled();
  t.match(viewOf(pulls, cut.id), { state: 'done', sha256: again.sha256 });
  t.equal(byteGets(hub).at(-1)?.range, `bytes=${kept}-`, 'the rest only');
  t.ok((await readFile(second)).equals(bytes));
});

t.test('an attempt that brought bytes starts the count of attempts over', async (t) => {
  const hub = await startHub(t);
  const bytes = randomBytes(400_000);
  const entry = hub.put(REPO, 'main', 'flaky.gguf', bytes);
  // One attempt after a cut, a second long enough for the test to cut the connection again.
  const { pulls, lines } = await open(t, hub, { retryDelaysMs: [1_000] });
  hub.options.cutAfter = 100_000;
  const pull = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'flaky.gguf' }));
  const cuts = () => lines.filter((l) => l.includes('lost its connection') && l.includes(pull.id)).length;
  await until('the first cut', async () => (cuts() === 1 ? true : undefined));
  hub.options.cutAfter = 100_000;
  await pulls.settled();
  t.equal(cuts(), 2, 'the connection was lost twice');
  t.match(viewOf(pulls, pull.id), { state: 'done', sha256: entry.sha256 }, 'each attempt brought bytes: the one retry was granted again');
  t.equal(byteGets(hub).length, 3);
});

t.test('a partial file of other bytes (another revision at the same place) is not resumed: the pull starts over', async (t) => {
  const hub = await startHub(t);
  const old = randomBytes(300_000);
  const next = randomBytes(300_000);
  hub.put(REPO, 'v1', 'model.gguf', old);
  const entry = hub.put(REPO, 'v2', 'model.gguf', next);
  const { pulls, dir } = await open(t, hub, { retryDelaysMs: [] });
  hub.options.cutAfter = 100_000;
  const first = started(await pulls.pull({ repo: REPO, revision: 'v1', path: 'model.gguf' }));
  await pulls.settled();
  t.match(viewOf(pulls, first.id), { state: 'failed', error: /network error .*\(pull it again to resume from/ }, 'no retry was asked for');
  const file = path.join(dir, REPO, 'model.gguf');
  t.ok((await partSize(file)) > 0, 'v1 left a partial file');
  const second = started(await pulls.pull({ repo: REPO, revision: 'v2', path: 'model.gguf' }));
  t.equal(second.bytes_done, 0, 'none of it counts for v2');
  await pulls.settled();
  t.match(viewOf(pulls, second.id), { state: 'done', sha256: entry.sha256 });
  t.equal(byteGets(hub).at(-1)?.range, undefined, 'v2 was asked for whole');
  t.ok((await readFile(file)).equals(next));
});

t.test('two pulls of one file at once: the second is refused while the first asks the hub', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'same.gguf', randomBytes(100_000));
  const { pulls } = await open(t, hub);
  const [a, b] = await Promise.all([pulls.pull({ repo: REPO, revision: 'main', path: 'same.gguf' }), pulls.pull({ repo: REPO, revision: 'main', path: 'same.gguf' })]);
  t.match([a, b], [{ ok: true }, { ok: false, code: 'pull_running' }]);
  await pulls.settled();
  t.equal(pulls.list().length, 1);
});

t.test('a folder on the way that is a symlink is never written through', async (t) => {
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'model.gguf', randomBytes(10_000));
  const { pulls, dir } = await open(t, hub);
  const elsewhere = await tempDir(t);
  await symlink(elsewhere, path.join(dir, 'test-org'));
  const pull = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'model.gguf' }));
  await pulls.settled();
  t.match(viewOf(pulls, pull.id), { state: 'failed', error: /test-org is not a folder \(a symlink or a file\)/ });
  t.same(await readdir(elsewhere), [], 'nothing was written where the symlink points');
});

t.test('the record at open: a downloading pull waits for start() (and can be cancelled before), a damaged record is forgotten with a warning, at most MAX_ENDED ended pulls are kept', async (t) => {
  const hub = await startHub(t);
  const bytes = randomBytes(100_000);
  const entry = hub.put(REPO, 'main', 'kept.gguf', bytes);
  const dir = path.join(await tempDir(t), 'models');
  const part = path.join(dir, REPO, 'kept.gguf.part');
  await mkdir(path.dirname(part), { recursive: true });
  await writeFile(part, bytes.subarray(0, 30_000));
  const at = new Date().toISOString();
  const record = (id: string, file: string) => ({ id, repo: REPO, revision: 'main', path: file, state: 'downloading', bytes_done: 0, bytes_total: 100_000, error: null, file: null, sha256: null, expected_sha256: entry.sha256, stamp: null, created_at: at, updated_at: at });
  await writeFile(path.join(dir, 'pulls.json'), JSON.stringify({ pulls: [record('pull-00000000000a', 'kept.gguf'), record('pull-00000000000b', 'other.gguf'), { id: 'not a pull' }] }));

  const waiting = await open(t, hub, { dir, start: false });
  t.match(waiting.pulls.list(), [{ id: 'pull-00000000000a', state: 'downloading', waiting: true, bytes_done: 30_000 }, { id: 'pull-00000000000b', bytes_done: 0 }], 'what the record holds, with the bytes on disk; the damaged entry left out');
  await waiting.pulls.cancel('pull-00000000000b');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.equal(byteGets(hub).length, 0, 'nothing is fetched before start()');
  waiting.pulls.start();
  await waiting.pulls.settled();
  t.match(waiting.pulls.list(), [{ id: 'pull-00000000000a', state: 'done', sha256: entry.sha256 }, { id: 'pull-00000000000b', state: 'cancelled' }]);
  t.equal(byteGets(hub).at(-1)?.range, 'bytes=30000-', 'resumed from the partial file');
  await waiting.pulls.stop();

  for (let i = 0; i < MAX_ENDED; i += 1) hub.put(REPO, 'main', `n${i}.gguf`, randomBytes(1_000));
  const many = await open(t, hub, { dir });
  for (let i = 0; i < MAX_ENDED; i += 1) started(await many.pulls.pull({ repo: REPO, revision: 'main', path: `n${i}.gguf` }));
  await many.pulls.settled();
  const kept = many.pulls.list();
  t.equal(kept.length, MAX_ENDED, `${MAX_ENDED} ended pulls kept`);
  t.equal(kept[0]?.path, `n${MAX_ENDED - 1}.gguf`, 'the newest first');
  t.notOk(kept.some((p) => p.id === 'pull-00000000000b'), 'the oldest let go');
  const saved = JSON.parse(await readFile(path.join(dir, 'pulls.json'), 'utf8')) as { pulls: unknown[] };
  t.equal(saved.pulls.length, MAX_ENDED, 'in the record too');
  await many.pulls.stop();

  await writeFile(path.join(dir, 'pulls.json'), '{ half');
  const damaged = await open(t, hub, { dir });
  t.same(damaged.pulls.list(), []);
  t.ok(damaged.lines.some((l) => l.includes('the model pulls record cannot be read')), 'a warning names it');
});

t.test('a cancel stops the pull and removes its partial file; a file verified there before stays', async (t) => {
  const hub = await startHub(t);
  const before = randomBytes(300_000);
  const after = randomBytes(300_000);
  hub.put(REPO, 'v1', 'model.gguf', before);
  hub.put(REPO, 'v2', 'model.gguf', after);
  const { pulls, dir, lines } = await open(t, hub);
  const file = path.join(dir, REPO, 'model.gguf');
  started(await pulls.pull({ repo: REPO, revision: 'v1', path: 'model.gguf' }));
  await pulls.settled();

  const held = gate();
  hub.options.gate = held.promise;
  t.teardown(held.release);
  const pull = started(await pulls.pull({ repo: REPO, revision: 'v2', path: 'model.gguf' }));
  t.same(pulls.list().map((p) => p.revision), ['v2'], 'the pull of another revision at the same place replaces the entry of the first');
  const refused = await pulls.pull({ repo: REPO, revision: 'v2', path: 'model.gguf' });
  t.match(refused, { ok: false, code: 'pull_running' }, 'a second pull of a running one');
  await until('the first bytes of v2', async () => ((await partSize(file)) > 0 ? true : undefined));
  const cancelled = await pulls.cancel(pull.id);
  t.match(cancelled, { ok: true, pull: { id: pull.id, state: 'cancelled', bytes_done: 0, file: null } });
  t.notOk(await exists(`${file}.part`), 'the partial file is removed');
  t.ok((await readFile(file)).equals(before), 'the file verified before is left alone');
  t.ok(lines.some((l) => l.includes('"msg":"model pull cancelled"')));
  t.match(await pulls.cancel(pull.id), { ok: false, code: 'pull_ended' });
  t.match(await pulls.cancel('pull-000000000000'), { ok: false, code: 'pull_not_found' });
});

t.test('the disk room: reserved for every pull before a byte, and asked again when a waiting pull starts', async (t) => {
  const hub = await startHub(t);
  const size = 1_000_000;
  for (const name of ['a.gguf', 'b.gguf', 'c.gguf']) hub.put(REPO, 'main', name, randomBytes(size));
  let free = DISK_MARGIN_BYTES + size + 1_000;
  const { pulls, dir } = await open(t, hub, { room: async () => free });

  const held = gate();
  hub.options.gate = held.promise;
  t.teardown(held.release);
  const a = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'a.gguf' }));
  await until('a transfers', async () => (byteGets(hub).length === 1 ? true : undefined));
  const entries = await readdir(dir, { recursive: true });
  const refused = await pulls.pull({ repo: REPO, revision: 'main', path: 'b.gguf' });
  t.match(refused, { ok: false, code: 'insufficient_storage', message: /still to come of other pulls/ }, 'what a still brings is reserved');
  t.same(await readdir(dir, { recursive: true }), entries, 'nothing was written for the refused pull');
  t.equal(byteGets(hub).length, 1, 'nor asked of the hub');

  // Room for two more; the third waits behind the two transfers, and the disk fills meanwhile.
  free = DISK_MARGIN_BYTES + 3 * size + 1_000;
  started(await pulls.pull({ repo: REPO, revision: 'main', path: 'b.gguf' }));
  const c = started(await pulls.pull({ repo: REPO, revision: 'main', path: 'c.gguf' }));
  t.match(viewOf(pulls, c.id), { waiting: true, bytes_done: 0 });
  await until('a and b transfer', async () => (byteGets(hub).length === 2 ? true : undefined));
  free = DISK_MARGIN_BYTES;
  t.ok(await pulls.cancel(a.id));
  await until('c ended', async () => (viewOf(pulls, c.id).state === 'failed' ? true : undefined));
  t.match(viewOf(pulls, c.id), { error: /disk is filling up during the pull/ });
  t.notOk(await exists(path.join(dir, REPO, 'c.gguf.part')), 'c wrote no byte');
  t.notOk(await exists(path.join(dir, REPO, 'c.gguf')));
});

t.test('two pulls asked at once are granted room one after the other', async (t) => {
  const hub = await startHub(t);
  const size = 1_000_000;
  for (const name of ['x.gguf', 'y.gguf']) hub.put(REPO, 'main', name, randomBytes(size));
  // Room for one of them.
  const { pulls } = await open(t, hub, { room: async () => DISK_MARGIN_BYTES + size + 1_000 });
  const held = gate();
  hub.options.gate = held.promise;
  t.teardown(held.release);
  const answers = await Promise.all(['x.gguf', 'y.gguf'].map((name) => pulls.pull({ repo: REPO, revision: 'main', path: name })));
  t.same(answers.map((a) => (a.ok ? 'ok' : a.code)).sort(), ['insufficient_storage', 'ok']);
});

t.test('at most two pulls transfer at once; the others wait in the order they came', async (t) => {
  const hub = await startHub(t);
  const files = ['one.gguf', 'two.gguf', 'three.gguf', 'four.gguf'].map((name) => ({ name, bytes: randomBytes(200_000) }));
  for (const f of files) hub.put(REPO, 'main', f.name, f.bytes);
  const { pulls, dir } = await open(t, hub);
  const held = gate();
  hub.options.gate = held.promise;
  t.teardown(held.release);
  const ids: string[] = [];
  for (const f of files) ids.push(started(await pulls.pull({ repo: REPO, revision: 'main', path: f.name })).id);
  await until('two transfers', async () => (byteGets(hub).length === 2 ? true : undefined));
  // However long it is given, no third transfer starts while two are held.
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.equal(byteGets(hub).length, 2, 'two byte requests at once');
  t.same(ids.map((id) => viewOf(pulls, id).waiting), [false, false, true, true], 'the first two transfer, the others wait');

  t.ok((await pulls.cancel(ids[0]!)).ok);
  await until('three transfers', async () => (byteGets(hub).length === 3 ? true : undefined));
  t.same(ids.slice(1).map((id) => viewOf(pulls, id).waiting), [false, false, true], 'the third came before the fourth');

  held.release();
  hub.options.gate = null;
  await until('every pull ended', async () => (pulls.list().every((p) => p.state !== 'downloading') ? true : undefined));
  t.same(pulls.list().map((p) => p.state), ['done', 'done', 'done', 'cancelled'], 'newest first');
  for (const f of files.slice(1)) t.ok((await readFile(path.join(dir, REPO, f.name))).equals(f.bytes), f.name);
});

/** An address of this machine that is not loopback, where a hub is not "local" to the redirect rule. */
function outwardAddress(): string | undefined {
  return Object.values(os.networkInterfaces())
    .flat()
    .find((address) => address?.family === 'IPv4' && !address.internal)?.address;
}

const address = outwardAddress();
t.test('a redirect further in than the hub is refused before a byte is written', { skip: address === undefined && 'this machine has no address outside loopback to serve a hub from' }, async (t) => {
  const hub = await startHub(t, address);
  const entry = hub.put(REPO, 'main', 'model.gguf', randomBytes(50_000));
  // Names the hub's redirect may use, resolved by a stand-in for DNS: one inward, one outward.
  const dns: Record<string, string[]> = { 'inside.example': ['127.0.0.1'], 'cdn.example': [address!] };
  const resolveHost = async (host: string) => dns[host] ?? [];
  const { pulls, dir } = await open(t, hub, { resolveHost });
  const port = new URL(hub.url).port;
  for (const location of [`http://127.0.0.1:${port}/cdn/${entry.sha256}`, `http://inside.example:${port}/cdn/${entry.sha256}`]) {
    hub.options.location = location;
    await t.rejects(pulls.pull({ repo: REPO, revision: 'main', path: 'model.gguf' }), { code: 'redirect_refused', message: /a redirect from a (public|private) hub to a loopback address/ }, location);
  }
  t.same(await readdir(dir), [], 'nothing written');
  t.equal(byteGets(hub).length, 0);
  hub.options.location = `http://cdn.example:${port}/cdn/${entry.sha256}`;
  started(await pulls.pull({ repo: REPO, revision: 'main', path: 'model.gguf' }));
  await pulls.settled();
  t.match(pulls.list()[0], { state: 'done', sha256: entry.sha256 }, 'a redirect outward is followed, to the address that was checked');
});
