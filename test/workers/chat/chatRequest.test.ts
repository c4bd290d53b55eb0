// How a chat worker's error answer becomes ours: the class stays (the client's 400, or
// 502 worker_failed), llama-server's words written for users reach the client, and the text of its
// C++ internals (`unordered_map::at`, nlohmann::json's exceptions, which quote the request back)
// is replaced by a summary while the detail, without the quote, goes to the log. The texts below
// are llama-server's own answers (the build scripts/build-llama.sh makes), captured from it.
import t from 'tap';
import { workerErrorDetail, workerStatusError } from '../../../src/workers/chat/chatRequest.js';

const answer = (code: number, message: string, type: string) => Buffer.from(JSON.stringify({ error: { code, message, type } }));

const SURROGATE =
  '[json.exception.parse_error.101] parse error at line 1, column 49: syntax error while parsing value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF; last read: \'"PROMPT-4242 \\ud800"\'';
const OVERFLOW = "Failed to parse tool call arguments as JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'";

interface Case {
  what: string;
  status: number;
  body: Buffer;
  expected: { statusCode: number; type: string; code: string };
  /** What the client's message says (a pattern), and what it must never say. */
  says: RegExp;
  never?: RegExp;
  /** What the log line keeps, and what it leaves out. */
  logged?: RegExp;
  notLogged?: RegExp;
}

const INTERNAL = /json\.exception|unordered_map|last read|std::/;

const cases: Case[] = [
  {
    what: 'a lone surrogate in a message: the JSON parser refuses the request',
    status: 500,
    body: answer(500, SURROGATE, 'server_error'),
    expected: { statusCode: 400, type: 'invalid_request_error', code: 'invalid_value' },
    says: /cannot read \(for example a lone UTF-16 surrogate/,
    never: /PROMPT-4242|json\.exception|last read/,
    logged: /\[json\.exception\.parse_error\.101\] parse error at line 1, column 49: .*surrogate U\+D800.*; last read: \(left out\)/,
    notLogged: /PROMPT-4242/,
  },
  {
    what: 'a number out of range in tool call arguments',
    status: 500,
    body: answer(500, OVERFLOW, 'server_error'),
    expected: { statusCode: 400, type: 'invalid_request_error', code: 'invalid_value' },
    says: /\(Failed to parse tool call arguments as JSON\): it holds a number beyond the range/,
    never: /1e999|json\.exception/,
    logged: /\[json\.exception\.out_of_range\.406\] number overflow parsing \(value left out\)/,
    notLogged: /1e999/,
  },
  {
    what: 'unordered_map::at: an internal failure stays worker_failed',
    status: 500,
    body: answer(500, 'unordered_map::at', 'server_error'),
    expected: { statusCode: 502, type: 'server_error', code: 'worker_failed' },
    says: /internal error; the service log has the details/,
    never: INTERNAL,
    logged: /unordered_map::at/,
  },
  {
    what: 'a 400 with an internal text keeps its class',
    status: 400,
    body: answer(400, '[json.exception.type_error.302] type must be string, but is number', 'invalid_request_error'),
    expected: { statusCode: 400, type: 'invalid_request_error', code: 'invalid_value' },
    says: /refused the request; the service log has its reason/,
    never: INTERNAL,
    logged: /type_error\.302/,
  },
  {
    what: 'the context is exceeded: its own code, its own words',
    status: 400,
    body: answer(400, 'request (531 tokens) exceeds the available context size (512 tokens), try increasing it', 'exceed_context_size_error'),
    expected: { statusCode: 400, type: 'invalid_request_error', code: 'context_length_exceeded' },
    says: /^request \(531 tokens\) exceeds the available context size \(512 tokens\)/,
  },
  {
    what: "llama-server's own words for a bad request reach the client",
    status: 400,
    body: answer(400, "Assistant message must contain either 'content' or 'tool_calls'!", 'invalid_request_error'),
    expected: { statusCode: 400, type: 'invalid_request_error', code: 'invalid_value' },
    says: /^Assistant message must contain either 'content' or 'tool_calls'!$/,
  },
  {
    what: 'a server error in words for users',
    status: 503,
    body: answer(503, 'Loading model', 'unavailable_error'),
    expected: { statusCode: 502, type: 'server_error', code: 'worker_failed' },
    says: /^The chat worker failed: Loading model$/,
  },
  {
    what: 'an answer that is not JSON',
    status: 500,
    body: Buffer.from('<html>oops</html>'),
    expected: { statusCode: 502, type: 'server_error', code: 'worker_failed' },
    says: /^The chat worker answered 500\.$/,
  },
];

t.test('each worker error keeps its class; internals go to the log, not to the client', async (t) => {
  for (const c of cases) {
    const logged: Array<{ fields: Record<string, unknown>; message: string }> = [];
    const error = workerStatusError(c.status, c.body, { warn: (fields, message) => void logged.push({ fields: fields as Record<string, unknown>, message }) });
    t.match({ statusCode: error.statusCode, type: error.type, code: error.code }, c.expected, `${c.what}: ${c.expected.statusCode} ${c.expected.code}`);
    t.match(error.message, c.says, `${c.what}: the client reads "${error.message}"`);
    t.notMatch(error.message, c.never ?? INTERNAL, `${c.what}: no internals in the client's message`);
    t.same(Object.keys(error.body().error).sort(), ['code', 'message', 'param', 'type'], `${c.what}: the OpenAI error body`);
    const line = logged.map((l) => String(l.fields.worker_error)).join('\n');
    if (c.logged) t.match(line, c.logged, `${c.what}: the log keeps the detail`);
    if (c.notLogged) t.notMatch(line, c.notLogged, `${c.what}: the log leaves out the request's own text`);
    if (c.logged) t.match(logged[0], { fields: { worker_status: c.status }, message: 'the chat worker answered with an error' });
  }
});

t.test('the detail for the log is bounded', async (t) => {
  t.equal(workerErrorDetail('x'.repeat(2000)).length, 501, '500 characters and an ellipsis');
  t.equal(workerErrorDetail('plain words'), 'plain words', 'a text without quotes stays as it is');
});

t.test("the detail for the log keeps llama-server's words and leaves out the request's", async (t) => {
  const cases: Array<[string, string, string]> = [
    [
      'a schema place and what follows it (llama-server today)',
      'Unable to generate parser for this template. Automatic parser generation failed: JSON schema error at #/properties/MARK_name: unrecognized type MARK-type',
      'Unable to generate parser for this template. Automatic parser generation failed: JSON schema error at (the place in the schema and its detail left out)',
    ],
    ['a dump after the first line (older llama-server)', 'JSON schema conversion failed:\nUnrecognized schema: {"type":"MARK"}', 'JSON schema conversion failed: (…)'],
    ['JSON text', 'Missing content part type: {"MARK":1}', 'Missing content part type: {…}'],
    ['quoted text', 'Unsupported content part type: "MARK"', 'Unsupported content part type: "…"'],
    ['a quote cut off', "Invalid tool call: 'MARK and the rest", "Invalid tool call: '…'"],
    ['several quotes', "Assistant message must contain either 'content' or 'tool_calls'!", "Assistant message must contain either '…' or '…'!"],
    ['an apostrophe inside a word is no quote', "the model's template failed", "the model's template failed"],
    ['words of its own', 'Failed to initialize samplers: failed to parse grammar', 'Failed to initialize samplers: failed to parse grammar'],
  ];
  for (const [what, message, logged] of cases) t.equal(workerErrorDetail(message), logged, what);
});
