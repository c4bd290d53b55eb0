// The logger's second line of defence (src/system/observe/log.ts): a line that carries a request's
// content by mistake has it redacted, whether the field is the line's own or one level down.
import t from 'tap';
import { createLogger } from '../../../src/system/observe/log.js';

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
