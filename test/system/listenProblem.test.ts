// A start that fails says why and what to do in one line: the listen errors Node gives
// (a busy port, a privileged port, an address the machine lacks) and any other failure.
import { createServer } from 'node:net';
import t from 'tap';
import { failureLine } from '../../src/cli.js';
import { isListenError, listenProblem, StartFailure } from '../../src/system/listenProblem.js';
import { freePort } from '../helpers/build.js';

/** The error Node gives for a listen on `host:port`, or undefined when it opened. */
function listenError(host: string, port: number): Promise<Error | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', resolve);
    server.listen(port, host, () => server.close(() => resolve(undefined)));
  });
}

const FIX = { portFix: 'start with --ui-port <port>', hostFix: 'start with --ui-host 127.0.0.1' };

t.test('a busy port, an address the machine lacks: Node’s own errors, in words with the fix', async (t) => {
  const port = await freePort();
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', () => resolve()));
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const busy = await listenError('127.0.0.1', port);
  t.ok(isListenError(busy), 'a listen error');
  t.equal(
    listenProblem(busy, { port, ...FIX }),
    `port ${port} is in use (EADDRINUSE): stop what uses it (\`ss -ltnp 'sport = :${port}'\` shows which program), or start with --ui-port <port>`,
  );
  // 192.0.2.1 (TEST-NET-1) is nobody's address.
  const absent = await listenError('192.0.2.1', port);
  t.equal(listenProblem(absent, { port, ...FIX }), "the address 192.0.2.1 is not one of this machine's (EADDRNOTAVAIL): start with --ui-host 127.0.0.1");
});

t.test('EACCES: a privileged port needs root; another refusal is a policy', async (t) => {
  // The tests may run as root, who may open port 80: the error is made as Node makes it.
  const denied = (port: number) => Object.assign(new Error(`listen EACCES: permission denied 127.0.0.1:${port}`), { code: 'EACCES', syscall: 'listen', address: '127.0.0.1', port });
  t.equal(listenProblem(denied(80), { port: 80, ...FIX }), 'port 80 needs root (EACCES: ports below 1024 are privileged): start with --ui-port <port> from 1024 up');
  t.match(listenProblem(denied(8110), { port: 8110, ...FIX }), /^port 8110 may not be opened by this user \(EACCES/);
});

t.test('the command prints any failure as one line, never a stack', async (t) => {
  t.equal(failureLine(new StartFailure('the operator console cannot listen on …')), 'the operator console cannot listen on …');
  const raw = Object.assign(new Error('listen EADDRINUSE: address already in use 127.0.0.1:8130'), { code: 'EADDRINUSE', syscall: 'listen', address: '127.0.0.1', port: 8130 });
  t.match(failureLine(raw), /^the service could not start: cannot listen on 127\.0\.0\.1:8130: port 8130 is in use \(EADDRINUSE\): stop what uses it .*choose another port/);
  const other = Object.assign(new Error('too many open files'), { code: 'EMFILE' });
  const line = failureLine(other);
  t.match(line, /too many open files \(EMFILE\)/, 'the message and its code');
  t.notMatch(line, /\n|at .*:\d+:\d+/, 'one line without a stack');
});
