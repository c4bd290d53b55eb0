// Hub downloads (CONTRACT section 8) against a local hub that answers like huggingface.co: the
// linked size and sha256 of the resolve redirect are checked, a partial file resumes with Range,
// every failure is a HubError with its code, and only a checked file ever reaches its final name.
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { downloadHubFile, etagSha256, HubError, probeHubFile, reachOf, redirectProblem, tokenScope, type DownloadOptions } from '../../src/adapters/hubDownload.js';
import { freePort, tempDir } from '../helpers/build.js';
import { startHub, type Hub, type HubFileEntry } from '../helpers/hub.js';
import { until } from '../helpers/until.js';

const REPO = 'owner/enhancer-GGUF';
const SIZE = 300_000;

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

async function sizeOf(file: string): Promise<number> {
  return (await stat(file)).size;
}

/** A hub with one random file, and a folder to download into. */
async function setUp(t: Test, size = SIZE) {
  const hub = await startHub(t);
  const bytes = randomBytes(size);
  const file = hub.put(REPO, 'main', 'model-Q4_K_M.gguf', bytes);
  const dir = await tempDir(t);
  const dest = path.join(dir, 'model.gguf');
  return { hub, bytes, file, dest, part: `${dest}.part` };
}

/** Downloads `file` to `dest`, recording every progress call. */
function download(file: HubFileEntry | string, dest: string, more: Partial<DownloadOptions> = {}) {
  const progress: [number, number | null][] = [];
  const result = downloadHubFile({
    url: typeof file === 'string' ? file : file.url,
    dest,
    signal: new AbortController().signal,
    onProgress: (done, total) => void progress.push([done, total]),
    ...more,
  });
  return { result, progress };
}

async function hubError(promise: Promise<unknown>): Promise<HubError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof HubError) return error;
    throw error;
  }
  throw new Error('expected a HubError, got success');
}

function byteRequests(hub: Hub) {
  return hub.requests.filter((r) => r.url.startsWith('/cdn/'));
}

t.test('a whole download: the bytes, the sha256, progress up to the size, 0600, no partial left', async (t) => {
  const { hub, bytes, file, dest, part } = await setUp(t);
  hub.options.chunkBytes = 8 * 1024;
  hub.options.chunkDelayMs = 15;
  const { result, progress } = download(file, dest);
  t.same(await result, { size: SIZE, sha256: file.sha256, bytes: SIZE });
  t.ok((await readFile(dest)).equals(bytes), 'the same bytes');
  t.equal((await stat(dest)).mode & 0o777, 0o600);
  t.notOk(await exists(part), 'the partial was renamed');
  t.ok(progress.length >= 3, `progress was reported along the way (${progress.length} calls)`);
  t.same(progress.at(-1), [SIZE, SIZE], 'the last call says done');
  t.ok(
    progress.every(([done, total], i) => total === SIZE && (i === 0 || done >= (progress[i - 1]?.[0] ?? 0))),
    'monotonic, with the total',
  );
  t.same(
    hub.requests.map((r) => [r.method, r.url, r.range]),
    [
      ['GET', `/${REPO}/resolve/main/model-Q4_K_M.gguf`, undefined],
      ['GET', `/cdn/${file.sha256}`, undefined],
    ],
    'the resolve redirect, then the CDN',
  );
});

t.test('probing reads the linked headers of the redirect, else Content-Length', async (t) => {
  const { hub, file } = await setUp(t, 1000);
  t.same(await probeHubFile(file.url), { size: 1000, sha256: file.sha256 });
  hub.options.etag = `W/"${file.sha256.toUpperCase()}"`;
  t.same(await probeHubFile(file.url), { size: 1000, sha256: file.sha256 }, 'a weak, quoted, upper-case etag');
  hub.options.linkedHeaders = false;
  hub.options.absoluteLocation = true;
  t.same(await probeHubFile(file.url), { size: 1000, sha256: null }, 'no linked headers: the CDN’s Content-Length');
  t.ok(
    hub.requests.every((r) => r.method === 'HEAD'),
    'no bytes are fetched',
  );
  hub.options.status = 404;
  t.match(await hubError(probeHubFile(file.url)), { code: 'http_status', message: /answered 404/ });
  t.equal(etagSha256('"abc"'), null, 'a git etag (not a sha256) is no sha256');
  t.equal(etagSha256(null), null);
});

