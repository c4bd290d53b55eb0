// Every field of OpenAI's request schemas has a fate on its route (honoured,
// passed to the worker, ignored where harmless, or refused with a message that says it is not
// offered); only a field that no OpenAI schema names is 400 unknown_parameter.
//
// How each fate is checked, from openapi.json's own field lists (allOf/$ref resolved):
// - the route's fate table names exactly the schema's fields, and docs/api.md lists the same fates;
// - each field alone, with a plausible value (itself valid against openapi.json), through the real
//   service with a model that is not published: 404 model_not_found means the request passed
//   every check of the route before the profile look-up (validation, form reading), so the field
//   was accepted; a refused field is the 400 invalid_value naming it, whatever follows. Values an
//   honoured field does not offer (n 2, mp3, jpeg, sse…) are refused the same way;
// - every accepted field at once, with its plausible value, through the real worker (llama-server
//   on the tiny model, espeak-ng, pocketsphinx; sd-cli's stand-in for images): 200, so a passed
//   field does not break the worker and an ignored one changes nothing that fails;
// - the chat body the worker gets carries the passed fields and none of the ignored ones.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { encodeWav } from '../../src/adapters/wav.js';
import { IMAGE_EDIT_FIELDS, IMAGE_GENERATION_FIELDS, generationSchema } from '../../src/workers/image/image.schema.js';
import { SPEECH_EXTENSIONS, SPEECH_FIELDS, speechRequestSchema } from '../../src/workers/speech/speech.schema.js';
import { TRANSCRIPTION_FIELDS } from '../../src/workers/speech/transcription.schema.js';
import { CHAT_EXTENSIONS, CHAT_FIELDS, chatRequestSchema, upstreamBody } from '../../src/workers/chat/chat.schema.js';
import { chatRequestOf } from '../../src/workers/chat/responses.js';
import { RESPONSES_FIELDS, responsesRequestSchema } from '../../src/workers/chat/responses.schema.js';
import { FATES, type Fate, type FieldFates } from '../../src/workers/fields.js';
import { chatParamsSchema } from '../../src/store/profile.schema.js';
import { build, tempDir, TOKEN, type Built } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { png } from '../helpers/png.js';
import { matchesSchema, OPENAPI_FILE, requestFields, SCHEMA_SKIP } from '../helpers/openapi.js';
import { pocketsphinxPath } from '../helpers/speech.js';

const SD_CLI = fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url));
const DOCS = fileURLToPath(new URL('../../docs/api.md', import.meta.url));
/** A model name that is not published: a request that reaches the look-up gets 404 model_not_found. */
const NOBODY = 'nobody-published';

/** Half a second of silence: a valid recording. */
const WAV = encodeWav(new Int16Array(8_000), 16_000);

type Body = Record<string, unknown>;

interface RequestTable {
  schema: string;
  route: string;
  multipart: boolean;
  fates: FieldFates;
  /** The fields the route's zod schema takes (JSON routes): exactly the fates' and the extensions'. */
  schemaKeys?: string[];
  extensions?: readonly string[];
  /** The fields every request carries (the required ones), with the model set per test. */
  base: (model: string) => Body;
  /** Each field of the OpenAI schema: a plausible body fragment that carries it. */
  plausible: Record<string, Body>;
  /** Values an honoured field does not offer: refused with the field as param. */
  refusedValues: Array<[string, Body]>;
  /** Files of a multipart form, by field. */
  files?: Record<string, Buffer>;
  /** How a stream of the route ends (chat completions: `data: [DONE]`). */
  streamEnd?: RegExp;
}

