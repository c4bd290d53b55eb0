// `service-deck demo` as a user runs it: it generates the tiny chat model, creates and publishes
// `tiny-chat`, starts the inference listener, and the official openai client chats with it through
// the real llama-server. A second run keeps what the first made.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { encodeWav } from '../../src/adapters/wav.js';
import t from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { llamaServerPath } from '../helpers/llama.js';
import { spawnCli } from '../helpers/spawn.js';
import { speech as spoken } from '../helpers/speech.js';

const DEMO_TOKEN = 'sd-demo-token-0123456789abcdefghijklmnop';

t.test('the demo serves a chat model out of the box', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  // The inference port of this test (the default 8120 may be taken on the machine).
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: false, port: apiPort, published: [] }), { mode: 0o600 });
  const env = {
    SERVICE_DECK_STATE_DIR: stateDir,
    SERVICE_DECK_API_TOKEN: DEMO_TOKEN,
    SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(),
    SERVICE_DECK_GPUS: 'none',
  };
  const demo = spawnCli(t, ['demo', '--ui-port', String(uiPort)], env);
  await demo.waitFor(/Ctrl-C stops the service/, 60_000);
  t.match(demo.output(), /operator password \(shown once\)/);
  t.match(demo.output(), /tiny-chat \(chat, published\), speaker \(tts, published\), listener \(stt, published\), painter \(image, published\)/);
  const client = new OpenAI({ apiKey: DEMO_TOKEN, baseURL: `http://127.0.0.1:${apiPort}/v1`, maxRetries: 0 });
  t.same((await client.models.list()).data.map((m) => m.id), ['tiny-chat']);
  const answer = await client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8 });
  t.equal(answer.usage?.completion_tokens, 8, 'the demo model answers');
  const speech = await fetch(`http://127.0.0.1:${apiPort}/v1/audio/speech`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'speaker', input: 'Hallo!' }),
  });
  t.equal(speech.headers.get('content-type'), 'audio/wav', 'the demo speaks');
  const ids = async (route: string) => ((await client.get(route)) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  t.same(await ids('/audio/speech/models'), ['speaker'], 'the speech profile is published');
  t.same(await ids('/audio/transcriptions/models'), ['listener'], 'the transcription profile is published');
  // The client's defaults: no language. The demo's listener transcribes English by default
  // (pocketsphinx has no German model), so the call as the openai docs show it works.
  const pcm = await spoken(stateDir, 'hello world this is a test');
  const heard = await client.audio.transcriptions.create({ model: 'listener', file: await toFile(encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2), 16_000), 'hello.wav') });
  t.match(heard.text, /hello|world|test/, `the demo transcribes with the client's defaults: "${heard.text}"`);
  t.same(await ids('/images/models'), [], 'the image profile is not executable: no service-image yet');
  const images = await fetch(`http://127.0.0.1:${apiPort}/v1/images/generations`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'service-image', prompt: 'a cat' }),
  });
  t.equal(images.status, 404);
  t.equal(((await images.json()) as { error: { code: string } }).error.code, 'model_not_found');
  demo.child.kill('SIGTERM');
  t.same(await demo.exited, { code: 0, signal: null }, 'SIGTERM ends it cleanly');

  // A listener as an earlier demo made it: no defaultLanguage, so the spec's de (a blocker on pocketsphinx).
  const listenerFile = path.join(stateDir, 'profiles', 'demo-stt.json');
  const old = JSON.parse(await readFile(listenerFile, 'utf8')) as { params: Record<string, unknown> };
  delete old.params.defaultLanguage;
  await writeFile(listenerFile, JSON.stringify(old), { mode: 0o600 });

  const again = spawnCli(t, ['demo', '--ui-port', String(uiPort)], env);
  await again.waitFor(/Ctrl-C stops the service/, 60_000);
  t.notMatch(again.output(), /generated the tiny chat model|password \(shown once\)/, 'the second run reuses the model and the password');
  t.match(again.output(), /4 profile\(s\): tiny-chat/, 'nothing was made twice');
  t.match(again.output(), /the listener profile transcribes English by default now/, "an earlier demo's listener is moved to English");
  t.match(JSON.parse(await readFile(listenerFile, 'utf8')), { params: { defaultLanguage: 'en' } });
  again.child.kill('SIGTERM');
  await again.exited;
});
