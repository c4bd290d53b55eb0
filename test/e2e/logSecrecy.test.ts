// The log rule (STYLE: "a test proves that secrets and prompts never reach the log") on requests
// that succeed and do their work, not only on refused ones (test/routes/logs.test.ts): chat as
// JSON and as SSE on the real llama-server, speech with espeak-ng, transcription with pocketsphinx,
// an image from the stand-in sd-cli, and the operator's chat and image tests. Every prompt and
// input carries a marker; the captured debug log must hold none of them, no answer, and no token,
// cookie, CSRF token or password, while it does hold an access line for every one of those requests.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import t from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { build, PASSWORD, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { pocketsphinxPath, speech } from '../helpers/speech.js';
import { until } from '../helpers/until.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const MARK = {
  chat: 'Zorblaxian teapot 4417',
  stream: 'Quindlewick lantern 5523',
  speech: 'Periwinkle marmoset 6631',
  image: 'a vermilion narwhal 7741 on ice',
  chatTest: 'Glimmerfen saddle 8851',
  imageTest: 'a turquoise aardvark 9961 in fog',
};

/**
 * Every key and string in `value`, and in the JSON texts and SSE `data:` events inside those
 * strings; every `content` string also goes to `contents`, so that an answer streamed one token per
 * event can be found whole.
 */
