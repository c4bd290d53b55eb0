// CONTRACT section 10, the hub before a download, against the local hub (test/helpers/hub.ts):
// a repository's files from the tree API; a remote GGUF's facts and forecast from its header read
// with range requests, counting the bytes the hub served against the header bound; the token sent
// to the hub's origin but never past the redirect to the CDN's, and never logged; `..` and
// absolute paths refused before the hub is asked; a redirect inward refused.
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { writeTinyModel } from '../../src/adapters/tinyModel.js';
import { reachOf } from '../../src/adapters/hubDownload.js';
import type { HubFilesView, HubForecastView } from '../../src/system/models/modelHub.js';
import { REMOTE_HEADER_BYTES } from '../../src/system/models/modelHub.js';
import type { ModelFilesView } from '../../src/system/models/modelFiles.js';
import { build, tempDir } from '../helpers/build.js';
import { startHub } from '../helpers/hub.js';
import { writeTinyWhisper } from '../helpers/tinyWhisper.js';

const GPUS = JSON.stringify([{ uuid: 'GPU-a', name: 'sim', memoryTotalMiB: 24576 }]);
const REPO = 'test-org/tiny-chat';
const TOKEN = 'hf_secret_token_0123456789abcdef';

/** A tiny model big enough that its weights dwarf its header: 8 blocks of 256 wide, about 50 MB of F32. */
async function bigTiny(dir: string): Promise<Buffer> {
  return readFile(await writeTinyModel(path.join(dir, 'big.gguf'), { embedding: 256, layers: 8, heads: 4 }));
}

interface ErrorBody {
  error: { code: string; message: string; param: string | null };
}

t.test('the files of a repository, and a forecast from the header alone', async (t) => {
  const dir = await tempDir(t);
  const model = await bigTiny(dir);
  const whisper = await readFile(await writeTinyWhisper(path.join(dir, 'ggml-tiny.bin')));
  const hub = await startHub(t);
  const gguf = hub.put(REPO, 'main', 'big-F32.gguf', model);
  const bin = hub.put(REPO, 'main', 'whisper/ggml-tiny.bin', whisper);
  hub.put(REPO, 'main', 'README.md', Buffer.from('# tiny\n'));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: GPUS, SERVICE_DECK_MODEL_DIRS: dir } });

  const listed = await b.admin('GET', `/api/v1/model-hub/files?repo=${REPO}&revision=main`);
  t.equal(listed.status, 200);
  const view = (await listed.json()) as HubFilesView;
  t.same(view, {
    repo: REPO,
    revision: 'main',
    files: [
      { path: 'big-F32.gguf', bytes: model.length, sha256: gguf.sha256, format: 'gguf' },
      { path: 'whisper/ggml-tiny.bin', bytes: whisper.length, sha256: bin.sha256, format: 'whisper' },
      { path: 'README.md', bytes: 7, sha256: null, format: 'unknown' },
    ],
  }, 'files with sizes, the LFS sha256, the format; folders left out');
  t.equal(hub.sent(), 0, 'a listing downloads nothing');

  const res = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`);
  t.equal(res.status, 200);
  const remote = (await res.json()) as HubForecastView;
  const served = hub.sent();
  t.ok(served > 0 && served <= REMOTE_HEADER_BYTES, `the hub served ${served} bytes, within the header bound`);
  t.ok(served < model.length / 10, `a small part of the ${model.length} bytes: never the weights`);
  t.equal(remote.header_bytes, served, 'the answer counts what the hub served');
  t.ok(hub.requests.filter((r) => r.method === 'GET' && r.url.includes('/cdn/')).every((r) => r.range !== undefined), 'every read was a range request');

  // The same file on disk gives the same facts and forecast.
  const local = (await (await b.admin('GET', '/api/v1/model-files')).json()) as ModelFilesView;
  const same = local.files.find((f) => f.path === path.join(dir, 'big.gguf'));
  t.same(remote.facts, same?.facts, 'the facts read over the network are the file\'s');
  t.same(remote.forecast, same?.forecast, 'and so is the forecast');
  t.match(remote.forecast, { fits: true, gpu_layers: 9, layer_count: 9 });

  const notGguf = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=README.md`);
  t.equal(notGguf.status, 422);
  t.match(((await notGguf.json()) as ErrorBody).error, { code: 'model_unreadable', param: 'path', message: /not a GGUF file/ });

  const missing = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=nothing.gguf`);
  t.equal(missing.status, 502);
  t.match(((await missing.json()) as ErrorBody).error, { code: 'hub_refused', message: /answered 404/ });
});

t.test('names that are not plain are refused before the hub is asked', async (t) => {
  const hub = await startHub(t);
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  for (const query of [
    `repo=${REPO}&path=../../etc/passwd`,
    `repo=${REPO}&path=/etc/passwd`,
    `repo=${REPO}&path=a//b.gguf`,
    `repo=${REPO}&path=./a.gguf`,
    `repo=${REPO}&revision=..&path=a.gguf`,
    `repo=../x&path=a.gguf`,
    `repo=just-a-name&path=a.gguf`,
    `repo=a/b/c&path=a.gguf`,
  ]) {
    const res = await b.admin('GET', `/api/v1/model-hub/forecast?${query}`);
    t.equal(res.status, 400, query);
    t.equal(((await res.json()) as ErrorBody).error.code, 'invalid_value', query);
  }
  const files = await b.admin('GET', '/api/v1/model-hub/files?repo=..%2Fx');
  t.equal(files.status, 400);
  t.same(hub.requests, [], 'the hub was never asked');
});

