// The first hour: a first start that fails (its console port is busy) ends with one
// line that names the cause and the fix, and strands no one: it stored no secret that it did not
// show, so the next start shows the password and the token, in a framed block after the start-up
// log lines. And the log's two formats: JSON without a terminal, readable lines (pino-pretty) when
// SERVICE_DECK_LOG_FORMAT=pretty asks for them.
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import t, { type Test } from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { spawnCli } from '../helpers/spawn.js';

/** Holds `port` on 127.0.0.1 until the test ends, as another program would. */
async function occupy(t: Test, port: number): Promise<Server> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return server;
}

t.test('a busy console port: one line and exit 1, no secret stored; the next start shows both secrets', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') };
  const args = ['demo', '--ui-port', String(uiPort), '--api-port', String(apiPort)];
  const blocker = await occupy(t, uiPort);

  const failed = spawnCli(t, args, env);
  const exit = await failed.exited;
  t.equal(exit.code, 1, 'the failed start exits 1');
  const stderr = failed.output().split('\n').filter((line) => line.startsWith('service-deck:') || /^\s+at /.test(line));
  t.same(
    stderr,
    [
      `service-deck: the operator console cannot listen on 127.0.0.1:${uiPort}: port ${uiPort} is in use (EADDRINUSE): stop what uses it (\`ss -ltnp 'sport = :${uiPort}'\` shows which program), or start with --ui-port <port> (or SERVICE_DECK_UI_PORT=<port>)`,
    ],
    'one line that names the port, the cause and the fix',
  );
  t.notMatch(failed.output(), /\n\s+at |Error: listen|node:net/, 'no stack trace');
  t.notMatch(failed.output(), /shown once|sd-[A-Za-z0-9_-]{20}/, 'no secret was shown');
  const stored = JSON.parse(await readFile(path.join(stateDir, 'secrets.json'), 'utf8')) as { passwordHash: unknown; tokenHash: unknown };
  t.same([stored.passwordHash, stored.tokenHash], [null, null], 'and none was stored: nobody is locked out');

  await new Promise<void>((resolve) => blocker.close(() => resolve()));
  const again = spawnCli(t, args, env);
  await again.waitFor(/Ctrl-C stops the service/, 60_000);
  const out = again.output();
  const password = out.match(/^│ operator password \(shown once\): (\S+)$/m)?.[1];
  const token = out.match(/^│ new API token \(shown once, only its hash is stored\): (sd-\S+)$/m)?.[1];
  t.ok(password && token, 'the second start shows the password and the token');
  // The block comes after every start-up log line: none of them stands between it and the end.
  const lines = out.trimEnd().split('\n');
  const top = lines.findIndex((line) => line.startsWith('┌'));
  const bottom = lines.findIndex((line) => line.startsWith('└'));
  t.ok(top >= 0 && bottom > top, 'in a framed block');
  t.notOk(lines.slice(top).some((line) => line.startsWith('{')), 'no log line after the block begins');
  t.match(lines.slice(top, bottom).join('\n'), /service-deck set-password[\s\S]*service-deck rotate-token/, 'the block says how to replace lost secrets');
  t.same(lines.slice(bottom + 1), ['service-deck: running; Ctrl-C stops the service'], 'the last line says the start is over');

  const models = await fetch(`http://127.0.0.1:${apiPort}/v1/models`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(models.status, 200, 'the shown token works');
  const login = await fetch(`http://127.0.0.1:${uiPort}/api/v1/session`, {
    method: 'POST',
    headers: { 'x-service-deck': '1', 'content-type': 'application/json' },
    body: JSON.stringify({ password }),
  });
  t.equal(login.status, 200, 'the shown password logs in');
  again.child.kill('SIGTERM');
  t.same(await again.exited, { code: 0, signal: null });

  const third = spawnCli(t, args, env);
  await third.waitFor(/Ctrl-C stops the service/, 60_000);
  t.notMatch(third.output(), /shown once|┌/, 'a later start shows no secret: they were shown');
  third.child.kill('SIGTERM');
  await third.exited;
});

t.test('a busy inference port leaves the service running and says which port and how to change it', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  await occupy(t, apiPort);
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_GPUS: 'none', SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') };
  const demo = spawnCli(t, ['demo', '--ui-port', String(uiPort), '--api-port', String(apiPort)], env);
  await demo.waitFor(/Ctrl-C stops the service/, 60_000);
  t.match(
    demo.output(),
    new RegExp(`service-deck: inference listener: cannot listen on 127\\.0\\.0\\.1:${apiPort}: port ${apiPort} is in use \\(EADDRINUSE\\): stop what uses it .*or save another port while the listener is stopped`),
  );
  t.match(demo.output(), /operator password \(shown once\)/, 'the start succeeded: the secrets are shown');
  demo.child.kill('SIGTERM');
  t.same(await demo.exited, { code: 0, signal: null });
});

t.test('log lines: JSON without a terminal; readable (pino-pretty) with SERVICE_DECK_LOG_FORMAT=pretty', async (t) => {
  const run = async (format: string | undefined) => {
    const stateDir = await tempDir(t);
    const env = {
      SERVICE_DECK_STATE_DIR: stateDir,
      SERVICE_DECK_GPUS: 'none',
      SERVICE_DECK_API_TOKEN: 'sd-log-format-token-0123456789abcdefghij',
      ...(format ? { SERVICE_DECK_LOG_FORMAT: format } : {}),
    };
    const serve = spawnCli(t, ['serve', '--ui-port', String(await freePort())], env);
    await serve.waitFor(/Ctrl-C stops the service/, 60_000);
    serve.child.kill('SIGTERM');
    await serve.exited;
    return serve.output().split('\n');
  };
  const json = await run(undefined);
  const started = json.find((line) => line.includes('"admin listener started"'));
  t.ok(started, 'without a terminal, the lines are JSON');
  t.match(JSON.parse(started ?? '{}'), { level: 30, service: 'service-deck', msg: 'admin listener started', host: '127.0.0.1' });

  const pretty = await run('pretty');
  t.notOk(pretty.some((line) => line.startsWith('{"level"')), 'no JSON line');
  const line = pretty.find((l) => l.includes('admin listener started'));
  t.match(line, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: admin listener started \{"host":"127\.0\.0\.1","port":\d+\}$/, 'time, level, message and the fields on one line');
  t.ok(
    pretty.some((l) => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: stopping: letting running answers finish \{"signal":"SIGTERM"\}$/.test(l)),
    'every line so',
  );
  t.notOk(pretty.join('\n').includes('\u001b['), 'no colours without a terminal');
  t.notMatch(pretty.join('\n'), /"service":"service-deck"|"pid"|"hostname"/, 'without the fields every line has');

  const bad = spawnCli(t, ['serve'], { SERVICE_DECK_STATE_DIR: await tempDir(t), SERVICE_DECK_LOG_FORMAT: 'fancy' });
  t.equal((await bad.exited).code, 2, 'a wrong format is a usage error, as every bad setting is');
  t.match(bad.output(), /^service-deck: SERVICE_DECK_LOG_FORMAT: "fancy" is not one of json, pretty, auto\n/, 'naming the variable and the choices');
});
