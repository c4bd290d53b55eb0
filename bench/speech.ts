// bench/speech: the service's own cost on speech, measured in one run against the engines alone.
//
// - Speech synthesis: the same paragraphs spoken by espeak-ng directly (the command line the TTS
//   worker runs, text on stdin, WAV on stdout, read by this process) and through
//   POST /v1/audio/speech (the WAV then also crosses HTTP to this process).
// - Transcription: the same 16 kHz recordings sent to a pocketsphinx engine process of our own
//   (native/pocketsphinx-worker.c, model loaded once) and through POST /v1/audio/transcriptions
//   (the service's own engine, loaded once).
//
// The two sides alternate request by request, so drift hits both alike; the first requests of each
// side are a warm-up. Prints p50 per side, and the median of the paired ratios (each round's
// service time over the engine's time on the same text or recording: the recordings differ in
// length, so pairs compare like with like). Target: service overhead under 5%.
//
// Speech is also taken apart, each figure against its noise floor (an A/A difference:
// the same thing measured twice in the round):
// - the service's own work beyond the engine and the WAV's transfer (service time less the
//   engine's time less a bare server's transfer of the same WAV), against the A/A difference of
//   the engine run twice: met when within it;
// - the transfer itself, from the answer's headers to its last byte, against a bare node:http
//   server sending the same bytes (fetched twice: its A/A difference): met when no slower than the
//   bare server by more than that difference.
// Run: npm run bench:speech [-- ROUNDS]
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { execa } from 'execa';
import { encodeWav, fixStreamedWav, pcm16, readWav, resample } from '../src/adapters/wav.js';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/system/observe/log.js';
import { startService } from '../src/compose.js';
import { espeakRate } from '../src/workers/speech/tts.js';
import { freePort } from '../test/helpers/build.js';
import { engineClient, pocketsphinxPath } from '../test/helpers/speech.js';

const ROUNDS = Number(process.argv[2] ?? 20);
const WARM_UP = 3;
const TOKEN = 'sd-bench-speech-token-0123456789abcdef';
/** Recordings for transcription: short sentences (pocketsphinx takes about a second each). */
const TEXTS = ['hello world this is a test of the speech service', 'good morning how are you today', 'open the door and turn on the light in the kitchen'];
/** Texts for synthesis: paragraphs of 300 to 400 characters, what a client sends for a spoken answer (the limit is 1000). */
const PARAGRAPHS = [
  'The weather today will be mostly sunny with a light breeze from the west. In the afternoon a few clouds may pass over the hills, but no rain is expected before the evening. Temperatures will reach about twenty degrees, so a light jacket should be enough for a walk in the park or a visit to the market in the old town.',
  'Your appointment has been moved to Thursday at half past ten. Please bring the documents we talked about on the phone, and arrive a few minutes early so that we can check them together. If this time does not suit you, call the office before Wednesday noon and we will find another slot in the same week.',
  'To reset the device, hold the power button for ten seconds until the light turns orange, then release it and wait. The device restarts on its own and shows the welcome screen after about a minute. Your settings are kept, but the saved networks are removed, so you will need to enter the password of your wireless network again.',
];

const p50 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

