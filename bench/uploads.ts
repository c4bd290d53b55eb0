// bench/uploads: transcription uploads of 8 MiB each, all sent but their last bytes, then finished
// together, against the real service as an operator runs it (bin/service-deck.js over dist/, its
// own process, so its resident memory is its own) with the pocketsphinx engine. Each recording is
// a valid one of the largest size (5 s of samples and a chunk the reader skips, to 8 MiB): every
// upload is written into its job folder, checked, and queued (one runs, 16 wait, the rest are
// refused with 429 queue_full).
//
// Reported: the service's resident memory (VmRSS) idle before the uploads, with every upload held
// on disk, its peak while the uploads finish and are answered (sampled every 20 ms), after the last
// answer, and 5 s later; the answers by status. Target: the uploads add at most 96 MiB, at the
// peak and after (the run exits 1 past it, or on an answer other than 200 or 429).
//
// Run: npm run bench:uploads [-- UPLOADS] (it builds the bench; run npm run build first). Loopback
// only; 800 MiB of disk under the system's temporary folder while it runs.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { encodeWav } from '../src/adapters/wav.js';
import { padWav, pocketsphinxPath } from '../test/helpers/speech.js';
import { serveBuilt, stop, until } from './lib.js';

const UPLOADS = Number(process.argv[2] ?? 100);
const TARGET_MIB = 96;
const MIB = 1024 * 1024;
const SIZE = 8 * MIB;
/** What each upload holds back until they all finish together. */
const LAST = 64 * 1024;
const PASSWORD = 'bench password 0123';
const TOKEN = 'sd-bench-token-0123456789abcdefghijklmnop';
const BOUNDARY = 'bench-upload-boundary';

const mib = (value: number) => `${value.toFixed(0)} MiB`;

/** The service's resident memory (MiB), from /proc. */
async function rssMiB(pid: number): Promise<number> {
  return Number(/^VmRSS:\s+(\d+)/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;
}

/** Bytes written so far into the recordings under `jobs/`, and how many folders there are. */
async function onDisk(jobs: string): Promise<{ folders: number; bytes: number }> {
  const folders = (await readdir(jobs).catch(() => [] as string[])).filter((name) => name.startsWith('transcription-'));
  let bytes = 0;
  for (const folder of folders) bytes += (await stat(path.join(jobs, folder, 'recording.wav')).catch(() => ({ size: 0 }))).size;
  return { folders: folders.length, bytes };
}

/** One upload on a connection of its own: the answer's status once the server closed it. */
function upload(port: number, body: Buffer): { socket: Socket; status: Promise<number> } {
  const socket = connect({ host: '127.0.0.1', port });
  let received = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk: string) => (received += chunk));
  const status = new Promise<number>((resolve) => socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0))));
  socket.on('error', () => {});
  socket.write(
    `POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${TOKEN}\r\nConnection: close\r\nContent-Type: multipart/form-data; boundary=${BOUNDARY}\r\nContent-Length: ${body.length}\r\n\r\n`,
  );
  return { socket, status };
}

/** Writes `bytes`; resolves once written, or once the server closed the connection (its answer tells). */
const write = (socket: Socket, bytes: Buffer) => new Promise<void>((resolve) => socket.write(bytes, () => resolve()));

const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-uploads-'));
let service: ChildProcess | undefined;
let failed = false;
try {
  const stateDir = path.join(dir, 'state');
  const env = { SERVICE_DECK_API_TOKEN: TOKEN, SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none', SERVICE_DECK_LOG_LEVEL: 'warn' };
  const { pid, apiPort, publish } = await serveBuilt('bench/uploads', stateDir, PASSWORD, env, (child) => (service = child));
  await publish({ name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });

  const preamble = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nlistener\r\n--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n`);
  const body = Buffer.concat([preamble, padWav(encodeWav(new Int16Array(16_000 * 5), 16_000), SIZE), Buffer.from(`\r\n--${BOUNDARY}--\r\n`)]);
  // Idle: the worker loaded and the route's code warm, then the keep-alive connections gone.
  for (let i = 0; i < 3; i += 1) {
    const warm = upload(apiPort, body);
    await write(warm.socket, body);
    const status = await warm.status;
    if (status !== 200) throw new Error(`a warm-up upload answered ${status}`);
  }
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  const before = await rssMiB(pid);

  const uploads = Array.from({ length: UPLOADS }, () => upload(apiPort, body));
  await Promise.all(uploads.map(({ socket }) => write(socket, body.subarray(0, body.length - LAST))));
  const jobs = path.join(stateDir, 'jobs');
  await until('every upload on disk but its last bytes', async () => {
    const seen = await onDisk(jobs);
    return seen.folders === UPLOADS && seen.bytes >= UPLOADS * (SIZE - 2 * LAST) ? seen : undefined;
  }, 300_000);
  const held = await rssMiB(pid);

  let peak = held;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, await rssMiB(pid));
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  for (const { socket } of uploads) socket.write(body.subarray(body.length - LAST));
  const statuses = await Promise.all(uploads.map(({ status }) => status));
  sampling = false;
  await sampler;
  const answered = await rssMiB(pid);
  await new Promise((resolve) => setTimeout(resolve, 5_000));
  const settled = await rssMiB(pid);

  const byStatus = new Map<number, number>();
  for (const status of statuses) byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
  console.log(`${UPLOADS} transcription uploads of ${mib(SIZE / MIB)} finishing together (the service's resident memory, VmRSS):`);
  console.log(`  idle before            ${mib(before)}`);
  console.log(`  every upload held      ${mib(held)} (+${mib(held - before)})`);
  console.log(`  peak while answered    ${mib(peak)} (+${mib(peak - before)})`);
  console.log(`  after the last answer  ${mib(answered)} (+${mib(answered - before)})`);
  console.log(`  5 s later              ${mib(settled)} (+${mib(settled - before)})`);
  console.log(`  answers: ${[...byStatus].sort(([a], [b]) => a - b).map(([status, count]) => `${count} x ${status}`).join(', ')}`);
  const added = Math.max(peak, answered, settled) - before;
  console.log(`target: the uploads add at most ${TARGET_MIB} MiB, at the peak and after: ${added <= TARGET_MIB ? 'met' : 'NOT met'} (+${mib(added)})`);
  failed = added > TARGET_MIB || statuses.some((status) => status !== 200 && status !== 429);
} finally {
  if (service) await stop(service);
  await rm(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