t.test('the hub token goes to the hub origin only: never to the CDN a redirect names', async (t) => {
  const { hub, bytes, file, dest } = await setUp(t, 200_000);
  const token = 'hf_adapter_token_0123456789';
  hub.gate(REPO, token);
  const port = new URL(hub.url).port;
  // The CDN is another origin of the same server, as the real hub's CDN is another host.
  hub.options.cdnOrigin = `http://localhost:${port}`;
  t.match(await hubError(probeHubFile(file.url)), { code: 'http_status', message: /answered 401/ }, 'a gated file without the token');
  t.match(await hubError(download(file, dest).result), { code: 'http_status', message: /answered 401/ });

  hub.requests.length = 0;
  t.same(await probeHubFile(file.url, undefined, undefined, tokenScope(token)), { size: 200_000, sha256: file.sha256 }, 'the probe with the token');
  t.same(await download(file, dest, { scope: tokenScope(token) }).result, { size: 200_000, sha256: file.sha256, bytes: 200_000 }, 'the download with it');
  t.ok((await readFile(dest)).equals(bytes));
  const toHub = hub.requests.filter((r) => r.host === `127.0.0.1:${port}`);
  const toCdn = hub.requests.filter((r) => r.host === `localhost:${port}`);
  t.same(toHub.map((r) => r.method), ['HEAD', 'GET'], 'the hub was asked by the probe and the download');
  t.ok(toHub.every((r) => r.authorization === `Bearer ${token}`), 'each with the token');
  t.same(toCdn.map((r) => [r.method, r.authorization]), [['HEAD', undefined], ['GET', undefined]], 'the CDN got neither request with it');
  t.same(tokenScope(undefined), {}, 'no token, no header');
});

t.test('a cut connection leaves a partial that the next call resumes with Range', async (t) => {
  const { hub, bytes, file, dest, part } = await setUp(t);
  hub.options.cutAfter = 100_000;
  const first = await hubError(download(file, dest).result);
  t.equal(first.code, 'network');
  t.match(first.message, /127\.0\.0\.1:\d+/, 'the message names the host');
  const kept = await sizeOf(part);
  // fetch's body stream drops what it had queued but not yet handed out when the connection fails.
  t.ok(kept > 0 && kept <= 100_000, `the bytes received before the cut are kept (${kept})`);
  t.ok((await readFile(part)).equals(bytes.subarray(0, kept)), 'and they are the file’s first bytes');
  t.notOk(await exists(dest));

  const { result, progress } = download(file, dest);
  t.same(await result, { size: SIZE, sha256: file.sha256, bytes: SIZE });
  t.ok((await readFile(dest)).equals(bytes));
  t.same(byteRequests(hub).at(-1)?.range, `bytes=${kept}-`, 'the hub received the Range');
  t.same(progress[0], [kept, SIZE], 'progress starts at the bytes already there');
  t.notOk(await exists(part));
});

t.test('a 200 answer to a Range request starts over', async (t) => {
  const { hub, bytes, file, dest, part } = await setUp(t);
  hub.options.ranges = false;
  await writeFile(part, Buffer.alloc(5000, 0x55), { mode: 0o600 });
  const { result } = download(file, dest);
  t.same(await result, { size: SIZE, sha256: file.sha256, bytes: SIZE }, 'the stale prefix is not part of the file');
  t.ok((await readFile(dest)).equals(bytes));
  t.equal(byteRequests(hub)[0]?.range, 'bytes=5000-');
});

t.test('a complete partial answered 416 is the file: checked and renamed, nothing fetched', async (t) => {
  const { hub, bytes, file, dest, part } = await setUp(t);
  hub.options.redirect = false;
  await writeFile(part, bytes, { mode: 0o644 });
  const { result, progress } = download(file, dest);
  t.same(await result, { size: SIZE, sha256: file.sha256, bytes: SIZE });
  t.same(progress, [[SIZE, SIZE]]);
  t.equal((await stat(dest)).mode & 0o777, 0o600, 'tightened to 0600');
  t.same(
    hub.requests.map((r) => r.range),
    [`bytes=${SIZE}-`],
  );
});

t.test('a partial longer than the file (416 at another size) is started over', async (t) => {
  const { bytes, file, dest } = await setUp(t, 1000);
  await writeFile(`${dest}.part`, randomBytes(2000));
  t.same(await download(file, dest).result, { size: 1000, sha256: file.sha256, bytes: 1000 });
  t.ok((await readFile(dest)).equals(bytes));
});