/** espeak-ng as the TTS worker runs it. */
async function espeakDirect(text: string): Promise<Buffer> {
  const result = await execa('espeak-ng', ['-v', 'en-us+m3', '-s', String(espeakRate(0.75)), '--stdin', '--stdout'], { input: text, encoding: 'buffer' });
  return Buffer.from(result.stdout);
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-speech-'));
const engine = engineClient(await pocketsphinxPath());
const engineReady = engine.next();
const log = createLogger({ level: 'warn', destination: { write: (line: string) => void process.stderr.write(line) } });
const env: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  SERVICE_DECK_API_TOKEN: TOKEN,
  SERVICE_DECK_ADMIN_PASSWORD: 'bench speech password',
  SERVICE_DECK_CACHE_DIR: path.join(dir, 'cache'),
  SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(),
  SERVICE_DECK_GPUS: 'none',
};
const { service } = await startService(loadConfig({ stateDir: path.join(dir, 'state') }, env), { log, adminPort: 0 });
try {
  for (const [name, category, params] of [
    ['speaker', 'tts', { backend: 'espeak-ng', speed: 0.75, device: 'cpu', memoryMiB: 0 }],
    ['listener', 'stt', { backend: 'pocketsphinx', threads: 2, defaultLanguage: 'en' }],
  ] as const) {
    const profile = await service.profiles.create({ name, category, params } as Parameters<typeof service.profiles.create>[0]);
    await service.profiles.setPublished(profile.id, true);
  }
  const apiPort = await freePort();
  service.listener().send({ type: 'endpoint.config', port: apiPort });
  service.listener().send({ type: 'endpoint.start' });
  const until = Date.now() + 10_000;
  while (!service.inferenceAddress() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
  const api = `http://127.0.0.1:${service.inferenceAddress()?.port}`;
  await engineReady;

  /** Speaks one text through the service; `transfer` gets the ms from the answer's headers to its last byte. */
  const speak = async (text: string, transfer?: number[]) => {
    const response = await fetch(`${api}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'speaker', input: text, language: 'English' }),
    });
    if (response.status !== 200) throw new Error(`speech: ${response.status} ${await response.text()}`);
    const headers = performance.now();
    const wav = Buffer.from(await response.arrayBuffer());
    transfer?.push(performance.now() - headers);
    return wav;
  };
  const transcribe = async (wav: Buffer) => {
    const form = new FormData();
    form.append('model', 'listener');
    form.append('language', 'en');
    form.append('file', new Blob([wav]), 'speech.wav');
    const response = await fetch(`${api}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
    if (response.status !== 200) throw new Error(`transcription: ${response.status} ${await response.text()}`);
    return (await response.json()) as { text: string };
  };

  // The recordings: each text spoken once, resampled to 16 kHz mono.
  const recordings = await Promise.all(
    TEXTS.map(async (text) => {
      const wav = readWav(fixStreamedWav(await espeakDirect(text)));
      const samples = resample(pcm16(wav), wav.sampleRate, 16_000);
      return { wav: encodeWav(samples, 16_000), pcm: Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength) };
    }),
  );

  // The transfer floor: the same WAV files from a bare HTTP server in this process, fetched the same
  // way, so that what the service adds can be told apart from carrying a WAV over HTTP at all.
  const spoken = await Promise.all(PARAGRAPHS.map((text) => espeakDirect(text).then(fixStreamedWav)));
  const bare = http.createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      const wav = spoken[Number(request.url?.slice(1))]!;
      response.writeHead(200, { 'content-type': 'audio/wav', 'content-length': wav.length });
      response.end(wav);
    });
  });
  await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
  const barePort = (bare.address() as { port: number }).port;
  /** Fetches one WAV from the bare server; `transfer` gets the ms from its headers to its last byte. */
  const fetchBare = async (index: number, transfer?: number[]) => {
    const response = await fetch(`http://127.0.0.1:${barePort}/${index}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    const headers = performance.now();
    const wav = Buffer.from(await response.arrayBuffer());
    transfer?.push(performance.now() - headers);
    return wav;
  };

  const times = {
    ttsDirect: [] as number[],
    ttsAgain: [] as number[],
    ttsService: [] as number[],
    ttsFloor: [] as number[],
    sttDirect: [] as number[],
    sttService: [] as number[],
    /** Headers to last byte: the service's answer, the bare server's, and the bare server's again. */
    transferService: [] as number[],
    transferBare: [] as number[],
    transferBareAgain: [] as number[],
  };
  const time = async (into: number[] | undefined, work: () => Promise<unknown>) => {
    const started = performance.now();
    await work();
    into?.push(performance.now() - started);
  };
  const began = performance.now();
  for (let round = 0; round < ROUNDS + WARM_UP; round += 1) {
    const keep = round >= WARM_UP;
    const text = PARAGRAPHS[round % PARAGRAPHS.length]!;
    const recording = recordings[round % recordings.length]!;
    const order = round % 2 === 0;
    for (const side of order ? ['direct', 'service'] : ['service', 'direct']) {
      if (side === 'direct') {
        await time(keep ? times.ttsDirect : undefined, () => espeakDirect(text));
        await time(keep ? times.ttsAgain : undefined, () => espeakDirect(text));
        await time(keep ? times.ttsFloor : undefined, () => fetchBare(round % PARAGRAPHS.length, keep ? times.transferBare : undefined));
        await fetchBare(round % PARAGRAPHS.length, keep ? times.transferBareAgain : undefined);
        await time(keep ? times.sttDirect : undefined, () => engine.transcribe(recording.pcm));
      } else {
        await time(keep ? times.ttsService : undefined, () => speak(text, keep ? times.transferService : undefined));
        await time(keep ? times.sttService : undefined, () => transcribe(recording.wav));
      }
    }
  }
  const row = (label: string, direct: number[], through: number[]) => {
    const [d, s] = [p50(direct), p50(through)];
    const paired = p50(through.map((t, i) => t / direct[i]!));
    const overhead = paired - 1;
    console.log(
      `${label.padEnd(30)}${d.toFixed(1).padStart(10)}${s.toFixed(1).padStart(10)}${paired.toFixed(3).padStart(9)}   overhead ${(overhead * 100).toFixed(1)}% (target < 5%: ${overhead < 0.05 ? 'met' : 'MISSED'})`,
    );
    return overhead;
  };
  console.log(`bench/speech: ${ROUNDS} rounds, ${os.cpus().length} CPUs, node ${process.version}; p50 in ms`);
  console.log(`${''.padEnd(30)}${'engine'.padStart(10)}${'service'.padStart(10)}${'paired'.padStart(9)}`);
  const overheads = [row('speech (espeak-ng)', times.ttsDirect, times.ttsService), row('transcription (pocketsphinx)', times.sttDirect, times.sttService)];
  // Speech, taken apart: the engine, the bare transfer of its WAV, and what is left for the service.
  const floor = p50(times.ttsFloor);
  const own = p50(times.ttsService.map((t, i) => t - times.ttsDirect[i]! - times.ttsFloor[i]!));
  console.log(
    `speech, taken apart: carrying the WAV (${(spoken[0]!.length / 1e6).toFixed(2)} MB) over loopback HTTP alone takes ${floor.toFixed(1)} ms (${((floor / p50(times.ttsDirect)) * 100).toFixed(1)}% of the engine's time); ` +
      `the service's own work on top of engine and transfer: ${own.toFixed(1)} ms (${((own / p50(times.ttsDirect)) * 100).toFixed(1)}%)`,
  );
  // Each part against its noise floor.
  const noise = p50(times.ttsAgain.map((t, i) => Math.abs(t - times.ttsDirect[i]!)));
  const ownMet = own <= noise;
  console.log(
    `speech, the service's own work: ${own.toFixed(2)} ms beyond engine and transfer; the engine run twice differs by ${noise.toFixed(2)} ms (A/A, p50 of the pairs) ` +
      `(target: within that noise: ${ownMet ? 'met' : 'MISSED'})`,
  );
  const [viaService, bareTransfer, bareAgain] = [p50(times.transferService), p50(times.transferBare), p50(times.transferBareAgain)];
  const transferNoise = p50(times.transferBareAgain.map((t, i) => Math.abs(t - times.transferBare[i]!)));
  const transferMet = viaService - bareTransfer <= transferNoise;
  console.log(
    `speech, the WAV's transfer (headers to last byte, p50): service ${viaService.toFixed(3)} ms, a bare node:http server ${bareTransfer.toFixed(3)} ms ` +
      `(again ${bareAgain.toFixed(3)} ms, A/A ${transferNoise.toFixed(3)} ms) (target: no slower than the bare server beyond its A/A: ${transferMet ? 'met' : 'MISSED'})`,
  );
  bare.close();
  console.log(`${((performance.now() - began) / 1000).toFixed(1)} s`);
  if (overheads.some((o) => o >= 0.05) || !ownMet || !transferMet) process.exitCode = 1;
} finally {
  engine.child.kill('SIGTERM');
  await service.shutdown();
  await rm(dir, { recursive: true, force: true });
}
