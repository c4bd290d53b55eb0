// English speech made with espeak-ng (Debian, installed by the set-up), resampled to the 16 kHz
// mono 16-bit PCM that the transcription route and the STT engine take.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { pcm16, readWav, resample } from '../../src/adapters/wav.js';

const run = promisify(execFile);

/** The PCM samples of `text` spoken by espeak-ng, at 16 kHz. */
export async function speech(dir: string, text: string): Promise<Buffer> {
  const file = path.join(dir, 'speech.wav');
  await run('espeak-ng', ['-v', 'en-us+m3', '-s', '130', '-w', file, text]);
  const wav = readWav(await readFile(file));
  const samples = resample(pcm16(wav), wav.sampleRate, 16_000);
  return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
}
