// Server-sent events read as the workers write them, with LF or CRLF line ends: the events' data
// whatever the chunks (split at every byte, a UTF-8 character included), the whole events the
// relay passes on and an error event in a CRLF stream (src/workers/chat/sse.ts, relayStream and
// streamedError in src/workers/chat/chatRequest.ts).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import t from 'tap';
import { CHAT_LIMITS, relayStream, streamedError, type OpenedChat } from '../../../src/workers/chat/chatRequest.js';
import { eventData, eventStart, nextBlankLine, SseReader, wholeEventsEnd } from '../../../src/workers/chat/sse.js';

const events = ['{"choices":[{"delta":{"content":"grüß dich"}}]}', '{"choices":[{"delta":{"content":"a\\nb"}}]}', '[DONE]'];
const stream = (eol: string) => events.map((data) => `data: ${data}${eol}${eol}`).join('') + `: a comment${eol}${eol}`;

t.test('the data of each event, with LF or CRLF, whatever the chunks', async (t) => {
  for (const [name, eol] of [['LF', '\n'], ['CRLF', '\r\n']] as const) {
    const bytes = Buffer.from(stream(eol));
    for (let split = 0; split <= bytes.length; split++) {
      const seen: string[] = [];
      const reader = new SseReader((data) => seen.push(data));
      reader.push(bytes.subarray(0, split));
      reader.push(bytes.subarray(split));
      if (seen.join('|') !== events.join('|')) t.fail(`${name}, split at byte ${split}: ${JSON.stringify(seen)}`);
    }
    t.pass(`${name}: the same three events for every split of the ${bytes.length} bytes (a UTF-8 character and the blank lines included)`);
    const oneByOne: string[] = [];
    const reader = new SseReader((data) => oneByOne.push(data));
    for (const byte of bytes) reader.push(Buffer.from([byte]));
    t.same(oneByOne, events, `${name}: byte by byte`);
  }
  t.equal(eventData('event: x\r\ndata: a\r\ndata:b\r\nid: 1'), 'a\nb', 'data lines joined by LF, less the field name and one space');
  t.equal(eventData(': only a comment'), '');
});

t.test('an event over the limit is dropped to its end and told, and what the reader holds stays within the limit', async (t) => {
  const seen: string[] = [];
  let overflows = 0;
  const reader = new SseReader((data) => seen.push(data), { limit: 1000, onOverflow: () => (overflows += 1) });
  reader.push(Buffer.from('data: a\n\ndata: '));
  let most = 0;
  for (let i = 0; i < 100; i++) {
    reader.push(Buffer.from('x'.repeat(64)));
    most = Math.max(most, reader.pending);
  }
  t.ok(most <= 1000, `at most the limit held (${most} bytes)`);
  t.equal(overflows, 1, 'the overflow is told once');
  reader.push(Buffer.from('xx\n'));
  reader.push(Buffer.from('\ndata: b\n\n'));
  t.same(seen, ['a', 'b'], 'the long event is dropped; the events around it are read');
  t.equal(reader.pending, 0);
});

t.test('blank lines and whole events in bytes', async (t) => {
  const lf = Buffer.from('data: a\n\ndata: b\n\ndata: c');
  t.same(nextBlankLine(lf), { at: 7, end: 9 });
  t.same(nextBlankLine(lf, 9), { at: 16, end: 18 });
  t.equal(nextBlankLine(lf, 18), undefined, 'an unfinished event has no blank line yet');
  t.equal(wholeEventsEnd(lf), 18, 'whole events end after the second blank line');
  t.equal(eventStart(lf, 12), 9, 'the event around byte 12 starts after the first blank line');
  const crlf = Buffer.from('data: a\r\n\r\ndata: b\r\n\r\ndata: c');
  t.same(nextBlankLine(crlf), { at: 8, end: 11 });
  t.equal(wholeEventsEnd(crlf), 22);
  t.equal(eventStart(crlf, 15), 11);
  t.equal(wholeEventsEnd(Buffer.from('data: a\r\n')), 0, 'one line end is no blank line');
  t.equal(wholeEventsEnd(Buffer.alloc(0)), 0);
});

t.test("the worker's error event in a CRLF stream is found, with its status", async (t) => {
  const error = '{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}';
  const bytes = Buffer.from(`data: {"choices":[]}\r\n\r\ndata: ${error}\r\n\r\n`);
  t.match(streamedError(bytes), { at: 24, status: 503 });
  t.equal(streamedError(bytes)?.body.toString(), error);
  t.equal(streamedError(Buffer.from('data: {"choices":[{"delta":{"content":"\\"error\\""}}]}\r\n\r\n')), undefined, 'a content chunk that mentions "error" is no error event');
});

t.test('the relay passes a CRLF stream on event by event, as the worker wrote it', async (t) => {
  const body = stream('\r\n');
  let write: ((text: string) => void) | undefined;
  let end: (() => void) | undefined;
  const worker = http.createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    response.flushHeaders();
    write = (text) => response.write(text);
    end = () => response.end();
  });
  await new Promise<void>((resolve) => worker.listen(0, '127.0.0.1', resolve));
  t.teardown(() => worker.close());
  const { port } = worker.address() as AddressInfo;
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/' }, resolve).once('error', reject);
  });
  const out = new PassThrough();
  const chunks: string[] = [];
  out.on('data', (chunk: Buffer) => chunks.push(chunk.toString('utf8')));
  const relayed = relayStream({ response, abort: () => undefined, stall: { token: () => undefined, stop: () => undefined } } as unknown as OpenedChat, out, { limits: CHAT_LIMITS, signal: new AbortController().signal, log: { warn: () => undefined } });
  // The first event, then half of the second: only the whole first event goes on.
  const first = `data: ${events[0]}\r\n\r\n`;
  write!(first + 'data: {"choi');
  for (let i = 0; i < 100 && chunks.join('') !== first; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  t.equal(chunks.join(''), first, 'a whole event goes on at once; the half event waits for its blank line');
  write!(body.slice(first.length + 'data: {"choi'.length));
  end!();
  await relayed;
  t.equal(chunks.join(''), body, 'every event, byte for byte, line ends as the worker wrote them');
});