const tools = [{ type: 'function', function: { name: 'weather', description: 'the weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
/** The same function as a Responses API tool. */
const responseTools = [{ type: 'function', name: 'weather', description: 'the weather', parameters: { type: 'object', properties: { city: { type: 'string' } } }, strict: false }];

/** The plausible values of the fields image generations and edits share. */
const IMAGE_PLAUSIBLE: Record<string, Body> = {
  model: {},
  prompt: { prompt: 'a red boat' },
  n: { n: 1 },
  response_format: { response_format: 'b64_json' },
  output_format: { output_format: 'png' },
  background: { background: 'opaque' },
  stream: { stream: false },
  partial_images: { partial_images: 0 },
  size: { size: '512x512' },
  quality: { quality: 'high' },
  output_compression: { output_compression: 80 },
  user: { user: 'user-1234' },
};

/** What the image routes' honoured fields do not offer. */
const IMAGE_REFUSED_VALUES: Array<[string, Body]> = [
  ['n', { n: 2 }],
  ['response_format', { response_format: 'url' }],
  ['output_format', { output_format: 'jpeg' }],
  ['background', { background: 'transparent' }],
  ['stream', { stream: true }],
  ['partial_images', { partial_images: 2 }],
];

const TABLES: RequestTable[] = [
  {
    schema: 'CreateChatCompletionRequest',
    route: '/v1/chat/completions',
    multipart: false,
    fates: CHAT_FIELDS,
    schemaKeys: Object.keys(chatRequestSchema.shape),
    extensions: CHAT_EXTENSIONS,
    base: (model) => ({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 }),
    plausible: {
      model: {},
      messages: { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hello' }] }] },
      temperature: { temperature: 0.7 },
      top_p: { top_p: 0.9 },
      frequency_penalty: { frequency_penalty: 0.1 },
      presence_penalty: { presence_penalty: 0.1 },
      logit_bias: { logit_bias: { '42': -5 } },
      seed: { seed: 7 },
      stop: { stop: ['\n\n'] },
      logprobs: { logprobs: true },
      top_logprobs: { logprobs: true, top_logprobs: 2 },
      tools: { tools },
      tool_choice: { tools, tool_choice: 'auto' },
      parallel_tool_calls: { tools, parallel_tool_calls: false },
      response_format: { response_format: { type: 'json_object' } },
      max_tokens: { max_tokens: 6 },
      max_completion_tokens: { max_completion_tokens: 6 },
      n: { n: 1 },
      stream: { stream: true },
      stream_options: { stream: true, stream_options: { include_usage: true } },
      reasoning_effort: { reasoning_effort: 'low' },
      modalities: { modalities: ['text'] },
      store: { store: false },
      user: { user: 'user-1234' },
      metadata: { metadata: { team: 'docs' } },
      safety_identifier: { safety_identifier: 'a1b2c3' },
      prompt_cache_key: { prompt_cache_key: 'faq-bot' },
      prompt_cache_retention: { prompt_cache_retention: '24h' },
      prompt_cache_options: { prompt_cache_options: { ttl: '30m' } },
      service_tier: { service_tier: 'flex' },
      verbosity: { verbosity: 'low' },
      prediction: { prediction: { type: 'content', content: 'Hello there' } },
      audio: { modalities: ['text'], audio: { voice: 'alloy', format: 'wav' } },
      web_search_options: { web_search_options: { search_context_size: 'low' } },
      moderation: { moderation: { model: 'omni-moderation-latest' } },
      functions: { functions: [{ name: 'weather', parameters: { type: 'object' } }] },
      function_call: { function_call: 'none' },
    },
    refusedValues: [
      ['n', { n: 2 }],
      ['store', { store: true }],
      ['modalities', { modalities: ['text', 'audio'] }],
    ],
  },
  {
    schema: 'CreateResponse',
    route: '/v1/responses',
    multipart: false,
    fates: RESPONSES_FIELDS,
    schemaKeys: Object.keys(responsesRequestSchema.shape),
    // OpenAI's least max_output_tokens is 16.
    base: (model) => ({ model, input: 'Hello', max_output_tokens: 16 }),
    streamEnd: /^event: response\.(completed|incomplete)$/m,
    plausible: {
      model: {},
      input: { input: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Hello' }] },
      instructions: { instructions: 'Be brief.' },
      temperature: { temperature: 0.7 },
      top_p: { top_p: 0.9 },
      top_logprobs: { include: ['message.output_text.logprobs'], top_logprobs: 2 },
      include: { include: ['message.output_text.logprobs'] },
      max_output_tokens: { max_output_tokens: 20 },
      tools: { tools: responseTools },
      tool_choice: { tools: responseTools, tool_choice: 'auto' },
      parallel_tool_calls: { tools: responseTools, parallel_tool_calls: false },
      text: { text: { format: { type: 'json_object' }, verbosity: 'low' } },
      reasoning: { reasoning: { effort: 'low', summary: 'auto' } },
      stream: { stream: true },
      stream_options: { stream: true, stream_options: { include_obfuscation: false } },
      truncation: { truncation: 'disabled' },
      store: { store: false },
      background: { background: false },
      metadata: { metadata: { team: 'docs' } },
      user: { user: 'user-1234' },
      safety_identifier: { safety_identifier: 'a1b2c3' },
      prompt_cache_key: { prompt_cache_key: 'faq-bot' },
      prompt_cache_retention: { prompt_cache_retention: '24h' },
      prompt_cache_options: { prompt_cache_options: { ttl: '30m' } },
      service_tier: { service_tier: 'flex' },
      max_tool_calls: { max_tool_calls: 2 },
      previous_response_id: { previous_response_id: 'resp_123' },
      conversation: { conversation: 'conv_123' },
      prompt: { prompt: { id: 'pmpt_123' } },
      context_management: { context_management: [{ type: 'compaction', compact_threshold: 2000 }] },
      moderation: { moderation: { model: 'omni-moderation-latest' } },
    },
    refusedValues: [
      ['background', { background: true }],
      ['truncation', { truncation: 'auto' }],
    ],
  },
  {
    schema: 'CreateImageRequest',
    route: '/v1/images/generations',
    multipart: false,
    fates: IMAGE_GENERATION_FIELDS,
    schemaKeys: Object.keys(generationSchema.shape),
    base: (model) => ({ model, prompt: 'a lighthouse at dusk' }),
    plausible: { ...IMAGE_PLAUSIBLE, moderation: { moderation: 'low' }, style: { style: 'natural' } },
    refusedValues: IMAGE_REFUSED_VALUES,
  },
  {
    schema: 'CreateImageEditRequest',
    route: '/v1/images/edits',
    multipart: true,
    fates: IMAGE_EDIT_FIELDS,
    base: (model) => ({ model, prompt: 'the same in winter' }),
    files: { 'image[]': png() },
    plausible: { ...IMAGE_PLAUSIBLE, image: {}, input_fidelity: { input_fidelity: 'high' }, mask: { mask: png() } },
    refusedValues: IMAGE_REFUSED_VALUES,
  },
  {
    schema: 'CreateSpeechRequest',
    route: '/v1/audio/speech',
    multipart: false,
    fates: SPEECH_FIELDS,
    schemaKeys: Object.keys(speechRequestSchema.shape),
    extensions: SPEECH_EXTENSIONS,
    base: (model) => ({ model, input: 'Hello world', voice: 'alloy' }),
    plausible: {
      model: {},
      input: { input: 'Good morning' },
      voice: { voice: 'nova' },
      response_format: { response_format: 'wav' },
      speed: { speed: 1.25 },
      stream_format: { stream_format: 'audio' },
      instructions: { instructions: 'Speak in a cheerful tone.' },
    },
    refusedValues: [
      ['response_format', { response_format: 'mp3' }],
      ['stream_format', { stream_format: 'sse' }],
    ],
  },
  {
    schema: 'CreateTranscriptionRequest',
    route: '/v1/audio/transcriptions',
    multipart: true,
    fates: TRANSCRIPTION_FIELDS,
    base: (model) => ({ model }),
    files: { file: WAV },
    plausible: {
      model: {},
      file: {},
      language: { language: 'en' },
      response_format: { response_format: 'json' },
      stream: { stream: false },
      prompt: { prompt: 'A test recording.' },
      temperature: { temperature: 0.2 },
      keywords: { keywords: ['Service', 'Deck'] },
      languages: { languages: ['en', 'de'] },
      include: { include: ['logprobs'] },
      timestamp_granularities: { timestamp_granularities: ['segment'] },
      chunking_strategy: { chunking_strategy: 'auto' },
      known_speaker_names: { known_speaker_names: ['agent'] },
      known_speaker_references: { known_speaker_references: ['data:audio/wav;base64,UklGRg=='] },
    },
    refusedValues: [
      ['stream', { stream: true }],
      ['response_format', { response_format: 'verbose_json' }],
    ],
  },
];

/** The body as openapi.json sees it: files are binary strings there. */
function asOpenapi(table: RequestTable, body: Body): Body {
  const out: Body = {};
  for (const [key, value] of Object.entries({ ...body, ...table.files })) {
    const name = key.replace(/\[\]$/, '');
    out[name] = Buffer.isBuffer(value) ? (name === 'image' ? ['<binary>'] : '<binary>') : value;
  }
  return out;
}

/** Sends `body` to the table's route: JSON, or a multipart form whose arrays go as `name[]` parts. */
async function send(b: Built, table: RequestTable, body: Body): Promise<Response> {
  if (!table.multipart) return b.api('POST', table.route, body);
  const form = new FormData();
  for (const [key, value] of Object.entries({ ...body, ...table.files })) {
    if (Buffer.isBuffer(value)) form.append(key, new Blob([value]), key.startsWith('image') || key === 'mask' ? 'picture.png' : 'speech.wav');
    else if (Array.isArray(value)) for (const item of value) form.append(`${key}[]`, String(item));
    else form.append(key, String(value));
  }
  return fetch(`${b.apiUrl()}${table.route}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form });
}

/** The fates docs/api.md lists under the heading that names `schema`: field → fate. */
function documentedFates(docs: string, schema: string): Record<string, string> {
  const lines = docs.split('\n');
  const start = lines.findIndex((line) => line.startsWith('#### ') && line.includes(`\`${schema}\``));
  const fates: Record<string, string> = {};
  if (start < 0) return fates;
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith('#')) break;
    const cells = line.split('|').map((cell) => cell.trim());
    if (cells.length < 4 || !cells[1]?.startsWith('`')) continue;
    for (const field of cells[1].matchAll(/`([^`]+)`/g)) fates[field[1] ?? ''] = cells[2] ?? '';
  }
  return fates;
}

t.test('every field of each OpenAI request schema has a fate, the route takes exactly those, and the docs say the same', async (t) => {
  const docs = await readFile(DOCS, 'utf8');
  for (const table of TABLES) {
    // Without OpenAI's document, the route's own fate table stands for the schema's field list: the
    // checks below still tie the route's schema, this test's values and docs/api.md to that table.
    const fields = OPENAPI_FILE ? requestFields(table.schema) : Object.keys(table.fates).sort();
    if (OPENAPI_FILE) t.same(Object.keys(table.fates).sort(), fields, `${table.schema}: the route classifies exactly the schema's fields`);
    else t.pass(`${table.schema}: the route classifies exactly the schema's fields`, { skip: SCHEMA_SKIP });
    for (const [field, fate] of Object.entries(table.fates)) t.ok((FATES as readonly string[]).includes(fate), `${table.schema}.${field}: ${fate} is a fate`);
    if (table.schemaKeys) {
      t.same(table.schemaKeys.slice().sort(), [...fields, ...(table.extensions ?? [])].sort(), `${table.schema}: the route's schema takes the OpenAI fields and its own extensions, nothing else`);
    }
    t.same(Object.keys(table.plausible).sort(), fields, `${table.schema}: this test has a plausible value for every field`);
    t.same(documentedFates(docs, table.schema), table.fates, `${table.schema}: docs/api.md lists the same fates`);
    for (const [field, fragment] of Object.entries(table.plausible)) {
      matchesSchema(t, table.schema, asOpenapi(table, { ...table.base('gpt-4o'), ...fragment }), `${table.schema}.${field}: the plausible value is valid for OpenAI`);
    }
  }
});

t.test('each field alone gets its fate at the route: accepted up to the profile look-up, or refused by name', async (t) => {
  const b = await build(t);
  await b.startEndpoint();
  // The Responses API is an extension, off by default (CONTRACT section 9): on, so its fields reach the route.
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'the Responses API turned on');
  for (const table of TABLES) {
    for (const [field, fate] of Object.entries(table.fates) as Array<[string, Fate]>) {
      const response = await send(b, table, { ...table.base(NOBODY), ...table.plausible[field] });
      const { error } = (await response.json()) as { error: { code: string; param: string | null; message: string } };
      const what = `${table.route} ${field} (${fate})`;
      if (fate === 'refused') {
        t.same([response.status, error.code, error.param], [400, 'invalid_value', field], `${what}: refused by name`);
        t.match(error.message, /is not offered by this endpoint: /, `${what}: the message says it is not offered (${error.message})`);
      } else {
        t.same([response.status, error.code], [404, 'model_not_found'], `${what}: accepted (${error.message})`);
      }
    }
    for (const [field, fragment] of table.refusedValues) {
      const response = await send(b, table, { ...table.base(NOBODY), ...fragment });
      const { error } = (await response.json()) as { error: { code: string; param: string | null; message: string } };
      t.same([response.status, error.code, error.param], [400, 'invalid_value', field], `${table.route} ${JSON.stringify(fragment)}: refused (${error.message})`);
    }
    const unknown = await send(b, table, { ...table.base(NOBODY), cache_prompt: true });
    t.match(await unknown.json(), { error: { code: 'unknown_parameter', param: 'cache_prompt' } }, `${table.route}: a field no OpenAI schema names is still unknown_parameter`);
  }
});

