// The logger's second line of defence (src/system/observe/log.ts): a line that carries a request's
// content by mistake has it redacted, whether the field is the line's own or one level down.
import t from 'tap';
import { Writable } from 'node:stream';
import { createLogger, resolveLogFormat } from '../../../src/system/observe/log.js';
import { LogTail } from '../../../src/system/observe/logTail.js';

t.test("a request's content logged by mistake is redacted: prompt, schema, tools, grammar, the Responses API's instructions and output", async (t) => {
  const lines: string[] = [];
  const log = createLogger({ level: 'debug', destination: { write: (line: string) => void lines.push(line) } });
  const MARK = 'ZQXmark9183';
  const content = {
    messages: [{ role: 'user', content: MARK }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { description: MARK } } },
    tools: [{ type: 'function', function: { name: MARK } }],
    tool_calls: [{ id: MARK }],
    functions: [{ name: MARK }],
    grammar: `root ::= "${MARK}"`,
    instructions: MARK,
    output: [{ type: 'function_call', arguments: MARK }],
    output_text: MARK,
    arguments: `{"city":"${MARK}"}`,
  };
  log.info(content, 'fields of its own');
  log.warn({ request: content }, 'one level down');
  t.equal(lines.length, 2);
  t.notOk(lines.join('\n').includes(MARK), 'no line holds the content');
  const [own, nested] = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  for (const key of Object.keys(content)) {
    t.equal(own?.[key], '[redacted]', `${key} redacted`);
    t.equal((nested?.request as Record<string, unknown> | undefined)?.[key], '[redacted]', `request.${key} redacted`);
  }
});

t.test('the log format: pretty on a terminal, JSON elsewhere, unless SERVICE_DECK_LOG_FORMAT says', async (t) => {
  t.equal(resolveLogFormat('auto', true), 'pretty');
  t.equal(resolveLogFormat('auto', false), 'json');
  t.equal(resolveLogFormat('json', true), 'json');
  t.equal(resolveLogFormat('pretty', false), 'pretty');
});

t.test('pretty lines on stdout, JSON in the console tail, redacted in both', async (t) => {
  const written: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      written.push(chunk.toString('utf8'));
      done();
    },
  });
  const tail = new LogTail();
  const log = createLogger({ level: 'info', destination, tail, format: 'pretty' });
  log.info({ profile: 'tiny-chat', status: 200, authorization: 'Bearer sd-secret' }, 'access');
  await new Promise<void>((resolve) => log.flush(() => resolve()));
  t.match(written.join(''), /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: access \{"profile":"tiny-chat","status":200,"authorization":"\[redacted\]"\}\n$/);
  t.same(tail.lines().map((line) => [line.msg, line.fields]), [['access', { profile: 'tiny-chat', status: 200, authorization: '[redacted]' }]], 'the tail parses JSON as before');
});
