// Held uploads do not fill the service's memory. 30 clients each send 7.5 MiB of an
// 8 MiB transcription upload and hold the rest; the real `service-deck serve` (its own process,
// so its resident memory is its own) writes each recording into its job folder as it arrives:
// they may add at most 96 MiB of resident memory (before, 100 such uploads took it from 114 MB to
// 980 MB). When the clients go, their folders go too.
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { openSocket, type OpenSocket } from '../helpers/raw.js';
import { spawnCli } from '../helpers/spawn.js';
import { until } from '../helpers/until.js';

const PASSWORD = 'e2e-password-1';
const TOKEN = 'sd-e2e-token-0123456789abcdefghijklmnop';
const HELD = 30;
const SENT = 7.5 * 1024 * 1024;
const LIMIT_MIB = 96;

async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) / 1024;
}

/** Bytes in every recording under `jobs/`. */
async function recordingBytes(jobs: string): Promise<{ folders: number; bytes: number }> {
  const folders = (await readdir(jobs).catch(() => [] as string[])).filter((name) => name.startsWith('transcription-'));
  let bytes = 0;
  for (const folder of folders) bytes += (await stat(path.join(jobs, folder, 'recording.wav')).catch(() => ({ size: 0 }))).size;
  return { folders: folders.length, bytes };
}

t.test('30 held 7.5 MiB transcription uploads add at most 96 MiB, and their folders go with their clients', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_LOG_LEVEL: 'warn' };
  const served = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await served.waitFor(/admin API on/);
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  const login = await fetch(`${adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const { csrfToken } = (await login.json()) as { csrfToken: string };
  const admin = (route: string, body: unknown) =>
    fetch(`${adminUrl}${route}`, { method: 'POST', headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  t.equal((await admin('/api/v1/endpoint/config', { port: apiPort })).status, 200);
  t.equal((await admin('/api/v1/endpoint/start', {})).status, 200);
  const pid = served.child.pid!;
  // Settled: the first requests' code is loaded before the baseline.
  for (let i = 0; i < 3; i += 1) await fetch(`http://127.0.0.1:${apiPort}/health`, { headers: { authorization: `Bearer ${TOKEN}` } });
  await new Promise((r) => setTimeout(r, 500));
  const before = await rssMiB(pid);

  const boundary = 'held-upload-boundary';
  const preamble = `--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nlistener\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`;
  const total = Buffer.byteLength(preamble) + 8 * 1024 * 1024;
  const chunk = Buffer.alloc(256 * 1024, 1);
  const held: OpenSocket[] = [];
  for (let i = 0; i < HELD; i += 1) {
    const open = await openSocket(`http://127.0.0.1:${apiPort}`);
    open.socket.write(
      `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${total}\r\n\r\n${preamble}`,
    );
    for (let sent = 0; sent < SENT; sent += chunk.length) {
      if (!open.socket.write(chunk)) await new Promise((r) => open.socket.once('drain', r));
    }
    held.push(open);
  }
  const jobs = path.join(stateDir, 'jobs');
  const written = await until('every held upload on disk', async () => {
    const seen = await recordingBytes(jobs);
    return seen.folders === HELD && seen.bytes >= HELD * (SENT - 1024 * 1024) ? seen : undefined;
  }, 60_000);
  const during = await rssMiB(pid);
  t.ok(during - before <= LIMIT_MIB, `resident memory ${before.toFixed(0)} -> ${during.toFixed(0)} MiB with ${HELD} uploads held (${(written.bytes / 2 ** 20).toFixed(0)} MiB of them on disk): +${(during - before).toFixed(0)} MiB, at most ${LIMIT_MIB}`);

  for (const open of held) open.socket.destroy();
  await until('the held uploads\' folders to go', async () => ((await recordingBytes(jobs)).folders === 0 ? true : undefined), 30_000);
  t.pass('every folder of a client that left was removed');
});