t.test('the chat worker gets the passed fields, and none of the ignored ones, through either door', async (t) => {
  const profile = { name: 'tiny', params: chatParamsSchema.parse({ model: '/m.gguf' }) };
  const doors = [
    { table: TABLES[0]!, body: (request: Body) => upstreamBody(chatRequestSchema.parse(request), profile) },
    { table: TABLES[1]!, body: (request: Body) => upstreamBody(chatRequestOf(responsesRequestSchema.parse(request)), profile) },
  ];
  for (const { table, body: upstream } of doors) {
    for (const [field, fate] of Object.entries(table.fates) as Array<[string, Fate]>) {
      if (fate !== 'passed' && fate !== 'ignored') continue;
      const body = upstream({ ...table.base('tiny'), ...table.plausible[field] });
      if (fate === 'passed') t.same(body[field], table.plausible[field]![field], `${table.route} ${field} reaches the worker as it was sent`);
      else t.notOk(field in body, `${table.route} ${field} does not reach the worker`);
    }
  }
});

/** Every accepted field's plausible fragment, merged into one body, but the fields `without`. */
function everyAccepted(table: RequestTable, model: string, without: string[] = []): Body {
  let body = table.base(model);
  for (const [field, fate] of Object.entries(table.fates)) if (fate !== 'refused') body = { ...body, ...table.plausible[field] };
  for (const field of without) delete body[field];
  return body;
}

