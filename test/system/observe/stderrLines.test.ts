// A worker's stderr lines for the console (src/system/observe/stderrLines.ts): the redaction rule
// line by line, the bound on lines and on each line's length, lines split across chunks (and a
// character split between two), a start's own filter, and the recent requests' bound.
import t from 'tap';
import { RecentRequests } from '../../../src/system/observe/recentRequests.js';
import { redactStderrLine, StderrLines, STDERR_LINE_CHARS, WITHHELD, WorkerStderr } from '../../../src/system/observe/stderrLines.js';

t.test('the redaction rule', async (t) => {
  const cases: Array<[string, string]> = [
    // Kept as they are: what an operator needs to see, numbers and names only.
    ['llama_model_loader: loaded meta data with 25 key-value pairs', 'llama_model_loader: loaded meta data with 25 key-value pairs'],
    ['prompt eval time =      12.00 ms /     5 tokens (    2.40 ms per token)', 'prompt eval time =      12.00 ms /     5 tokens (    2.40 ms per token)'],
    ['slot update_slots: id  0 | task 0 | prompt processing progress, n_past = 5, n_tokens = 5, progress = 1.000000', 'slot update_slots: id  0 | task 0 | prompt processing progress, n_past = 5, n_tokens = 5, progress = 1.000000'],
    ['n_prompt_tokens = 12', 'n_prompt_tokens = 12'],
    ['srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200', 'srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200'],
    // Withheld whole: lines that carry a prompt or an answer.
    ['srv  log_server_r: request:  {"messages":[{"role":"user","content":"hi"}]}', WITHHELD],
    ['response: [{"index":0}]', WITHHELD],
    ['formatted prompt: hello there', WITHHELD],
    ['prompt = "a cat"', WITHHELD],
    ['<|im_start|>user hello<|im_end|>', WITHHELD],
    ['[INST] hello [/INST]', WITHHELD],
    ['<s> hello world </s>', WITHHELD],
    ['[00:00:00.000 --> 00:00:02.000]  hello world', WITHHELD],
    ['text: hello world', WITHHELD],
    ['INFO: hyp: hello world', WITHHELD],
    // Quoted text goes; secrets go.
    ["next token: 123 'walrus'", 'next token: 123 "…"'],
    ['failed to open "/home/me/notes about x.txt"', 'failed to open "…"'],
    ["can't load the model", "can't load the model"],
    ['main: api key: s3cr3t-value', 'main: api key: [redacted]'],
    ['--api-key-file /run/key', '--api-key-file [redacted]'],
    ['Authorization: Bearer abcdef', 'Authorization: [redacted]'],
    ['Bearer abcdef', 'Bearer [redacted]'],
    [`key ${'ab12'.repeat(10)}`, 'key [redacted]'],
    [`seen ${'Zm9vYmFy'.repeat(6)} here`, 'seen [redacted] here'],
  ];
  for (const [line, shown] of cases) t.equal(redactStderrLine(line), shown, line);
  const long = redactStderrLine(`llama_model_load: ${'x '.repeat(400)}`);
  t.equal(long.length, STDERR_LINE_CHARS, 'a long line is cut');
  t.ok(long.endsWith('…'), 'and says so');
});

t.test('lines: split across chunks, bounded in number, a start marks its own and may filter', async (t) => {
  const lines = new StderrLines(3);
  lines.begin(1);
  const euro = Buffer.from('€');
  lines.push(Buffer.concat([Buffer.from('one\ntw'), euro.subarray(0, 1)]));
  t.same(lines.lines().map((l) => l.text), ['one'], 'an unfinished line waits');
  lines.push(Buffer.concat([euro.subarray(1), Buffer.from('o\r\nthree\n\nfour\n')]));
  t.same(
    lines.lines().map((l) => l.text),
    ['tw€o', 'three', 'four'],
    'a character split between chunks is whole; CRLF ends a line; empty lines are not kept; the oldest goes past the bound',
  );
  t.same(
    lines.lines().map((l) => l.seq),
    [2, 3, 4],
  );
  lines.push(Buffer.from('left unfinished'));
  lines.begin(2, (line) => (line.includes('secret prompt') ? null : line));
  lines.push(Buffer.from('the secret prompt is here\nloaded\n'));
  t.same(
    lines.lines().map((l) => [l.generation, l.text]),
    [
      [1, 'left unfinished'],
      [2, WITHHELD],
      [2, 'loaded'],
    ],
    "a new start ends the last one's unfinished line; its own filter withholds a line",
  );
  const endless = new StderrLines();
  endless.begin(1);
  endless.push(Buffer.alloc(10 * STDERR_LINE_CHARS, 'a'));
  t.ok(endless.lines().length >= 2, 'output without a newline is cut into lines, not held without bound');
  t.ok(endless.lines().every((l) => l.text.length <= STDERR_LINE_CHARS));
  const kinds = new WorkerStderr();
  kinds.of('tts').begin(3);
  kinds.of('tts').push(Buffer.from('espeak ready\n'));
  t.match(kinds.view('tts'), { kind: 'tts', limit: 200, line_chars: STDERR_LINE_CHARS, lines: [{ text: 'espeak ready', generation: 3 }] });
  t.same(kinds.view('chat').lines, [], 'each kind its own lines');
});

t.test('the recent requests keep the last ones, in order, and tell who listens', async (t) => {
  const recent = new RecentRequests(2);
  const heard: number[] = [];
  recent.on('request', (record) => heard.push(record.seq));
  const base = { at: '', method: 'POST', route: '/v1/chat/completions', profile: 'p', status: 200, code: null, duration_ms: 1, queue_ms: null, ttft_ms: null, prompt_tokens: null, completion_tokens: null, tokens_per_second: null, stream: null };
  for (const id of ['a', 'b', 'c']) recent.record({ ...base, id });
  t.same(
    recent.list().map((r) => [r.seq, r.id]),
    [
      [2, 'b'],
      [3, 'c'],
    ],
  );
  t.same(heard, [1, 2, 3]);
});
