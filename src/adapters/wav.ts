// WAV files (RIFF/WAVE, Microsoft's multimedia file format): the transcription route checks an
// upload from its bytes, never its name (spec 4.6: PCM16 WAV, mono, 16 kHz, at most 120 s and
// 8 MiB); the TTS worker sets the sizes of the WAV espeak-ng streams to its pipe, and checks the
// one a speech server answers. Every rule has its own code, so a refused upload says which rule
// failed. The reader walks the chunks with every length checked against the bytes that are there:
// a truncated or lying header is an error, never a read past the end. A recording on disk is
// checked from its headers alone (checkTranscriptionFile): its samples are never read, and the
// engines are handed the file. (The resamplers and `pcm16` serve the tests' speech round trips.)
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';

/** Spec 4.6 / 8: what a transcription upload must be. */
export const TRANSCRIPTION_WAV = {
  sampleRate: 16_000,
  channels: 1,
  bitsPerSample: 16,
  maxSeconds: 120,
  maxBytes: 8 * 1024 * 1024,
} as const;

const WAVE_FORMAT_PCM = 0x0001;
const WAVE_FORMAT_EXTENSIBLE = 0xfffe;
/** The PCM sub-format GUID of WAVE_FORMAT_EXTENSIBLE: 00000001-0000-0010-8000-00aa00389b71. */
const KSDATAFORMAT_SUBTYPE_PCM = Buffer.from('0100000000001000800000aa00389b71', 'hex');

export type WavRule =
  | 'wav_too_large'
  | 'wav_too_short'
  | 'wav_not_riff'
  | 'wav_not_wave'
  | 'wav_riff_size'
  | 'wav_chunk_truncated'
  | 'wav_no_fmt'
  | 'wav_fmt_twice'
  | 'wav_fmt_size'
  | 'wav_not_pcm'
  | 'wav_not_mono'
  | 'wav_sample_rate'
  | 'wav_bits_per_sample'
  | 'wav_block_align'
  | 'wav_byte_rate'
  | 'wav_no_data'
  | 'wav_data_before_fmt'
  | 'wav_data_twice'
  | 'wav_data_partial_frame'
  | 'wav_empty'
  | 'wav_too_long';

export class WavError extends Error {
  override name = 'WavError';
  constructor(
    readonly rule: WavRule,
    message: string,
  ) {
    super(message);
  }
}

/** What a WAV file's chunks say, and where its samples lie: found from its headers alone. */
export interface WavLayout {
  format: number;
  channels: number;
  sampleRate: number;
  bitsPerSample: number;
  blockAlign: number;
  byteRate: number;
  /** Where the data chunk's sample bytes begin in the file, and how many there are. */
  dataOffset: number;
  dataBytes: number;
  frames: number;
  seconds: number;
}

export interface WavInfo extends WavLayout {
  /** The sample bytes of the data chunk. */
  data: Buffer;
}

/** The samples of a checked recording: `bytes` of 16-bit PCM at `offset` in `file`. */
export interface PcmFile {
  file: string;
  offset: number;
  bytes: number;
}

const fail = (rule: WavRule, message: string): never => {
  throw new WavError(rule, message);
};

/** A read the chunk walk asks for: `length` bytes at `at`, always inside the file. */
type Read = { at: number; length: number };

/** The most of a "fmt " chunk the walk reads (WAVE_FORMAT_EXTENSIBLE's 40 bytes). */
const FMT_READ = 40;

/**
 * Walks the chunks of a RIFF/WAVE file of `size` bytes, asking for each header it needs and never
 * for the samples; checks only the structure, not the transcription rules. A generator, so that
 * a file in memory (readWav) and a file on disk (checkTranscriptionFile) are walked alike.
 */
