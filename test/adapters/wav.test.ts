// Spec 4.6: a transcription upload is checked from its bytes. A corpus of malformed and hostile WAV
// files, generated here, each gets its own rule; random damage never throws anything but a WavError.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { checkTranscriptionFile, checkTranscriptionWav, encodeWav, pcm16, readWav, resampleLinear, WavError, type WavRule } from '../../src/adapters/wav.js';

const tone = (seconds: number, rate = 16_000) => {
  const samples = new Int16Array(Math.round(seconds * rate));
  for (let i = 0; i < samples.length; i += 1) samples[i] = Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate));
  return samples;
};
const good = () => encodeWav(tone(0.5), 16_000);

/** A WAV file from chunks, with a RIFF size that matches unless given. */
function riff(chunks: Array<[string, Buffer]>, options: { form?: string; magic?: string; riffSize?: number } = {}): Buffer {
  const parts = chunks.map(([id, body]) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'latin1');
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body, body.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)]);
  });
  const content = Buffer.concat([Buffer.from(options.form ?? 'WAVE', 'latin1'), ...parts]);
  const head = Buffer.alloc(8);
  head.write(options.magic ?? 'RIFF', 0, 'latin1');
  head.writeUInt32LE(options.riffSize ?? content.length, 4);
  return Buffer.concat([head, content]);
}

function fmt(o: { format?: number; channels?: number; rate?: number; bits?: number; blockAlign?: number; byteRate?: number; size?: number } = {}): Buffer {
  const channels = o.channels ?? 1;
  const bits = o.bits ?? 16;
  const rate = o.rate ?? 16_000;
  const blockAlign = o.blockAlign ?? (channels * bits) / 8;
  const body = Buffer.alloc(o.size ?? 16);
  body.writeUInt16LE(o.format ?? 1, 0);
  body.writeUInt16LE(channels, 2);
  body.writeUInt32LE(rate, 4);
  body.writeUInt32LE(o.byteRate ?? rate * blockAlign, 8);
  body.writeUInt16LE(blockAlign, 12);
  body.writeUInt16LE(bits, 14);
  return body;
}

function extensible(subformat: string): Buffer {
  const body = Buffer.alloc(40);
  fmt({ format: 0xfffe, size: 16 }).copy(body);
  body.writeUInt16LE(22, 16);
  body.writeUInt16LE(16, 18);
  Buffer.from(subformat, 'hex').copy(body, 24);
  return body;
}

const samples = (seconds: number) => Buffer.from(tone(seconds).buffer);
const PCM_GUID = '0100000000001000800000aa00389b71';
const FLOAT_GUID = '0300000000001000800000aa00389b71';