function strings(value: unknown, out: string[], contents: string[]): void {
  if (typeof value === 'string') {
    out.push(value);
    const events = value.split('\n').filter((line) => line.startsWith('data: ')).map((line) => line.slice(6));
    for (const text of [value, ...events]) {
      if (!/^\s*[[{"]/.test(text)) continue;
      try {
        strings(JSON.parse(text) as unknown, out, contents);
      } catch {
        // not JSON
      }
    }
  } else if (Array.isArray(value)) {
    for (const item of value) strings(item, out, contents);
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      out.push(key);
      if (key === 'content' && typeof item === 'string') contents.push(item);
      strings(item, out, contents);
    }
  }
}

async function profile(b: Built, body: object, publish = true): Promise<string> {
  const response = await b.admin('POST', '/api/v1/profiles', body);
  if (response.status !== 201) throw new Error(`profile: ${response.status} ${await response.text()}`);
  const id = ((await response.json()) as { id: string }).id;
  if (publish) await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  return id;
}

t.test('successful chat, speech, transcription, images and the operator tests leave no secret, prompt, input or answer in the log', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, {
    env: {
      SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(),
      SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(),
      SERVICE_DECK_SD_CLI: SD_CLI,
      SERVICE_DECK_GPUS: 'none',
    },
  });
  await b.startEndpoint();
  const chatModel = await tinyModelIn(dir);
  const imageModel = path.join(dir, 'painter.gguf');
  await writeFile(imageModel, 'ok');
  const chatId = await profile(b, { name: 'words', category: 'chat', params: { model: chatModel, context: 2048 } });
  await profile(b, { name: 'speaker', category: 'tts', params: {} });
  await profile(b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const imageId = await profile(b, { name: 'painter', category: 'image', params: { model: imageModel, width: 64, height: 72, steps: 4, referenceImages: 0 } });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `${b.apiUrl()}/v1`, maxRetries: 0, timeout: 120_000 });
  const answers: string[] = [];

  const json = await client.chat.completions.create({ model: 'words', messages: [{ role: 'system', content: `Say ${MARK.chat}` }, { role: 'user', content: MARK.chat }], max_tokens: 24 });
  answers.push(json.choices[0]?.message.content ?? '');

  const stream = await client.chat.completions.create({ model: 'words', messages: [{ role: 'user', content: MARK.stream }], max_tokens: 24, stream: true });
  let streamed = '';
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? '';
  answers.push(streamed);

  const spoken = await b.api('POST', '/v1/audio/speech', { model: 'speaker', input: MARK.speech, language: 'English' });
  t.equal(spoken.status, 200, 'speech answered');
  t.ok((await spoken.arrayBuffer()).byteLength > 1_000, 'with audio');

  const pcm = await speech(dir, 'open the door and turn on the light');
  const form = new FormData();
  form.set('model', 'listener');
  form.set('language', 'en');
  form.set('file', new Blob([encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000)]), 'recording.wav');
  const heard = await fetch(`${b.apiUrl()}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
  t.equal(heard.status, 200, 'transcription answered');
  answers.push(((await heard.json()) as { text: string }).text);

  const image = await b.api('POST', '/v1/images/generations', { model: 'painter', prompt: MARK.image });
  t.equal(image.status, 200, 'image answered');
  t.ok(((await image.json()) as { data: Array<{ b64_json: string }> }).data[0]?.b64_json, 'with an image');

  const chatTest = await b.admin('POST', '/api/v1/chat-tests/start', { profile_id: chatId, messages: [{ role: 'user', content: MARK.chatTest }], max_tokens: 16 });
  t.equal(chatTest.status, 202, 'chat test started');
  const tested = await until('the chat test to end', async () => {
    const { job } = (await (await b.admin('GET', '/api/v1/chat-tests')).json()) as { job: { phase: string; answer: string } | null };
    return job && ['done', 'failed', 'cancelled'].includes(job.phase) ? job : undefined;
  });
  t.equal(tested.phase, 'done', 'chat test done');
  answers.push(tested.answer);

  const imageTest = await b.admin('POST', '/api/v1/image-tests', { profile_id: imageId, prompt: MARK.imageTest });
  t.equal(imageTest.status, 202, 'image test started');
  const painted = await until('the image test to end', async () => {
    const { job } = (await (await b.admin('GET', '/api/v1/image-tests')).json()) as { job: { phase: string } | null };
    return job && ['done', 'failed', 'cancelled'].includes(job.phase) ? job : undefined;
  });
  t.equal(painted.phase, 'done', 'image test done');

  // The log has something to search: an access line for every request above, and the workers' lines.
  const entries = b.logLines.map((line) => JSON.parse(line) as Record<string, unknown>);
  for (const route of ['/v1/chat/completions', '/v1/audio/speech', '/v1/audio/transcriptions', '/v1/images/generations', '/api/v1/session', '/api/v1/chat-tests/start', '/api/v1/image-tests']) {
    t.ok(entries.some((e) => e.msg === 'access' && e.route === route && (e.status === 200 || e.status === 202)), `the log holds the access line of ${route}`);
  }
  t.ok(entries.length >= 30, `${entries.length} log lines were searched`);

  // The raw lines, and every string in them decoded: a leaked answer may sit JSON-escaped inside a
  // logged JSON text (a response body, an SSE event), where a plain search would miss it.
  const decoded: string[] = [];
  const contents: string[] = [];
  for (const entry of entries) strings(entry, decoded, contents);
  const log = `${b.logLines.join('')}\n${decoded.join('\n')}\n${contents.join('')}`;
  const { cookie, csrf } = b.session();
  const cookieValue = cookie.slice(cookie.indexOf('=') + 1);
  t.ok(cookieValue.length >= 16 && csrf.length >= 16, 'a real session cookie and CSRF token were used');
  const secrets: Array<[string, string]> = [
    ['the API token', TOKEN],
    ['the password', PASSWORD],
    ['the session cookie', cookieValue],
    ['the CSRF token', csrf],
    ...Object.entries(MARK).flatMap(([what, text]): Array<[string, string]> => [
      [`${what} input`, text],
      // The marker's made-up word alone: a prompt quoted in part is still caught.
      [`${what} input's marker word`, text.split(' ').find((word) => word.length >= 7) ?? text],
    ]),
  ];
  for (const answer of answers) {
    // Answers shorter than 8 characters could match anything; the tiny model and the engine give longer ones.
    const trimmed = answer.trim();
    t.ok(trimmed.length >= 8, `an answer to look for: ${JSON.stringify(trimmed.slice(0, 40))}`);
    if (trimmed.length >= 8) secrets.push([`answer ${JSON.stringify(trimmed.slice(0, 24))}`, trimmed]);
  }
  for (const [what, secret] of secrets) t.notOk(log.includes(secret), `the log holds no ${what}`);
});
