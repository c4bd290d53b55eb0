// Several nodes behind nginx (deploy/nginx/): Debian's nginx with its JavaScript module
// runs the shipped template and script in front of two real Service Deck nodes on loopback, and the
// official openai client talks to nginx only, with the one API token in front. Node 1 serves chat
// (the real llama-server on a tiny model); node 2 serves speech (espeak-ng), transcription
// (pocketsphinx), images (the sd-cli stand-in) and a second chat profile. Checked: each request
// lands on the node that publishes its model (JSON bodies, multipart forms, the path), the lists
// are merged, a stream passes uncompressed with no event held back in nginx (node 1's worker is
// stopped mid-stream and every event it sent must arrive), while the node still generates it, and
// a client that leaves frees the node's slot, an unknown model gets the service's 404, the front token and each node's own token
// are kept apart, a node that is down is named, and nginx's access log holds no token or prompt.
import { writeFile } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { encodeWav, pcm16, readWav, resample } from '../../src/adapters/wav.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { findNginx, startNginx } from '../helpers/nginx.js';
import { matchesSchema } from '../helpers/openapi.js';
import { png } from '../helpers/png.js';
import { pocketsphinxPath } from '../helpers/speech.js';
import { stopProcess, until } from '../helpers/until.js';

const FRONT_TOKEN = 'sd-front-token-0123456789abcdefghijklmn';
const NODE1_TOKEN = 'sd-node1-token-0123456789abcdefghijklmn';
const NODE2_TOKEN = 'sd-node2-token-0123456789abcdefghijklmn';
const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const PROMPT = 'a red lighthouse under falling snow';

interface Status {
  counters: { by_route: Record<string, number> };
  workers: Array<{ kind: string; profile_id: string | null }>;
  queue: { running: Array<{ kind: string }> };
}

const status = async (b: Built) => (await (await b.admin('GET', '/api/v1/endpoint')).json()) as Status;
const routed = async (b: Built, route: string) => (await status(b)).counters.by_route[route] ?? 0;

async function publish(t: Parameters<typeof build>[0], b: Built, profile: { name: string; category: string; params: Record<string, unknown> }) {
  const created = await b.admin('POST', '/api/v1/profiles', profile);
  t.equal(created.status, 201, `profile ${profile.name} created`);
  const id = ((await created.json()) as { id: string }).id;
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, `profile ${profile.name} published`);
  return id;
}