function* wavLayout(size: number): Generator<Read, WavLayout, Buffer> {
  if (size < 12) fail('wav_too_short', `the file has ${size} bytes: too short for a WAV header`);
  const head = yield { at: 0, length: 12 };
  if (head.toString('latin1', 0, 4) !== 'RIFF') {
    const tag = head.toString('latin1', 0, 4);
    fail('wav_not_riff', tag === 'RF64' ? 'RF64 (WAV over 4 GiB) is not accepted: send a plain RIFF WAV' : 'the file is not a RIFF WAV (it does not start with "RIFF")');
  }
  if (head.toString('latin1', 8, 12) !== 'WAVE') fail('wav_not_wave', 'the RIFF file is not of form WAVE');
  const riffEnd = 8 + head.readUInt32LE(4);
  // The RIFF size must cover what is there (a lying header); a little trailing padding is tolerated.
  if (riffEnd > size) fail('wav_riff_size', `the RIFF header claims ${riffEnd} bytes but the file has ${size}: it is truncated or its header lies`);

  let fmt: Omit<WavLayout, 'dataOffset' | 'dataBytes' | 'frames' | 'seconds'> | undefined;
  let data: { offset: number; bytes: number } | undefined;
  let offset = 12;
  while (offset + 8 <= riffEnd) {
    const chunk = yield { at: offset, length: 8 };
    const id = chunk.toString('latin1', 0, 4);
    const size = chunk.readUInt32LE(4);
    const body = offset + 8;
    if (body + size > riffEnd) fail('wav_chunk_truncated', `the "${id.replace(/[^\x20-\x7e]/g, '?')}" chunk claims ${size} bytes but only ${riffEnd - body} follow: the file is truncated or its header lies`);
    if (id === 'fmt ') {
      if (fmt) fail('wav_fmt_twice', 'the file has two "fmt " chunks');
      if (size < 16) fail('wav_fmt_size', `the "fmt " chunk has ${size} bytes; at least 16 are needed`);
      const bytes = yield { at: body, length: Math.min(size, FMT_READ) };
      let format = bytes.readUInt16LE(0);
      if (format === WAVE_FORMAT_EXTENSIBLE) {
        if (size < 40) fail('wav_fmt_size', `a WAVE_FORMAT_EXTENSIBLE "fmt " chunk has ${size} bytes; 40 are needed`);
        format = bytes.subarray(24, 40).equals(KSDATAFORMAT_SUBTYPE_PCM) ? WAVE_FORMAT_PCM : -1;
      }
      fmt = {
        format,
        channels: bytes.readUInt16LE(2),
        sampleRate: bytes.readUInt32LE(4),
        byteRate: bytes.readUInt32LE(8),
        blockAlign: bytes.readUInt16LE(12),
        bitsPerSample: bytes.readUInt16LE(14),
      };
    } else if (id === 'data') {
      if (!fmt) fail('wav_data_before_fmt', 'the "data" chunk comes before the "fmt " chunk');
      if (data) fail('wav_data_twice', 'the file has two "data" chunks');
      data = { offset: body, bytes: size };
    }
    // Chunks are padded to an even length.
    offset = body + size + (size % 2);
  }
  if (!fmt) return fail('wav_no_fmt', 'the file has no "fmt " chunk');
  if (!data) return fail('wav_no_data', 'the file has no "data" chunk');
  const frames = fmt.blockAlign > 0 ? Math.floor(data.bytes / fmt.blockAlign) : 0;
  return { ...fmt, dataOffset: data.offset, dataBytes: data.bytes, frames, seconds: fmt.sampleRate > 0 ? frames / fmt.sampleRate : 0 };
}

/** Reads the chunks of a RIFF/WAVE file in memory; checks only the structure, not the transcription rules. */
export function readWav(bytes: Buffer): WavInfo {
  const walk = wavLayout(bytes.length);
  for (let step = walk.next(); ; ) {
    if (step.done) return { ...step.value, data: bytes.subarray(step.value.dataOffset, step.value.dataOffset + step.value.dataBytes) };
    step = walk.next(bytes.subarray(step.value.at, step.value.at + step.value.length));
  }
}