/**
 * What goes to the real workers. llama-server refuses logprobs with tools in a stream (its 400
 * reaches the client as invalid_value, as any request error of the worker): the chat request goes
 * once without the stream, and once streamed without the logprobs.
 */
const realRequests = (table: RequestTable, model: string): Body[] => {
  if (table.schema === 'CreateChatCompletionRequest') return [everyAccepted(table, model, ['stream', 'stream_options']), everyAccepted(table, model, ['logprobs', 'top_logprobs'])];
  // previous_response_id names a response this service keeps (a made-up one is a 400): test/routes/responsesMemory.test.ts.
  if (table.schema === 'CreateResponse') return [everyAccepted(table, model, ['stream', 'stream_options', 'previous_response_id']), everyAccepted(table, model, ['include', 'top_logprobs', 'previous_response_id'])];
  return [everyAccepted(table, model)];
};

async function publish(t: Test, b: Built, profile: Body): Promise<void> {
  const created = await b.admin('POST', '/api/v1/profiles', profile);
  t.equal(created.status, 201, `profile ${String(profile.name)} created`);
  const { id } = (await created.json()) as { id: string };
  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200, `profile ${String(profile.name)} published`);
}

t.test('every accepted field at once, through the real workers: 200', async (t) => {
  const dir = await tempDir(t);
  const b = await build(t, {
    env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none' },
  });
  await b.startEndpoint();
  t.equal((await b.admin('POST', '/api/v1/endpoint/extensions', { responses: true })).status, 200, 'the Responses API turned on');
  const painterModel = path.join(dir, 'painter.gguf');
  await writeFile(painterModel, 'ok');
  await publish(t, b, { name: 'tiny', category: 'chat', params: { model: await tinyModelIn(dir), context: 2048 } });
  await publish(t, b, { name: 'painter', category: 'image', params: { model: painterModel, width: 64, height: 64, steps: 2, referenceImages: 4 } });
  await publish(t, b, { name: 'speaker', category: 'tts', params: {} });
  await publish(t, b, { name: 'listener', category: 'stt', params: { defaultLanguage: 'en' } });
  const models: Record<string, string> = { CreateChatCompletionRequest: 'tiny', CreateResponse: 'tiny', CreateImageRequest: 'service-image', CreateImageEditRequest: 'service-image', CreateSpeechRequest: 'speaker', CreateTranscriptionRequest: 'listener' };
  for (const table of TABLES) {
    for (const body of realRequests(table, models[table.schema]!)) {
      const response = await send(b, table, body);
      const text = Buffer.from(await response.arrayBuffer()).toString('utf8');
      t.equal(response.status, 200, `${table.route} with ${Object.keys(body).join(', ')}: 200 (${response.status === 200 ? 'ok' : text})`);
      if (body.stream === true) t.match(text, table.streamEnd ?? /data: \[DONE\]/, 'the stream ran to its end');
    }
  }
});