t.test('a wrong sha256 or size deletes the partial and names expected and actual', async (t) => {
  const { hub, file, dest, part } = await setUp(t, 10_000);
  const wrong = 'f'.repeat(64);
  hub.options.etag = `W/"${wrong}"`;
  const sha = await hubError(download(file, dest).result);
  t.equal(sha.code, 'sha256_mismatch');
  t.match(sha.message, new RegExp(`expected sha256 ${wrong}, got ${file.sha256}`));
  t.notOk(await exists(part), 'no partial');
  t.notOk(await exists(dest), 'no file');

  hub.options.etag = null;
  hub.options.linkedSize = 10_001;
  const size = await hubError(download(file, dest).result);
  t.equal(size.code, 'size_mismatch');
  t.match(size.message, /expected 10001 bytes, got 10000/);
  t.notOk(await exists(part));
  t.notOk(await exists(dest));
});

t.test('HTTP errors name the status and the URL without its query; a closed port is a network error', async (t) => {
  const { hub, file, dest } = await setUp(t, 100);
  const missing = await hubError(download(`${hub.url}/${REPO}/resolve/main/nope.gguf?download=true`, dest).result);
  t.equal(missing.code, 'http_status');
  t.match(missing.message, `${hub.url}/${REPO}/resolve/main/nope.gguf answered 404`);
  t.notMatch(missing.message, /download=true/);
  hub.options.status = 500;
  t.match(await hubError(download(file, dest).result), { code: 'http_status', message: /answered 500/ });

  const port = await freePort();
  const refused = await hubError(download(`http://127.0.0.1:${port}/${REPO}/resolve/main/x.gguf`, dest).result);
  t.equal(refused.code, 'network');
  t.match(refused.message, new RegExp(`127\\.0\\.0\\.1:${port}.*ECONNREFUSED`));
  t.notOk(await exists(dest));
});

t.test('a cancel stops the download and keeps the partial', async (t) => {
  const { hub, file, dest, part } = await setUp(t, 64 * 1024);
  hub.options.chunkBytes = 1024;
  hub.options.chunkDelayMs = 20;
  const controller = new AbortController();
  const { result } = download(file, dest, {
    signal: controller.signal,
    onProgress: (done) => {
      if (done > 0) controller.abort();
    },
  });
  t.equal((await hubError(result)).code, 'cancelled');
  const kept = await sizeOf(part);
  t.ok(kept > 0 && kept < 64 * 1024, `the partial stays with part of the file (${kept} bytes)`);
  t.notOk(await exists(dest));
  const before = new AbortController();
  before.abort();
  t.equal((await hubError(download(file, dest, { signal: before.signal }).result)).code, 'cancelled', 'aborted before it began');
});

t.test('no linked headers: the size from Content-Length, the sha256 computed and returned', async (t) => {
  const { hub, bytes, file, dest } = await setUp(t);
  hub.options.linkedHeaders = false;
  hub.options.redirect = false;
  t.same(await download(file, dest).result, { size: SIZE, sha256: createHash('sha256').update(bytes).digest('hex'), bytes: SIZE });
});

t.test('an absolute Location is followed as well', async (t) => {
  const { hub, file, dest } = await setUp(t, 1000);
  hub.options.absoluteLocation = true;
  t.same(await download(file, dest).result, { size: 1000, sha256: file.sha256, bytes: 1000 });
});

t.test('a full disk while writing is disk_full', async (t) => {
  const { file, dest } = await setUp(t);
  let written = 0;
  const openWrite = () =>
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written += chunk.length;
        if (written > 50_000) callback(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' }));
        else callback();
      },
    });
  const error = await hubError(download(file, dest, { openWrite }).result);
  t.equal(error.code, 'disk_full');
  t.match(error.message, /no space left/);
  t.notOk(await exists(dest));
});

// A hub is trusted with nothing it could use against the disk or the network.

t.test('a hub that sends past the size it stated is cut there: size_mismatch, the partial removed', async (t) => {
  const { hub, file, dest, part } = await setUp(t, 100_000);
  hub.options.endless = true;
  hub.options.chunkBytes = 16 * 1024;
  // The partial file as the download writes it, every byte counted on its way to the disk.
  let written = 0;
  const openWrite = (file: string, flags: 'a' | 'w') => {
    const disk = createWriteStream(file, { flags, mode: 0o600 });
    return new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written += chunk.length;
        disk.write(chunk, callback);
      },
      final(callback) {
        disk.end(callback);
      },
    });
  };
  const error = await hubError(download(file, dest, { openWrite }).result);
  t.equal(error.code, 'size_mismatch');
  t.match(error.message, /sent more than the 100000 bytes it stated/);
  t.ok(hub.sent() > 100_000, `the hub did send more than it stated (${hub.sent()} bytes)`);
  t.ok(written > 0 && written <= 100_000, `no byte past the stated size was written (${written} of the 100000 stated)`);
  t.notOk(await exists(part), 'no partial is left to fill the disk');
  t.notOk(await exists(dest));
});

