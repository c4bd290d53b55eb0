// English speech made with espeak-ng (Debian, installed by the set-up), resampled to the 16 kHz
// mono 16-bit PCM that the transcription route and the STT engine take.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { encodeWav, pcm16, readWav, resample, type PcmFile } from '../../src/adapters/wav.js';

const run = promisify(execFile);

/** The PCM samples of `text` spoken by espeak-ng, at 16 kHz. */
export async function speech(dir: string, text: string): Promise<Buffer> {
  const file = path.join(dir, 'speech.wav');
  await run('espeak-ng', ['-v', 'en-us+m3', '-s', '130', '-w', file, text]);
  const wav = readWav(await readFile(file));
  const samples = resample(pcm16(wav), wav.sampleRate, 16_000);
  return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
}

/** `text` spoken as `speech()` has it, in a 16 kHz WAV file `name` in `dir`: its samples, as the STT worker takes them. */
export async function speechFile(dir: string, text: string, name = 'recording.wav'): Promise<PcmFile> {
  const pcm = await speech(dir, text);
  const file = path.join(dir, name);
  await writeFile(file, encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2), 16_000));
  return { file, offset: 44, bytes: pcm.length };
}

/** `wav` with a chunk the reader skips after its samples, to `size` bytes in all: a valid recording of any size. */
export function padWav(wav: Buffer, size: number): Buffer {
  const chunk = Buffer.alloc(8);
  chunk.write('junk', 0, 'latin1');
  chunk.writeUInt32LE(size - wav.length - 8, 4);
  const padded = Buffer.concat([wav, chunk, Buffer.alloc(size - wav.length - 8)]);
  padded.writeUInt32LE(size - 8, 4);
  return padded;
}

/** A recording without samples. */
export const NO_SAMPLES: PcmFile = { file: '/dev/null', offset: 0, bytes: 0 };

/**
 * A stand-in espeak-ng for SERVICE_DECK_ESPEAK_NG that writes each argv it is run with to a file,
 * one argument a line and `--end--` after each run, then runs the real espeak-ng from PATH.
 * `runs()` gives the recorded argvs, oldest first (the worker's start probe included).
 */
export async function espeakRecorder(dir: string): Promise<{ binary: string; runs: () => Promise<string[][]> }> {
  const binary = path.join(dir, 'espeak-ng');
  const record = path.join(dir, 'espeak-ng.argv');
  await writeFile(binary, `#!/bin/sh\nfor arg in "$@"; do printf '%s\\n' "$arg"; done >> '${record}'\necho --end-- >> '${record}'\nexec espeak-ng "$@"\n`);
  await chmod(binary, 0o755);
  const runs = async () =>
    (await readFile(record, 'utf8').catch(() => ''))
      .split('--end--\n')
      .filter((run) => run !== '')
      .map((run) => run.replace(/\n$/, '').split('\n'));
  return { binary, runs };
}

/**
 * A stand-in pocketsphinx engine (for SERVICE_DECK_POCKETSPHINX) on the same line protocol: after
 * a request's byte count it stops reading until `go()` (an engine at work on the start of a
 * recording; `asked()` tells that it got that far), then answers with the number of bytes it got.
 * Once told to go, it answers every further request at once.
 */
export async function stalledEngine(dir: string): Promise<{ binary: string; asked: () => boolean; go: () => Promise<void> }> {
  const binary = path.join(dir, 'engine');
  const asked = path.join(dir, 'asked');
  const go = path.join(dir, 'go');
  await writeFile(
    binary,
    `#!/bin/sh\necho '{"ready":true}'\nwhile IFS= read -r bytes; do\n  : > '${asked}'\n  while [ ! -f '${go}' ]; do sleep 0.02; done\n  got=$(head -c "$bytes" | wc -c)\n  echo "{\\"text\\":\\"$got\\"}"\ndone\n`,
  );
  await chmod(binary, 0o755);
  return { binary, asked: () => existsSync(asked), go: () => writeFile(go, '') };
}

/** The STT engine program scripts/build-pocketsphinx.sh built into the cache (the test script runs it during set-up). */
export async function pocketsphinxPath(): Promise<string> {
  const { access, constants } = await import('node:fs/promises');
  const os = await import('node:os');
  const cache = process.env.SERVICE_DECK_CACHE_DIR ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'service-deck');
  const engine = process.env.SERVICE_DECK_POCKETSPHINX ?? path.join(cache, 'bin', 'pocketsphinx-worker');
  await access(engine, constants.X_OK).catch(() => {
    throw new Error(`${engine} is not built: run sh scripts/build-pocketsphinx.sh (npm test does it during set-up)`);
  });
  return engine;
}

/** Word accuracy: the share of the reference's words heard, in order (longest common subsequence). */
export function wordAccuracy(reference: string, heard: string): number {
  const a = reference.toLowerCase().split(/\s+/).filter(Boolean);
  const b = heard.toLowerCase().split(/\s+/).filter(Boolean);
  const table = Array.from({ length: a.length + 1 }, () => new Array<number>(b.length + 1).fill(0));
  for (let i = 1; i <= a.length; i += 1) {
    for (let j = 1; j <= b.length; j += 1) table[i]![j] = a[i - 1] === b[j - 1] ? table[i - 1]![j - 1]! + 1 : Math.max(table[i - 1]![j]!, table[i]![j - 1]!);
  }
  return a.length === 0 ? 0 : table[a.length]![b.length]! / a.length;
}

/**
 * A pocketsphinx engine process of our own, spoken to over its line protocol: `next()` is its next
 * output line, `transcribe()` sends one recording and parses the answer line.
 */
export function engineClient(binary: string) {
  const child = spawn(binary, [], { stdio: ['pipe', 'pipe', 'ignore'] });
  const lines: string[] = [];
  const waiters: Array<(line: string) => void> = [];
  let pending = '';
  child.stdout.on('data', (chunk: Buffer) => {
    pending += chunk.toString('utf8');
    for (let at = pending.indexOf('\n'); at >= 0; at = pending.indexOf('\n')) {
      const line = pending.slice(0, at);
      pending = pending.slice(at + 1);
      const waiter = waiters.shift();
      if (waiter) waiter(line);
      else lines.push(line);
    }
  });
  const next = () => new Promise<string>((resolve) => (lines.length > 0 ? resolve(lines.shift()!) : waiters.push(resolve)));
  return {
    child,
    next,
    transcribe: async (pcm: Buffer) => {
      child.stdin.write(`${pcm.length}\n`);
      child.stdin.write(pcm);
      return JSON.parse(await next()) as { text?: string; error?: string };
    },
  };
}