const corpus: Array<[string, Buffer, WavRule]> = [
  ['an empty file', Buffer.alloc(0), 'wav_too_short'],
  ['an Ogg file', Buffer.concat([Buffer.from('OggS'), Buffer.alloc(60)]), 'wav_not_riff'],
  ['an RF64 file', riff([['fmt ', fmt()], ['data', samples(0.1)]], { magic: 'RF64' }), 'wav_not_riff'],
  ['a RIFF AVI file', riff([['fmt ', fmt()]], { form: 'AVI ' }), 'wav_not_wave'],
  ['a truncated file (the RIFF size lies)', good().subarray(0, 4000), 'wav_riff_size'],
  ['a data chunk longer than the file', (() => { const b = good(); b.writeUInt32LE(b.readUInt32LE(40) + 100, 40); return b; })(), 'wav_chunk_truncated'],
  ['only a LIST chunk', riff([['LIST', Buffer.from('INFOISFT\x04\x00\x00\x00test', 'latin1')]]), 'wav_no_fmt'],
  ['a fmt chunk and no data', riff([['fmt ', fmt()]]), 'wav_no_data'],
  ['data before fmt', riff([['data', samples(0.1)], ['fmt ', fmt()]]), 'wav_data_before_fmt'],
  ['two fmt chunks', riff([['fmt ', fmt()], ['fmt ', fmt()], ['data', samples(0.1)]]), 'wav_fmt_twice'],
  ['two data chunks', riff([['fmt ', fmt()], ['data', samples(0.1)], ['data', samples(0.1)]]), 'wav_data_twice'],
  ['a 14-byte fmt chunk', riff([['fmt ', fmt().subarray(0, 14)], ['data', samples(0.1)]]), 'wav_fmt_size'],
  ['IEEE float samples', riff([['fmt ', fmt({ format: 3, bits: 32 })], ['data', samples(0.1)]]), 'wav_not_pcm'],
  ['A-law samples', riff([['fmt ', fmt({ format: 6, bits: 8 })], ['data', samples(0.1)]]), 'wav_not_pcm'],
  ['MP3 in a WAV', riff([['fmt ', fmt({ format: 0x55, size: 30 })], ['data', samples(0.1)]]), 'wav_not_pcm'],
  ['extensible with float samples', riff([['fmt ', extensible(FLOAT_GUID)], ['data', samples(0.1)]]), 'wav_not_pcm'],
  ['a short extensible fmt chunk', riff([['fmt ', extensible(PCM_GUID).subarray(0, 24)], ['data', samples(0.1)]]), 'wav_fmt_size'],
  ['stereo', riff([['fmt ', fmt({ channels: 2 })], ['data', samples(0.2)]]), 'wav_not_mono'],
  ['44.1 kHz', riff([['fmt ', fmt({ rate: 44_100 })], ['data', samples(0.1)]]), 'wav_sample_rate'],
  ['8 kHz', riff([['fmt ', fmt({ rate: 8_000 })], ['data', samples(0.1)]]), 'wav_sample_rate'],
  ['8-bit samples', riff([['fmt ', fmt({ bits: 8 })], ['data', samples(0.1)]]), 'wav_bits_per_sample'],
  ['24-bit samples', riff([['fmt ', fmt({ bits: 24 })], ['data', samples(0.1)]]), 'wav_bits_per_sample'],
  ['a lying block align', riff([['fmt ', fmt({ blockAlign: 4, byteRate: 32_000 })], ['data', samples(0.1)]]), 'wav_block_align'],
  ['a lying byte rate', riff([['fmt ', fmt({ byteRate: 44_100 })], ['data', samples(0.1)]]), 'wav_byte_rate'],
  ['half a sample at the end', riff([['fmt ', fmt()], ['data', Buffer.concat([samples(0.1), Buffer.alloc(1)])]]), 'wav_data_partial_frame'],
  ['no samples', riff([['fmt ', fmt()], ['data', Buffer.alloc(0)]]), 'wav_empty'],
  ['121 seconds', riff([['fmt ', fmt()], ['data', samples(121)]]), 'wav_too_long'],
  ['9 MiB', Buffer.concat([good(), Buffer.alloc(9 * 1024 * 1024)]), 'wav_too_large'],
  ['a chunk size of 4 GiB', (() => { const b = good(); b.writeUInt32LE(0xffffffff, 40); return b; })(), 'wav_chunk_truncated'],
  ['a RIFF size of 4 GiB', (() => { const b = good(); b.writeUInt32LE(0xffffffff, 4); return b; })(), 'wav_riff_size'],
];

/** What checkTranscriptionFile says of `bytes` written to a file: where the samples lie, or its error. */
async function onDisk(dir: string, bytes: Buffer): Promise<unknown> {
  const file = path.join(dir, 'upload.wav');
  await writeFile(file, bytes);
  return checkTranscriptionFile(file).catch((error: unknown) => error);
}

/** Bytes this process has read by read() and pread() so far (Linux's /proc/self/io). */
const bytesRead = async () => Number(/^rchar: (\d+)$/m.exec(await readFile('/proc/self/io', 'utf8'))?.[1]);

t.test('the hostile corpus: every file gets its own rule, in memory and on disk alike', async (t) => {
  t.ok(corpus.length >= 20, `${corpus.length} malformed files`);
  const dir = t.testdir();
  const rules = new Set<string>();
  for (const [name, bytes, rule] of corpus) {
    const fromFile = await onDisk(dir, bytes);
    t.ok(fromFile instanceof WavError && fromFile.rule === rule, `${name}: ${rule} from the file's headers too`);
    const error = (() => {
      try {
        checkTranscriptionWav(bytes);
        return undefined;
      } catch (e) {
        return e;
      }
    })();
    t.ok(error instanceof WavError, `${name}: refused with a WavError`);
    t.equal((error as WavError).rule, rule, `${name}: ${rule}`);
    t.ok((error as WavError).message.length > 10, `${name}: a message that says which rule failed`);
    rules.add(rule);
  }
  t.ok(rules.size >= 20, `${rules.size} different rules`);
});