t.test('the token goes to the hub origin only: never past the redirect to the CDN, never to the log', async (t) => {
  const dir = await tempDir(t);
  const model = await bigTiny(dir);
  const hub = await startHub(t);
  hub.put(REPO, 'main', 'big-F32.gguf', model);
  hub.gate(REPO, TOKEN);
  const port = new URL(hub.url).port;
  // The CDN is another origin of the same server, as the real hub's CDN is another host.
  hub.options.cdnOrigin = `http://localhost:${port}`;

  const without = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  const refused = await without.admin('GET', `/api/v1/model-hub/files?repo=${REPO}`);
  t.equal(refused.status, 502);
  t.match(((await refused.json()) as ErrorBody).error, { code: 'hub_refused', message: /answered 401/ }, 'a gated repository needs the token');

  hub.requests.length = 0;
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_HUB_TOKEN: TOKEN } });
  t.equal((await b.admin('GET', `/api/v1/model-hub/files?repo=${REPO}`)).status, 200, 'the token opens the listing');
  const res = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`);
  t.equal(res.status, 200, 'and the forecast');
  const toHub = hub.requests.filter((r) => r.host === `127.0.0.1:${port}`);
  const toCdn = hub.requests.filter((r) => r.host === `localhost:${port}`);
  t.ok(toHub.length >= 2 && toCdn.length >= 1, 'both origins were asked');
  t.ok(toHub.every((r) => r.authorization === `Bearer ${TOKEN}`), 'every request to the hub carried the token');
  t.same(toCdn.map((r) => r.authorization), toCdn.map(() => undefined), 'no request to the CDN did');
  t.notOk(b.logLines.some((line) => line.includes(TOKEN)), 'the log never holds the token');
  const status = JSON.stringify(await (await b.admin('GET', '/api/v1/endpoint')).json());
  t.notOk(status.includes(TOKEN), 'nor the status');
});

/** An address of this machine that is not loopback, where a hub is not "local" to the redirect rule. */
function outwardAddress(): string | undefined {
  return Object.values(os.networkInterfaces())
    .flat()
    .find((address) => address?.family === 'IPv4' && !address.internal)?.address;
}

t.test('a redirect further in than the hub is refused', async (t) => {
  const address = outwardAddress();
  if (address === undefined) {
    t.pass('skipped: this machine has no address outside loopback to serve a hub from');
    return;
  }
  const dir = await tempDir(t);
  const hub = await startHub(t, address);
  hub.put(REPO, 'main', 'big-F32.gguf', await bigTiny(dir));
  const b = await build(t, { env: { SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  t.equal((await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`)).status, 200, 'its own CDN path is fine');
  const sent = hub.sent();

  hub.options.location = `http://127.0.0.1:${new URL(hub.url).port}/cdn/anything`;
  const inward = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`);
  t.equal(inward.status, 502);
  t.match(((await inward.json()) as ErrorBody).error, { code: 'hub_refused', message: /to a loopback address .* is not followed/ });
  if (reachOf(address) === 'public') {
    hub.options.location = 'http://10.1.2.3/cdn/anything';
    const toPrivate = await b.admin('GET', `/api/v1/model-hub/forecast?repo=${REPO}&path=big-F32.gguf`);
    t.equal(toPrivate.status, 502);
    t.match(((await toPrivate.json()) as ErrorBody).error, { code: 'hub_refused', message: /a public hub to a private address/ });
  }
  t.equal(hub.sent(), sent, 'nothing was read after a refused redirect');
});