/** Spec 4.6's rules on what a WAV's headers say. */
function checkTranscriptionLayout(wav: WavLayout, rules: typeof TRANSCRIPTION_WAV): void {
  if (wav.format !== WAVE_FORMAT_PCM) fail('wav_not_pcm', `the audio is not PCM (format tag ${wav.format < 0 ? 'extensible, not PCM' : `0x${wav.format.toString(16)}`}): only 16-bit PCM is accepted`);
  if (wav.channels !== rules.channels) fail('wav_not_mono', `the audio has ${wav.channels} channels: only mono is accepted`);
  if (wav.sampleRate !== rules.sampleRate) fail('wav_sample_rate', `the sample rate is ${wav.sampleRate} Hz: only ${rules.sampleRate} Hz is accepted`);
  if (wav.bitsPerSample !== rules.bitsPerSample) fail('wav_bits_per_sample', `the samples have ${wav.bitsPerSample} bits: only 16-bit PCM is accepted`);
  const blockAlign = (rules.channels * rules.bitsPerSample) / 8;
  if (wav.blockAlign !== blockAlign) fail('wav_block_align', `the header says ${wav.blockAlign} bytes per frame; 16-bit mono has ${blockAlign}: the header lies`);
  if (wav.byteRate !== rules.sampleRate * blockAlign) fail('wav_byte_rate', `the header says ${wav.byteRate} bytes per second; 16 kHz 16-bit mono has ${rules.sampleRate * blockAlign}: the header lies`);
  if (wav.dataBytes % blockAlign !== 0) fail('wav_data_partial_frame', `the data chunk has ${wav.dataBytes} bytes, not a whole number of 16-bit samples`);
  if (wav.frames === 0) fail('wav_empty', 'the recording has no samples');
  if (wav.seconds > rules.maxSeconds) fail('wav_too_long', `the recording lasts ${wav.seconds.toFixed(1)} s; at most ${rules.maxSeconds} s are accepted`);
}

const tooLarge = (size: number, rules: typeof TRANSCRIPTION_WAV) => fail('wav_too_large', `the file has ${size} bytes; at most ${rules.maxBytes} (8 MiB) are accepted`);

/** Spec 4.6: PCM16 WAV, mono, 16 kHz, at most 120 s and 8 MiB. Returns the samples' info. */
export function checkTranscriptionWav(bytes: Buffer, rules = TRANSCRIPTION_WAV): WavInfo {
  if (bytes.length > rules.maxBytes) tooLarge(bytes.length, rules);
  const wav = readWav(bytes);
  checkTranscriptionLayout(wav, rules);
  return wav;
}

/**
 * Spec 4.6's check of a recording on disk, from its headers alone: the samples are never read
 * (a few dozen bytes per chunk header, whatever the file's size). Returns where its samples lie.
 */
export async function checkTranscriptionFile(file: string, rules = TRANSCRIPTION_WAV): Promise<PcmFile> {
  const handle = await open(file, 'r');
  try {
    const { size } = await handle.stat();
    if (size > rules.maxBytes) tooLarge(size, rules);
    const walk = wavLayout(size);
    for (let step = walk.next(); ; ) {
      if (step.done) {
        checkTranscriptionLayout(step.value, rules);
        return { file, offset: step.value.dataOffset, bytes: step.value.dataBytes };
      }
      const { buffer, bytesRead } = await handle.read(Buffer.alloc(step.value.length), 0, step.value.length, step.value.at);
      // The walk asks only inside the size it was given: fewer bytes means the file shrank meanwhile.
      if (bytesRead < step.value.length) fail('wav_chunk_truncated', 'the file ended before its headers did');
      step = walk.next(buffer);
    }
  } finally {
    await handle.close();
  }
}

/** The samples of a checked recording, read from its file as they are consumed. */
export function pcmStream(pcm: PcmFile): Readable {
  return pcm.bytes > 0 ? createReadStream(pcm.file, { start: pcm.offset, end: pcm.offset + pcm.bytes - 1 }) : Readable.from([]);
}

/** A canonical 44-byte header of a PCM WAV whose data chunk has `dataBytes` bytes (16-bit samples). */
export function wavHeader(dataBytes: number, sampleRate: number, channels = 1): Buffer {
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'latin1');
  header.writeUInt32LE(36 + dataBytes, 4);
  header.write('WAVE', 8, 'latin1');
  header.write('fmt ', 12, 'latin1');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(WAVE_FORMAT_PCM, 20);
  header.writeUInt16LE(channels, 22);
  header.writeUInt32LE(sampleRate, 24);
  header.writeUInt32LE(sampleRate * channels * 2, 28);
  header.writeUInt16LE(channels * 2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'latin1');
  header.writeUInt32LE(dataBytes, 40);
  return header;
}

