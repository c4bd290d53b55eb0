// No client-supplied content in the log (docs/operations.md, Logs): a JSON schema, tool definitions
// and messages that the real llama-server refuses, quoting parts of them back in its error
// answer, reach the client in that answer and never the log, the console's log tail
// (`GET /api/v1/logs`, the events stream's `log` lines) or any other line. The worker's
// error still shows in the log, in its own words.
import t from 'tap';
import { build, tempDir } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';

/** In every piece of client content below; the log must hold it nowhere. */
const MARK = 'ZQXmark5147';

const schemaWith = (schema: object) => ({ type: 'json_schema', json_schema: { name: 'answer', schema } });
const badType = { type: 'object', properties: { [`${MARK}_property`]: { type: `${MARK}-type` } } };

t.test('a refused JSON schema, tools or messages: their text reaches the client, not the log', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' } });
  await b.startEndpoint();
  const created = await b.admin('POST', '/api/v1/profiles', { name: 'tiny', category: 'chat', params: { model, context: 512 } });
  const { id } = (await created.json()) as { id: string };
  await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });

  const messages = [{ role: 'user', content: `${MARK} the prompt` }];
  const requests: Array<[string, object]> = [
    ['a schema with an unknown type', { response_format: schemaWith(badType) }],
    ['the same, streamed', { stream: true, response_format: schemaWith(badType) }],
    ['a schema with a $ref that leads nowhere', { response_format: schemaWith({ $ref: `#/definitions/${MARK}` }) }],
    ['tools whose parameters have an unknown type', { tools: [{ type: 'function', function: { name: `${MARK}_tool`, description: `${MARK} tool`, parameters: { type: `${MARK}-type` } } }] }],
  ];
  for (const [what, fields] of requests) {
    const answer = await b.api('POST', '/v1/chat/completions', { model: 'tiny', max_tokens: 2, messages, ...fields });
    const body = (await answer.json()) as { error?: { code: string; message: string } };
    t.equal(answer.status, 400, `${what}: refused by llama-server`);
    t.equal(body.error?.code, 'invalid_value', what);
    t.match(body.error?.message, MARK, `${what}: the client reads llama-server's words about its own request`);
  }
  // A schema llama-server takes, with the mark in its description: the answer is made, nothing of it logged.
  const taken = await b.api('POST', '/v1/chat/completions', {
    model: 'tiny',
    max_tokens: 2,
    messages,
    response_format: schemaWith({ type: 'string', description: `${MARK} description` }),
  });
  t.equal(taken.status, 200, 'a schema it can use');
  await taken.text();

  const warned = b.logLines.map((line) => JSON.parse(line) as { level: number; msg: string; worker_error?: string }).filter((line) => line.msg === 'the chat worker answered with an error');
  t.equal(warned.length, requests.length, 'each refusal is logged');
  for (const line of warned) {
    t.equal(line.level, 40, 'at warn');
    t.match(line.worker_error, /^Unable to generate parser .* JSON schema error at \(the place in the schema and its detail left out\)$/, "in llama-server's own words");
  }
  const everything = b.logLines.join('\n');
  t.notOk(everything.includes(MARK), 'no log line, at any level, holds the client content');
  const tail = (await (await b.admin('GET', '/api/v1/logs')).json()) as { lines: unknown[] };
  t.ok(tail.lines.length > 0, "the console's log tail has lines");
  t.notOk(JSON.stringify(tail).includes(MARK), "nor does the console's log tail (the Logs page, the events stream's log lines)");
});
