// Speech: text in, a WAV file out (16-bit PCM mono; espeak-ng speaks at 22 050 Hz). The demo's
// `speaker` speaks German unless the request names another `language`, an extension field of
// this endpoint that the openai types do not list. The files go to a new temporary folder.
// Run: TOKEN=sd-... node examples/speech.mjs     (SPEAKER=<profile name> for another TTS profile)
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, SPEAKER = 'speaker' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

const folder = await mkdtemp(path.join(os.tmpdir(), 'service-deck-speech-'));
async function save(name, speech) {
  const wav = Buffer.from(await speech.arrayBuffer());
  await writeFile(path.join(folder, name), wav);
  console.log(`${path.join(folder, name)}: ${wav.length} bytes at ${wav.readUInt32LE(24)} Hz`); // the header's sample rate
}

const morning = await client.audio.speech.create({ model: SPEAKER, voice: 'alloy', input: 'Guten Morgen!', response_format: 'wav' });
await save('morning.wav', morning);

const hello = await client.audio.speech.create({
  model: SPEAKER,
  input: 'Hello world',
  voice: 'nova',
  language: 'English',
  speed: 0.9,
  response_format: 'wav',
});
await save('hello.wav', hello);
