// The console's log tail: it keeps the last lines as pino wrote them, redacted like stdout, with
// the fields other than time, level, msg, service, pid and hostname.
import t from 'tap';
import type { LogLineView } from '../../../src/system/observe/console.types.js';
import { createLogger } from '../../../src/system/observe/log.js';
import { LogTail } from '../../../src/system/observe/logTail.js';

const SECRETS = { token: 'sd-secret-token-5150', password: 'hunter2-hunter2', prompt: 'PROMPT-draw-the-vault-9090' };

t.test('the tail gets the same redacted lines as stdout', async (t) => {
  const tail = new LogTail();
  const stdout: string[] = [];
  const seen: LogLineView[] = [];
  tail.on('line', (line) => seen.push(line));
  const log = createLogger({ level: 'info', destination: { write: (line: string) => void stdout.push(line) }, tail });
  log.info({ component: 'test', ...SECRETS, nested: { token: SECRETS.token }, req: { headers: { authorization: `Bearer ${SECRETS.token}` } } }, 'logged by mistake');
  log.debug('below the level');
  log.warn({ worker: 'chat' }, 'a warning');

  t.equal(stdout.length, 2, 'stdout got both lines at or above info');
  const lines = tail.lines();
  t.equal(lines.length, 2, 'so did the tail');
  t.same(seen, lines, "each line was emitted as 'line'");
  const [first, second] = lines;
  t.equal(first?.msg, 'logged by mistake');
  t.equal(first?.level, 30);
  t.type(first?.time, 'number');
  t.same(first?.fields, {
    component: 'test',
    token: '[redacted]',
    password: '[redacted]',
    prompt: '[redacted]',
    nested: { token: '[redacted]' },
    req: { headers: { authorization: '[redacted]' } },
  });
  t.same(second?.fields, { worker: 'chat' }, 'time, level, msg, service, pid and hostname are not fields');
  t.ok((second?.seq ?? 0) > (first?.seq ?? 0), 'seq increases');
  const text = JSON.stringify(lines) + stdout.join('');
  for (const secret of Object.values(SECRETS)) t.notOk(text.includes(secret), `${secret.slice(0, 8)}… reached neither`);
});

t.test('the tail keeps the last lines; level and limit filter', async (t) => {
  const tail = new LogTail(10);
  const log = createLogger({ level: 'trace', destination: { write: () => {} }, tail });
  for (let i = 1; i <= 15; i += 1) (i % 5 === 0 ? log.error : log.info).call(log, { i }, `line ${i}`);
  const lines = tail.lines();
  t.equal(lines.length, 10, 'only the last 10');
  t.equal(lines[0]?.msg, 'line 6', 'oldest first');
  t.equal(lines[0]?.seq, 6);
  t.equal(lines.at(-1)?.seq, 15);
  t.same(tail.lines({ level: 'error' }).map((l) => l.msg), ['line 10', 'line 15']);
  t.same(tail.lines({ limit: 2 }).map((l) => l.msg), ['line 14', 'line 15']);
  t.same(tail.lines({ level: 'fatal' }), []);
  tail.write('not json\n');
  t.equal(tail.lines().length, 10, 'a line that is not JSON is skipped');
});