t.test('a hub that states no size at all is refused before a byte is written', async (t) => {
  const { hub, file, dest, part } = await setUp(t, 100_000);
  hub.options.endless = true;
  hub.options.linkedHeaders = false;
  hub.options.redirect = false;
  const error = await hubError(download(file, dest).result);
  t.equal(error.code, 'size_unknown');
  t.match(error.message, /states no size .* refused/);
  t.notOk(await exists(part));
  t.notOk(await exists(dest));
  const probe = await probeHubFile(file.url);
  t.equal(probe.size, null, 'the probe says so too');
});

t.test('the disk room is asked before the first byte and along the way; no room removes the partial', async (t) => {
  const { hub, bytes, file, dest, part } = await setUp(t, 300_000);
  // Paced, so that the client reads the body in pieces however busy the machine.
  hub.options.chunkBytes = 16 * 1024;
  hub.options.chunkDelayMs = 3;
  const asked: number[] = [];
  const fine = await download(file, dest, { roomCheckBytes: 10_000, checkRoom: async (toCome) => void asked.push(toCome) }).result;
  t.equal(fine.bytes, 300_000);
  t.ok((await readFile(dest)).equals(bytes));
  t.equal(asked[0], 300_000, 'first with the whole file to come');
  t.ok(asked.length >= 3 && asked.every((n, i) => i === 0 || n < asked[i - 1]!), `then along the way, with less to come (${asked.join(', ')})`);

  const other = path.join(path.dirname(dest), 'other.gguf');
  let calls = 0;
  const full = async () => {
    calls += 1;
    if (calls > 1) throw new HubError('disk_full', 'the disk is filling up');
  };
  const error = await hubError(download(file, other, { roomCheckBytes: 100_000, checkRoom: full }).result);
  t.equal(error.code, 'disk_full');
  t.notOk(await exists(`${other}.part`), 'the partial was removed');
  t.notOk(await exists(other));
  t.ok(await exists(dest), 'other files stay');
  t.notOk(await exists(part));
});

t.test('a symlink at the partial path is never written through', async (t) => {
  const { bytes, file, dest, part } = await setUp(t, 10_000);
  const target = path.join(path.dirname(dest), 'precious.txt');
  await writeFile(target, 'keep me', { mode: 0o644 });
  await symlink(target, part);
  t.same(await download(file, dest).result, { size: 10_000, sha256: file.sha256, bytes: 10_000 });
  t.ok((await readFile(dest)).equals(bytes), 'the file is whole');
  t.equal(await readFile(target, 'utf8'), 'keep me', 'the target was not truncated, overwritten or appended to');
  t.equal((await stat(target)).mode & 0o777, 0o644, 'nor chmodded');
});