/** A TCP tap in front of a node's API port: it forwards both ways and counts the SSE events the node sends. */
async function eventTap(t: Parameters<typeof build>[0], port: string): Promise<{ port: number; events: () => number }> {
  let events = 0;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(port), '127.0.0.1');
    sockets.add(client).add(upstream);
    let tail = '';
    upstream.on('data', (chunk: Buffer) => {
      const text = tail + chunk.toString('latin1');
      events += text.split('data: ').length - 1 - (tail.split('data: ').length - 1);
      tail = text.slice(-5);
      client.write(chunk);
    });
    client.pipe(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    upstream.on('end', () => client.end());
    upstream.on('error', close);
    client.on('error', close);
    client.on('close', () => upstream.end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  return { port: (server.address() as AddressInfo).port, events: () => events };
}

const found = await findNginx();
const missing =
  'missing' in found
    ? `nginx cannot run here: the Debian package ${found.missing} is not installed (sh scripts/install-debian.sh nginx libnginx-mod-http-js, as root)`
    : false;

t.test('two nodes behind nginx through the openai client', { skip: missing }, async (t) => {
  if ('missing' in found) return;
  const dir = await tempDir(t);
  // A model a little bigger than the smallest, so that a long answer takes long enough to watch.
  const model = await tinyModelIn(dir, 'slow.gguf', { embedding: 128, heads: 4, layers: 6 });
  const painterModel = path.join(dir, 'painter.gguf');
  await writeFile(painterModel, 'ok');
  const llama = await llamaServerPath();
  const node1 = await build(t, { env: { SERVICE_DECK_API_TOKEN: NODE1_TOKEN, SERVICE_DECK_LLAMA_SERVER: llama, SERVICE_DECK_GPUS: 'none' } });
  const node2 = await build(t, {
    env: {
      SERVICE_DECK_API_TOKEN: NODE2_TOKEN,
      SERVICE_DECK_LLAMA_SERVER: llama,
      SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(),
      SERVICE_DECK_SD_CLI: SD_CLI,
      SERVICE_DECK_GPUS: 'none',
    },
  });
  await node1.startEndpoint();
  await node2.startEndpoint();
  await publish(t, node1, { name: 'tiny', category: 'chat', params: { model, context: 8192, slots: 1 } });
  const tinyB = await publish(t, node2, { name: 'tiny-b', category: 'chat', params: { model, context: 2048, slots: 1 } });
  await publish(t, node2, { name: 'speaker', category: 'tts', params: {} });
  await publish(t, node2, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  await publish(t, node2, { name: 'painter', category: 'image', params: { model: painterModel, width: 64, height: 64, steps: 4, referenceImages: 4 } });

  const address = (b: Built) => new URL(b.apiUrl()).host;
  // nginx reaches node 1 through a tap that counts the SSE events node 1 sends, so the test can
  // tell what nginx has received from what it has passed on.
  const tap = await eventTap(t, new URL(node1.apiUrl()).port);
  const nginx = await startNginx(t, found, FRONT_TOKEN, [
    { address: `127.0.0.1:${tap.port}`, token: NODE1_TOKEN },
    { address: address(node2), token: NODE2_TOKEN },
  ]);
  const client = new OpenAI({ apiKey: FRONT_TOKEN, baseURL: `${nginx.url}/v1`, maxRetries: 0, timeout: 120_000 });
  const get = (route: string, token = FRONT_TOKEN) => fetch(`${nginx.url}${route}`, { headers: { authorization: `Bearer ${token}` } });

  // The lists, merged in node order.
  const listed = await client.models.list();
  t.same(listed.data.map((m) => m.id), ['tiny', 'tiny-b'], '/v1/models: the chat models of both nodes');
  matchesSchema(t, 'ListModelsResponse', { object: 'list', data: listed.data });
  const ids = async (route: string) => ((await (await get(route)).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  t.same(await ids('/v1/images/models'), ['service-image'], 'the image alias of node 2');
  t.same(await ids('/v1/audio/speech/models'), ['speaker']);
  t.same(await ids('/v1/audio/transcriptions/models'), ['listener']);
  t.equal((await client.models.retrieve('tiny-b')).id, 'tiny-b', 'a model retrieved by path from the node that has it');

  // Chat by model: the same route lands on either node.
  const answer = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: PROMPT }], max_tokens: 8 });
  matchesSchema(t, 'CreateChatCompletionResponse', answer, 'the JSON answer matches CreateChatCompletionResponse');
  t.same([answer.model, answer.usage?.completion_tokens], ['tiny', 8]);
  const other = await client.chat.completions.create({ model: 'tiny-b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  t.equal(other.model, 'tiny-b');
  t.same([await routed(node1, '/v1/chat/completions'), await routed(node2, '/v1/chat/completions')], [1, 1], "each chat went to its model's node");
  t.same((await status(node2)).workers.filter((w) => w.kind === 'chat').map((w) => w.profile_id), [tinyB], 'node 2 runs only its own chat profile');

  // Speech on node 2, then the words back through a multipart form (model read from the form).
  const spoken = await client.audio.speech.create({ model: 'speaker', input: 'hello world this is a test', voice: 'alloy', response_format: 'wav', language: 'English', speed: 0.75 } as OpenAI.Audio.SpeechCreateParams);
  t.equal(spoken.headers.get('content-type'), 'audio/wav');
  const wav = readWav(Buffer.from(await spoken.arrayBuffer()));
  t.ok(wav.seconds > 0.5, `a WAV of ${wav.seconds.toFixed(2)} s from node 2`);
  const heard = await client.audio.transcriptions.create({ model: 'listener', language: 'en', file: await toFile(encodeWav(resample(pcm16(wav), wav.sampleRate, 16_000), 16_000), 'speech.wav') });
  t.ok(heard.text.trim().length > 0, `transcribed on node 2: "${heard.text}"`);
  t.same([await routed(node1, '/v1/audio/speech'), await routed(node2, '/v1/audio/speech'), await routed(node2, '/v1/audio/transcriptions')], [0, 1, 1]);

  // The image alias, in JSON and in a multipart edit.
  const painted = await client.images.generate({ model: 'service-image', prompt: PROMPT });
  matchesSchema(t, 'ImagesResponse', painted);
  const edited = await client.images.edit({ model: 'service-image', prompt: PROMPT, image: [await toFile(png(8, 8), 'ref.png', { type: 'image/png' })] });
  t.ok(edited.data?.[0]?.b64_json, 'an edit with a reference image answered by node 2');
  t.same([await routed(node2, '/v1/images/generations'), await routed(node2, '/v1/images/edits')], [1, 1]);

  // A stream passes through as node 1 sends it, uncompressed, and nginx holds no event back: with
  // node 1's llama-server stopped (SIGSTOP) after the first event, every event node 1 has sent by
  // then (counted at the tap) reaches the client. A buffering nginx (proxy buffers, or gzip on event
  // streams) keeps a part-filled buffer until more comes, which never happens while it is stopped.
  const before = tap.events();
  const raw = await fetch(`${nginx.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${FRONT_TOKEN}`, 'content-type': 'application/json', 'accept-encoding': 'gzip' },
    body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'go' }], max_tokens: 4000, stream: true }),
  });
  t.equal(raw.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.equal(raw.headers.get('content-encoding'), null, 'an event stream is not compressed');
  const reader = raw.body!.getReader();
  let received = 0;
  let reads = 0;
  let reading = true;
  // Counted as the tap counts: an event's `data: ` may be split between two reads.
  let tail = '';
  const drained = (async () => {
    while (reading) {
      const { value, done } = await reader.read();
      if (done) break;
      reads += 1;
      const text = tail + Buffer.from(value).toString('latin1');
      received += text.split('data: ').length - 1 - (tail.split('data: ').length - 1);
      tail = text.slice(-5);
    }
  })();
  await until('the first event through nginx', async () => (received > 0 ? true : undefined));
  const generating = (await (await node1.admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> };
  const llamaPid = generating.workers.find((w) => w.kind === 'chat')?.pid;
  t.ok(llamaPid, "node 1's llama-server runs");
  await stopProcess(llamaPid!);
  try {
    // Node 1 sends what it had; then nothing more comes through the tap.
    let last = -1;
    const sent = await until('node 1 to send nothing more', async () => {
      const now = tap.events() - before;
      if (now === last) return now;
      last = now;
      await new Promise((resolve) => setTimeout(resolve, 300));
      return undefined;
    });
    const got = await until('every event node 1 sent to reach the client', async () => (received >= sent ? received : undefined), 10_000).catch(() => received);
    t.equal(got, sent, `nginx passed on every event node 1 sent before it was stopped (${sent} events, in ${reads} reads)`);
  } finally {
    process.kill(llamaPid!, 'SIGCONT');
    reading = false;
    await reader.cancel();
    await drained.catch(() => undefined);
  }

  // Its first event arrives while node 1 still generates the answer, and a client that leaves
  // frees node 1's slot long before the answer's end.
  // A loaded machine may read the status only after the whole answer was made: up to three tries.
  let chunks = 0;
  let runningAtFirst: number | undefined;
  let perToken = 0;
  for (let attempt = 0; attempt < 3 && runningAtFirst !== 1; attempt += 1) {
    await until('node 1 to free the slot of the stream read above', async () => ((await status(node1)).queue.running.length === 0 ? true : undefined), 60_000);
    const controller = new AbortController();
    const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'go' }], max_tokens: 4000, stream: true }, { signal: controller.signal });
    const began = Date.now();
    chunks = 0;
    runningAtFirst = undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content === undefined) continue;
      chunks += 1;
      if (chunks === 1) runningAtFirst = (await status(node1)).queue.running.length;
      if (chunks === 50) break;
    }
    perToken = (Date.now() - began) / chunks;
    controller.abort();
  }
  t.equal(runningAtFirst, 1, 'the first event came while node 1 still generated the answer');
  const freedIn = Date.now();
  await until('node 1 to free its slot', async () => ((await status(node1)).queue.running.length === 0 ? true : undefined), 60_000);
  const rest = perToken * (4000 - chunks);
  t.ok(Date.now() - freedIn < rest, `the slot was freed in ${Date.now() - freedIn} ms; the rest of the answer would take about ${Math.round(rest)} ms`);

  // An unknown model: the service's 404 body, from nginx itself.
  const unknown = await client.chat.completions.create({ model: 'nobody', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
  t.ok(unknown instanceof OpenAI.NotFoundError, 'an unknown model is not found');
  t.match((unknown as InstanceType<typeof OpenAI.NotFoundError>).error, { type: 'invalid_request_error', code: 'model_not_found', param: 'model' });
  const unknownVoice = await fetch(`${nginx.url}/v1/audio/speech`, {
    method: 'POST',
    headers: { authorization: `Bearer ${FRONT_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', input: 'x' }),
  });
  const refusal = await unknownVoice.json();
  t.equal(unknownVoice.status, 404, 'a chat model is no speech model on any node');
  matchesSchema(t, 'ErrorResponse', refusal, 'the 404 body matches ErrorResponse');
  const form = new FormData();
  form.append('model', 'nobody');
  form.append('file', new Blob([encodeWav(new Int16Array(1600), 16_000)]), 'x.wav');
  const unknownForm = await fetch(`${nginx.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${FRONT_TOKEN}` }, body: form });
  t.match([unknownForm.status, await unknownForm.json()], [404, { error: { code: 'model_not_found', message: /'nobody'/ } }], 'a multipart form naming an unknown model');

  // One token in front: nginx sends each node its own, and neither side takes the other's.
  t.ok((await new OpenAI({ apiKey: NODE1_TOKEN, baseURL: `${nginx.url}/v1`, maxRetries: 0 }).models.list().catch((e: unknown) => e)) instanceof OpenAI.AuthenticationError, "a node's own token is refused at nginx");
  t.equal((await fetch(`${node1.apiUrl()}/v1/models`, { headers: { authorization: `Bearer ${FRONT_TOKEN}` } })).status, 401, 'the front token is refused by a node');
  t.equal((await get('/health')).status, 200, 'both nodes healthy');

  // Node 2 goes down: its models disappear, the lists say which node is missing, its routes say why.
  t.equal((await node2.admin('POST', '/api/v1/endpoint/stop', {})).status, 200);
  const partial = await get('/v1/models');
  t.same(((await partial.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id), ['tiny'], "node 1's models still listed");
  t.equal(partial.headers.get('x-service-deck-nodes-missing'), 'node2');
  const down = await client.audio.speech.create({ model: 'speaker', input: 'x', voice: 'alloy' }).catch((e: unknown) => e);
  t.ok(down instanceof OpenAI.APIError && down.status === 502, 'a model nobody can confirm: 502');
  t.match((down as InstanceType<typeof OpenAI.APIError>).error, { code: 'node_unreachable', message: /node2/ });
  t.equal((await get('/health')).status, 502, '/health says a node is down');
  const still = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 1 });
  t.equal(still.model, 'tiny', "node 1's models are still served");

  const accessLog = await nginx.accessLog();
  t.ok(accessLog.split('\n').length > 10, "nginx's access log has the requests");
  for (const secret of [FRONT_TOKEN, NODE1_TOKEN, NODE2_TOKEN, PROMPT, 'hello world']) t.notOk(accessLog.includes(secret), `no "${secret.slice(0, 12)}…" in nginx's access log`);
});
