// Transcription. The endpoint takes a 16 kHz mono 16-bit PCM WAV (at most 120 s and 8 MiB). This
// script makes one on a bare machine: it asks the service's own `speaker` for English speech
// (22 050 Hz), converts it to 16 kHz and sends it to the demo's `listener` (pocketsphinx, English
// by default). Given a file, it converts and transcribes that instead: any 16-bit PCM WAV, at any
// rate, mono or with more channels.
// Run: TOKEN=sd-... node examples/transcribe.mjs [recording.wav]
//      (SPEAKER=, LISTENER=<profile name> for other TTS and STT profiles)
import { readFile } from 'node:fs/promises';
import OpenAI, { toFile } from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, SPEAKER = 'speaker', LISTENER = 'listener' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

/** The sample rate and the mono samples of a 16-bit PCM WAV file (channels are averaged). */
function pcmOf(wav) {
  if (wav.toString('latin1', 0, 4) !== 'RIFF' || wav.toString('latin1', 8, 12) !== 'WAVE') throw new Error('not a WAV file');
  let fmt;
  for (let at = 12; at + 8 <= wav.length; ) {
    const id = wav.toString('latin1', at, at + 4);
    const size = Math.min(wav.readUInt32LE(at + 4), wav.length - at - 8);
    if (id === 'fmt ') fmt = { tag: wav.readUInt16LE(at + 8), channels: wav.readUInt16LE(at + 10), rate: wav.readUInt32LE(at + 12), bits: wav.readUInt16LE(at + 22) };
    if (id === 'data') {
      if (!fmt || fmt.bits !== 16 || (fmt.tag !== 1 && fmt.tag !== 0xfffe)) throw new Error('not 16-bit PCM: convert it first, e.g. sox in.wav -b 16 out.wav');
      const frames = Math.floor(size / (2 * fmt.channels));
      const samples = new Float64Array(frames);
      for (let i = 0; i < frames; i += 1) {
        for (let c = 0; c < fmt.channels; c += 1) samples[i] += wav.readInt16LE(at + 8 + 2 * (i * fmt.channels + c)) / fmt.channels;
      }
      return { rate: fmt.rate, samples };
    }
    at += 8 + size + (size % 2);
  }
  throw new Error('the WAV file has no data chunk');
}

/**
 * The samples at another rate: each output sample is a weighted mean of the input samples around
 * its position, the weights falling linearly to zero over one output sample's span (at least one
 * input sample). Going down, that smooths away what the lower rate cannot hold.
 */
function resample(samples, from, to) {
  const step = from / to;
  const reach = Math.max(1, step);
  const out = new Int16Array(Math.floor(samples.length / step));
  for (let i = 0; i < out.length; i += 1) {
    const centre = i * step;
    let sum = 0;
    let total = 0;
    for (let j = Math.max(0, Math.ceil(centre - reach)); j <= Math.min(samples.length - 1, Math.floor(centre + reach)); j += 1) {
      const weight = 1 - Math.abs(j - centre) / reach;
      sum += samples[j] * weight;
      total += weight;
    }
    out[i] = Math.max(-32768, Math.min(32767, Math.round(total > 0 ? sum / total : 0)));
  }
  return out;
}

/** A 16 kHz mono 16-bit PCM WAV file of the samples. */
function wav16k(samples) {
  const rate = 16_000;
  const file = Buffer.alloc(44 + samples.length * 2);
  file.write('RIFF', 0, 'latin1');
  file.writeUInt32LE(file.length - 8, 4);
  file.write('WAVE', 8, 'latin1');
  file.write('fmt ', 12, 'latin1');
  file.writeUInt32LE(16, 16); // the fmt chunk's size
  file.writeUInt16LE(1, 20); // PCM
  file.writeUInt16LE(1, 22); // mono
  file.writeUInt32LE(rate, 24);
  file.writeUInt32LE(rate * 2, 28); // bytes per second
  file.writeUInt16LE(2, 32); // bytes per frame
  file.writeUInt16LE(16, 34); // bits per sample
  file.write('data', 36, 'latin1');
  file.writeUInt32LE(samples.length * 2, 40);
  Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength).copy(file, 44);
  return file;
}

const recording = process.argv[2];
let source;
if (recording) source = await readFile(recording);
else {
  const text = 'hello world this is a test';
  const spoken = await client.audio.speech.create({ model: SPEAKER, input: text, language: 'English', speed: 0.75, response_format: 'wav' });
  source = Buffer.from(await spoken.arrayBuffer());
  console.log(`said:  ${text}`);
}
const { rate, samples } = pcmOf(source);
const wav = wav16k(resample(samples, rate, 16_000));

// Send the file as a buffer (toFile): a stream (fs.createReadStream) goes out as a chunked
// upload, which the endpoint refuses. No language: the profile's defaultLanguage applies.
const heard = await client.audio.transcriptions.create({ model: LISTENER, file: await toFile(wav, 'speech.wav') });
console.log(`heard: ${heard.text}`);
