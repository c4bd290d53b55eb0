// The inspector switch: `stately` relays sanitized inspection events over a loopback WebSocket
// relay; prompts, audio, images and secrets never leave the process; production refuses it.
import t from 'tap';
import WebSocket from 'ws';
import { createInspection } from '../../../src/system/observe/inspect.js';
import { createLogger, sanitize } from '../../../src/system/observe/log.js';
import { build, freePort } from '../../helpers/build.js';
import { until } from '../../helpers/until.js';

t.test('sanitize replaces prompts, audio, images, secrets and long text', async (t) => {
  const event = {
    type: 'job.submit',
    requestId: 'r1',
    prompt: 'draw a cat',
    messages: [{ role: 'user', content: 'hello' }],
    nested: { password: 'pw', audio: Buffer.alloc(10), image: new Uint8Array(4), port: 8120 },
    note: 'x'.repeat(500),
  };
  const clean = sanitize(event) as Record<string, unknown>;
  t.same(clean.prompt, '[redacted]');
  t.same(clean.messages, '[redacted]');
  t.same(clean.nested, { password: '[redacted]', audio: '[redacted]', image: '[redacted]', port: 8120 });
  t.match(clean.note, /…\[500 chars\]$/);
  t.equal(clean.type, 'job.submit');
  t.same(sanitize({ raw: Buffer.alloc(3) }), { raw: '[binary 3 bytes]' });
  t.notMatch(JSON.stringify(clean), /draw a cat|hello|"pw"/);
});

t.test('stately mode is development only', async (t) => {
  const log = createLogger({ level: 'silent' });
  await t.rejects(createInspection('stately', { log, port: await freePort(), production: true }), /development only/);
});

t.test('stately mode relays sanitized events over loopback', async (t) => {
  const port = await freePort();
  const b = await build(t, { env: { SERVICE_DECK_INSPECT: 'stately', SERVICE_DECK_INSPECT_PORT: String(port) } });
  t.equal(b.service.inspection.url, `ws://127.0.0.1:${port}`);
  const received: string[] = [];
  const socket = new WebSocket(`ws://127.0.0.1:${port}`);
  await new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  socket.on('message', (data) => received.push(data.toString()));
  await b.startEndpoint();
  await until('the start event at the inspector', async () => (received.some((m) => m.includes('endpoint.start')) ? true : undefined));
  socket.close();
  t.ok(received.some((m) => m.includes('endpoint.start')), 'the start event reached the inspector');
  t.ok(received.some((m) => m.includes('"running"')), 'so did the running snapshot');
  t.notOk(received.join('').includes('sd-test-token'), 'no secret reached the inspector');
  await t.rejects(
    new Promise((resolve, reject) => {
      const remote = new WebSocket(`ws://[::1]:${port}`);
      remote.once('open', () => {
        remote.close();
        resolve(undefined);
      });
      remote.once('error', reject);
    }),
    'the relay is bound to 127.0.0.1 only',
  );
});
