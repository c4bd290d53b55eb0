// Backpressure in the SSE relay: a client that stops reading pauses the worker's response, so the
// service holds about one buffer of the answer rather than all of it; reading again resumes the
// worker and every byte arrives in order. The worker here is a local HTTP server that writes a
// long SSE answer, larger than the kernel's socket buffers, as fast as its socket takes it.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import t from 'tap';
import { CHAT_LIMITS, relayStream, type OpenedChat } from '../../../src/workers/chat/chatRequest.js';
import { until } from '../../helpers/until.js';

const EVENT = Buffer.from(`data: ${JSON.stringify({ choices: [{ delta: { content: 'x'.repeat(1000) } }] })}\n\n`);

/** The most the kernel may buffer on a loopback connection (both sockets' autotuned maximum), from /proc. */
function socketBufferMax(): number {
  const max = (file: string) => Number(readFileSync(file, 'utf8').trim().split(/\s+/)[2] ?? 0) || 0;
  try {
    return max('/proc/sys/net/ipv4/tcp_rmem') + max('/proc/sys/net/ipv4/tcp_wmem');
  } catch {
    return 16 * 1024 * 1024;
  }
}
// More than the kernel can hold in flight (32 MiB + 4 MiB here), so that a worker which finished
// sending could only mean that the relay kept reading: at least 4 MiB, and 8 MiB beyond the buffers.
const EVENTS = Math.max(4096, Math.ceil((socketBufferMax() + 8 * 1024 * 1024) / EVENT.length));

t.test('a client that stops reading pauses the worker; reading again delivers every byte', async (t) => {
  let sent = 0;
  const worker = http.createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/event-stream' });
    const more = () => {
      while (sent < EVENTS) {
        sent += 1;
        if (!response.write(EVENT)) return void response.once('drain', more);
      }
      response.end();
    };
    more();
  });
  await new Promise<void>((resolve) => worker.listen(0, '127.0.0.1', resolve));
  t.teardown(() => worker.close());
  const { port } = worker.address() as AddressInfo;
  const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/' }, resolve).once('error', reject);
  });

  let aborted = false;
  const opened = { response, abort: () => (aborted = true), stall: { token: () => undefined, stop: () => undefined } } as unknown as OpenedChat;
  const out = new PassThrough();
  const warnings: string[] = [];
  const relayed = relayStream(opened, out, { limits: CHAT_LIMITS, signal: new AbortController().signal, log: { warn: (_fields, message) => warnings.push(message) } });

  // Nobody reads `out`: the relay must stop taking the worker's bytes.
  await until('the worker response paused', async () => response.isPaused() || undefined, 5000);
  await new Promise((resolve) => setTimeout(resolve, 300));
  const waiting = out.readableLength + out.writableLength;
  t.ok(response.isPaused(), 'the worker response stays paused while the client does not read');
  t.ok(waiting < 256 * 1024, `the service holds ${waiting} bytes of the answer, not the ${EVENT.length * EVENTS} of all of it`);
  t.ok(sent < EVENTS, `the worker could not send everything (${sent} of ${EVENTS} events): it waits on its socket`);

  // The client reads again: everything comes, in order, and the relay ends cleanly.
  const chunks: Buffer[] = [];
  out.on('data', (chunk: Buffer) => chunks.push(chunk));
  await relayed;
  await new Promise((resolve) => (out.readableEnded ? resolve(undefined) : out.once('end', resolve)));
  const all = Buffer.concat(chunks);
  t.equal(all.length, EVENT.length * EVENTS, 'every byte of the answer arrived');
  t.ok(all.subarray(0, EVENT.length).equals(EVENT) && all.subarray(all.length - EVENT.length).equals(EVENT), 'whole events, in order');
  t.equal(aborted, false, 'the worker request was not aborted');
  t.same(warnings, [], 'nothing was logged');
});
