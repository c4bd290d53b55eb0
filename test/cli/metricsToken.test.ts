// `service-deck rotate-metrics-token`: like rotate-token it works on the state directory
// with the service stopped or running, prints the new scrape token once, keeps only its hash
// (0600), and ends the old token at once, also for a running service.
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { build, tempDir } from '../helpers/build.js';
import { spawnCli } from '../helpers/spawn.js';

async function rotate(t: Test, stateDir: string): Promise<string> {
  const cli = spawnCli(t, ['rotate-metrics-token', '--state-dir', stateDir], {});
  t.same(await cli.exited, { code: 0, signal: null });
  const [token = '', ...rest] = cli.output().split('\n');
  t.match(rest.join('\n'), /shown once/);
  t.match(rest.join('\n'), stateDir, 'it names the state directory');
  return token.trim();
}

t.test('with the service stopped: a token once, only its hash stored (0600), a new one ends the old', async (t) => {
  const stateDir = await tempDir(t);
  const first = await rotate(t, stateDir);
  t.match(first, /^sdm-[A-Za-z0-9_-]{43}$/);
  const file = path.join(stateDir, 'secrets.json');
  t.equal((await stat(file)).mode & 0o777, 0o600);
  const stored = JSON.parse(await readFile(file, 'utf8')) as { metricsTokenHash: string; tokenHash: unknown };
  t.notMatch(JSON.stringify(stored), first, 'the token itself is not stored');
  t.equal(stored.metricsTokenHash, createHash('sha256').update(first).digest('hex'));
  t.equal(stored.tokenHash, null, 'the API token is left alone');
  const second = await rotate(t, stateDir);
  t.not(second, first);

  const usage = spawnCli(t, ['rotate-metrics-token', 'now', '--state-dir', stateDir], {});
  t.equal((await usage.exited).code, 2, 'an extra argument is a usage error');
});

t.test('with the service running: the running service takes the new token at once and refuses the old', async (t) => {
  const b = await build(t, { login: false });
  const scrape = (token: string) => fetch(`${b.adminUrl}/metrics`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.status);
  const first = await rotate(t, b.stateDir);
  t.equal(await scrape(first), 200);
  const second = await rotate(t, b.stateDir);
  t.equal(await scrape(first), 401, 'the old token stopped working');
  t.equal(await scrape(second), 200);
});