t.test('valid files pass: plain, extensible PCM, extra chunks with odd padding, exactly 120 s', async (t) => {
  const plain = checkTranscriptionWav(good());
  t.same([plain.channels, plain.sampleRate, plain.bitsPerSample, plain.frames], [1, 16_000, 16, 8000]);
  t.equal(plain.seconds, 0.5);
  t.equal(checkTranscriptionWav(riff([['fmt ', extensible(PCM_GUID)], ['data', samples(0.1)]])).frames, 1600, 'WAVE_FORMAT_EXTENSIBLE with PCM samples');
  const withList = riff([['fmt ', fmt()], ['LIST', Buffer.from('INFOabc', 'latin1')], ['data', samples(0.1)], ['id3 ', Buffer.from('x')]]);
  t.equal(checkTranscriptionWav(withList).frames, 1600, 'odd-sized extra chunks are skipped with their padding');
  t.equal(checkTranscriptionWav(riff([['fmt ', fmt()], ['data', samples(120)]])).seconds, 120, 'exactly 120 s is accepted');
  const padded = Buffer.concat([good(), Buffer.alloc(3)]);
  t.equal(checkTranscriptionWav(padded).frames, 8000, 'bytes after the RIFF end are ignored');
  const dir = t.testdir();
  t.match(await onDisk(dir, withList), { offset: 12 + 24 + 16 + 8, bytes: 3200 }, 'on disk: where the samples lie, past the LIST chunk');
  t.match(await onDisk(dir, riff([['fmt ', extensible(PCM_GUID)], ['data', samples(0.1)]])), { offset: 12 + 48 + 8, bytes: 3200 }, 'on disk: extensible PCM');
});

t.test('a recording on disk is checked from its headers: its samples are never read', async (t) => {
  const dir = t.testdir();
  // 8 MiB with a LIST chunk after the samples, so the walk reads past them to the end.
  const bytes = riff([['fmt ', fmt()], ['data', samples(120)], ['LIST', Buffer.alloc(8 * 1024 * 1024 - 3_840_000 - 60)]]);
  t.ok(bytes.length <= 8 * 1024 * 1024 && bytes.length > 8 * 1024 * 1024 - 16, `a recording of ${bytes.length} bytes`);
  const file = path.join(dir, 'large.wav');
  await writeFile(file, bytes);
  const before = await bytesRead();
  t.match(await checkTranscriptionFile(file), { file, offset: 44, bytes: 3_840_000 }, 'accepted: 120 s, where its samples lie');
  const read = (await bytesRead()) - before;
  t.ok(read < 64 * 1024, `the check read ${read} bytes of the ${bytes.length} (at most 64 KiB, /proc/self/io)`);
});

t.test('random damage never throws anything but a WavError', async (t) => {
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const base = riff([['fmt ', fmt()], ['LIST', Buffer.from('INFOx', 'latin1')], ['data', samples(0.05)]]);
  let refused = 0;
  for (let i = 0; i < 2000; i += 1) {
    const bytes = Buffer.from(base);
    const edits = 1 + Math.floor(random() * 4);
    for (let e = 0; e < edits; e += 1) bytes[Math.floor(random() * Math.min(bytes.length, 80))] = Math.floor(random() * 256);
    const cut = random() < 0.3 ? bytes.subarray(0, Math.floor(random() * bytes.length)) : bytes;
    try {
      checkTranscriptionWav(cut);
    } catch (error) {
      if (!(error instanceof WavError)) throw error;
      refused += 1;
    }
  }
  t.ok(refused > 1000, `${refused} of 2000 damaged files refused, none crashed the reader`);
});

t.test('encode, read back, resample', async (t) => {
  const original = tone(0.25, 22_050);
  const wav = readWav(encodeWav(original, 22_050));
  t.same([wav.sampleRate, wav.frames], [22_050, original.length]);
  t.same(pcm16(wav), original, 'the samples survive');
  const resampled = resampleLinear(original, 22_050, 16_000);
  t.equal(resampled.length, Math.round((original.length * 16_000) / 22_050));
  t.equal(checkTranscriptionWav(encodeWav(resampled, 16_000)).frames, resampled.length, 'a resampled recording passes the transcription rules');
  t.same(resampleLinear(original, 16_000, 16_000), original, 'the same rate copies');
});