/**
 * A WAV written to a pipe (espeak-ng --stdout) cannot know its length and says 0x7ffff024 in its
 * RIFF and data sizes: the sizes are set to what is there (a whole number of frames).
 */
export function fixStreamedWav(bytes: Buffer): Buffer {
  if (bytes.length < 12 || bytes.toString('latin1', 0, 4) !== 'RIFF' || bytes.toString('latin1', 8, 12) !== 'WAVE') {
    throw new WavError('wav_not_riff', 'the engine did not write a RIFF WAV');
  }
  const out = Buffer.from(bytes);
  let offset = 12;
  let blockAlign = 2;
  while (offset + 8 <= out.length) {
    const id = out.toString('latin1', offset, offset + 4);
    const size = out.readUInt32LE(offset + 4);
    if (id === 'fmt ' && offset + 22 <= out.length) blockAlign = Math.max(1, out.readUInt16LE(offset + 20));
    if (id === 'data') {
      const available = out.length - offset - 8;
      const length = Math.min(size, available) - (Math.min(size, available) % blockAlign);
      out.writeUInt32LE(length, offset + 4);
      const end = offset + 8 + length;
      out.writeUInt32LE(end - 8, 4);
      return out.subarray(0, end);
    }
    offset += 8 + size + (size % 2);
  }
  throw new WavError('wav_no_data', 'the engine wrote no "data" chunk');
}

/** A PCM WAV file of the given samples (16-bit little-endian). */
export function encodeWav(samples: Int16Array, sampleRate: number, channels = 1): Buffer {
  const data = Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
  return Buffer.concat([wavHeader(data.length, sampleRate, channels), data]);
}

/**
 * Linear resampling of mono 16-bit samples (the e2e round trip turns espeak-ng's 22050 Hz output
 * into the 16 kHz the transcription route takes).
 */
export function resampleLinear(samples: Int16Array, from: number, to: number): Int16Array {
  if (from === to) return samples.slice();
  const length = Math.max(1, Math.round((samples.length * to) / from));
  const out = new Int16Array(length);
  for (let i = 0; i < length; i += 1) {
    const position = (i * from) / to;
    const left = Math.floor(position);
    const right = Math.min(left + 1, samples.length - 1);
    const weight = position - left;
    out[i] = Math.round((samples[left] ?? 0) * (1 - weight) + (samples[right] ?? 0) * weight);
  }
  return out;
}

/**
 * Band-limited resampling of mono 16-bit samples: a Lanczos (windowed sinc) kernel, with the
 * cutoff at the lower Nyquist frequency so that downsampling does not alias. The tests use it
 * where speech goes to a recogniser (espeak-ng's 22050 Hz speech to the 16 kHz the transcription
 * route takes).
 */
export function resample(samples: Int16Array, from: number, to: number, lobes = 8): Int16Array {
  if (from === to) return samples.slice();
  const length = Math.max(1, Math.round((samples.length * to) / from));
  const out = new Int16Array(length);
  const scale = Math.min(1, to / from);
  const radius = lobes / scale;
  const sinc = (x: number) => (x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x));
  for (let i = 0; i < length; i += 1) {
    const centre = (i * from) / to;
    const first = Math.max(0, Math.ceil(centre - radius));
    const last = Math.min(samples.length - 1, Math.floor(centre + radius));
    let sum = 0;
    let weights = 0;
    for (let j = first; j <= last; j += 1) {
      const x = (j - centre) * scale;
      const w = sinc(x) * sinc(x / lobes);
      sum += (samples[j] ?? 0) * w;
      weights += w;
    }
    out[i] = Math.max(-32768, Math.min(32767, Math.round(weights === 0 ? 0 : sum / weights)));
  }
  return out;
}

/** The samples of a 16-bit PCM WAV as an Int16Array (a copy, aligned). */
export function pcm16(wav: WavInfo): Int16Array {
  const out = new Int16Array(Math.floor(wav.data.length / 2));
  for (let i = 0; i < out.length; i += 1) out[i] = wav.data.readInt16LE(i * 2);
  return out;
}