t.test('redirects: http(s) only, and never further in than the hub', async (t) => {
  const { hub, file, dest, part } = await setUp(t, 1000);
  hub.options.location = 'data:application/octet-stream;base64,AAAA';
  const data = await hubError(download(file, dest).result);
  t.equal(data.code, 'redirect_refused');
  t.match(data.message, /a redirect to a data: URL is not followed/);
  hub.options.location = 'file:///etc/passwd';
  t.equal((await hubError(probeHubFile(file.url))).code, 'redirect_refused', 'the probe follows the same rule');
  t.notOk(await exists(part));

  const dns: Record<string, string[]> = { 'hub.example': ['93.184.216.34'], 'cdn.example': ['151.101.1.1'], 'inside.example': ['192.168.1.20'], 'mirror.lan': ['10.0.0.2'] };
  const resolve = async (host: string) => {
    const found = dns[host];
    if (!found) throw new Error(`ENOTFOUND ${host}`);
    return found;
  };
  const problem = (from: string, to: string) => redirectProblem(new URL(from), new URL(to), resolve);
  t.equal(await problem('https://hub.example/r', 'https://cdn.example/blob'), null, 'public to public');
  t.equal(await problem('https://hub.example/r', 'http://hub.example:8080/blob'), null, 'the same host');
  t.match(await problem('https://hub.example/r', 'http://127.0.0.1:9090/livez'), /public hub to a loopback address/);
  t.match(await problem('https://hub.example/r', 'http://localhost/x'), /loopback/);
  t.match(await problem('https://hub.example/r', 'http://[::1]/x'), /loopback/);
  t.match(await problem('https://hub.example/r', 'http://[::ffff:127.0.0.1]/x'), /loopback/);
  t.match(await problem('https://hub.example/r', 'http://10.1.2.3/x'), /public hub to a private address/);
  t.match(await problem('https://hub.example/r', 'http://inside.example/x'), /private address/, 'a name that resolves inward counts as inward');
  t.match(await problem('https://hub.example/r', 'http://169.254.169.254/latest/meta-data'), /private/);
  t.match(await problem('https://hub.example/r', 'http://nowhere.example/x'), /does not resolve/);
  t.equal(await problem('http://mirror.lan/r', 'http://10.0.0.9/blob'), null, 'a private mirror may send to its network');
  t.match(await problem('http://mirror.lan/r', 'http://127.0.0.1/x'), /private hub to a loopback address/);
  t.equal(await problem('http://127.0.0.1:8000/r', 'http://127.0.0.1:9000/blob'), null, 'a hub on loopback (a local mirror, the tests) may send anywhere');
  t.same(['8.8.8.8', '10.0.0.1', '172.20.1.1', '100.64.0.1', 'fd00::1', 'fe80::1', '::1', '0.0.0.0'].map(reachOf), ['public', 'private', 'private', 'private', 'private', 'private', 'loopback', 'loopback']);
});

t.test('a host name is resolved once: the connection goes to the address that was checked, never to a second answer (DNS rebinding)', async (t) => {
  const { hub, bytes, file, dest } = await setUp(t, 10_000);
  const port = Number(new URL(hub.url).port);
  // Where a second answer for the name points: a decoy on another loopback address, same port.
  let decoyed = 0;
  const decoy = createServer((socket) => {
    decoyed += 1;
    socket.destroy();
  });
  await new Promise<void>((resolve, reject) => decoy.once('error', reject).listen(port, '127.0.0.2', resolve));
  t.teardown(() => new Promise<void>((resolve) => decoy.close(() => resolve())));
  // The hub sends the bytes to a name whose first answer is the hub's own CDN and every later one
  // the decoy. (The hub is on loopback, the only place a test can serve from, so the redirect rule
  // lets both answers pass: what is checked here is that the connection goes where the check
  // looked. That the rule refuses an inward answer is the redirect test's.)
  hub.options.location = `http://cdn.rebind.example:${port}/cdn/${file.sha256}`;
  const rebinding = () => {
    const asked: string[] = [];
    const resolveHost = async (host: string) => {
      asked.push(host);
      return asked.length === 1 ? ['127.0.0.1'] : ['127.0.0.2'];
    };
    return { asked, resolveHost };
  };

  const downloading = rebinding();
  t.same(await download(file, dest, { resolveHost: downloading.resolveHost }).result, { size: 10_000, sha256: file.sha256, bytes: 10_000 });
  t.ok((await readFile(dest)).equals(bytes), 'the bytes came from the address that was checked');
  t.same(downloading.asked, ['cdn.rebind.example'], 'the name was resolved once for the download');
  t.ok(byteRequests(hub).length > 0, 'the CDN on the checked address served them');

  const probing = rebinding();
  t.same(await probeHubFile(file.url, undefined, probing.resolveHost), { size: 10_000, sha256: file.sha256 }, 'the probe likewise');
  t.same(probing.asked, ['cdn.rebind.example'], 'once for the probe');
  t.equal(decoyed, 0, 'no connection ever went to the second answer');
});

t.test('bytes received just before the body stalls are reported, not held back by the throttle', async (t) => {
  const { hub, file, dest } = await setUp(t);
  let release!: () => void;
  hub.options.gate = new Promise((resolve) => (release = resolve));
  hub.options.chunkBytes = 16 * 1024;
  const { result, progress } = download(file, dest);
  // The first chunk comes at once after the start's own report; the next waits for the gate.
  const shown = await until('the first chunk to be reported while the body stalls', async () => progress.find(([done]) => done === 16 * 1024));
  t.same(shown, [16 * 1024, SIZE], 'the 16 KiB on disk are shown, with the total');
  release();
  hub.options.gate = null;
  t.equal((await result).bytes, SIZE);
  t.same(progress.at(-1), [SIZE, SIZE], 'the end is reported');
});
