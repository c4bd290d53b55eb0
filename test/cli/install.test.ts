// `service-deck install` / `update` (spec 8, the container installation's port range): the range
// given with --api-ports is saved in endpoint.json and every later start uses it, over the image's
// SERVICE_DECK_API_PORTS; a saved port outside it is named with the fix and corrected with
// --api-port; the command refuses to touch the files of a running service. The command runs in
// this process (src/cli.ts's main), the later start is the real service (test/helpers/build.ts).
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { main } from '../../src/cli.js';
import { CliError, UsageError } from '../../src/cli/errors.js';
import { withSavedPortRange, loadConfig } from '../../src/config.js';
import type { EndpointStatus } from '../../src/system/observe/console.types.js';
import { build, tempDir } from '../helpers/build.js';

/** Runs `service-deck <args>` in this process with SERVICE_DECK_API_PORTS as the image sets it; its stdout and stderr. */
async function cli(args: string[], env: NodeJS.ProcessEnv = { SERVICE_DECK_API_PORTS: '8120-8124' }) {
  const out = { code: -1, stdout: '', stderr: '' };
  const writes = { stdout: process.stdout.write, stderr: process.stderr.write };
  const saved = Object.fromEntries(Object.keys(env).map((key) => [key, process.env[key]]));
  Object.assign(process.env, env);
  process.stdout.write = ((chunk: string) => ((out.stdout += chunk), true)) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string) => ((out.stderr += chunk), true)) as typeof process.stderr.write;
  try {
    out.code = await main(args);
  } finally {
    Object.assign(process.stdout, { write: writes.stdout });
    Object.assign(process.stderr, { write: writes.stderr });
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
  return out;
}

const endpointJson = async (stateDir: string) => JSON.parse(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8')) as Record<string, unknown>;

t.test('install --api-ports: the range is saved, and the next start uses it over SERVICE_DECK_API_PORTS', async (t) => {
  const stateDir = await tempDir(t);
  const ran = await cli(['install', '--state-dir', stateDir, '--api-ports', '8130-8134']);
  t.equal(ran.code, 0);
  t.equal(ran.stderr, '', 'a first install has no saved port to warn about');
  t.match(ran.stdout, `service-deck: state directory ${stateDir}\n`);
  t.match(ran.stdout, `inference ports 8130-8134 (saved in endpoint.json by \`service-deck update --api-ports\`), saved in ${path.join(stateDir, 'endpoint.json')}: every later start uses them`);
  t.match(ran.stdout, 'SERVICE_DECK_API_PORTS=8120-8124 is not used while endpoint.json keeps a range');
  t.same(await endpointJson(stateDir), { running: false, port: 8130, host: '127.0.0.1', published: [], api_ports: { first: 8130, last: 8134 }, extensions: { responses: false } }, 'a first install takes the range\'s first port (8120 is outside it)');
  t.equal((await stat(path.join(stateDir, 'endpoint.json'))).mode & 0o777, 0o600);

  // The next start, with the image's SERVICE_DECK_API_PORTS and no --api-ports.
  const b = await build(t, { stateDir, env: { SERVICE_DECK_API_PORTS: '8120-8124' } });
  const status = (await (await b.admin('GET', '/api/v1/endpoint')).json()) as EndpointStatus;
  t.match(status, { status: 'stopped', port: 8130, error: null, port_range: { first: 8130, last: 8134, from: 'saved' } });
  let response = await b.admin('POST', '/api/v1/endpoint/config', { port: 8124 });
  t.equal(response.status, 400, 'a port of the image\'s range but not of the saved one is refused');
  response = await b.admin('POST', '/api/v1/endpoint/config', { port: 8134 });
  t.equal(response.status, 200);
  t.ok(b.logLines.some((line) => line.includes('SERVICE_DECK_API_PORTS=8120-8124 is not used: endpoint.json keeps the range 8130-8134')), 'the start says which range it ignores');
  await b.service.shutdown();
  t.match(await endpointJson(stateDir), { port: 8134, api_ports: { first: 8130, last: 8134 } }, 'the service\'s own writes keep the saved range');
});

t.test('update --api-ports over a saved port outside the new range: the warning names the fix; --api-port corrects it', async (t) => {
  const stateDir = await tempDir(t);
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: 8120, host: '0.0.0.0', published: ['p-chat'] }), { mode: 0o600 });
  let ran = await cli(['update', '--state-dir', stateDir, '--api-ports', '8130-8134']);
  t.equal(ran.code, 0, 'the range is saved all the same');
  t.match(ran.stdout, 'inference port 8120\n');
  t.match(ran.stderr, 'the saved port 8120 is outside the allowed ports 8130-8134: the inference listener stays stopped at the next start');
  t.match(ran.stderr, '`service-deck update --api-port <port>`');
  t.same(await endpointJson(stateDir), { running: true, port: 8120, host: '0.0.0.0', published: ['p-chat'], api_ports: { first: 8130, last: 8134 }, extensions: { responses: false } }, 'the port is not moved silently; the rest is kept');

  await t.rejects(cli(['update', '--state-dir', stateDir, '--api-port', '8125']), new UsageError('--api-port: 8125 is outside the allowed ports 8130-8134'), 'the saved range, not the image\'s, decides');
  ran = await cli(['update', '--state-dir', stateDir, '--api-port', '8132']);
  t.equal(ran.code, 0);
  t.equal(ran.stderr, '');
  t.match(ran.stdout, 'inference ports 8130-8134 (saved in endpoint.json');
  t.match(ran.stdout, 'inference port 8132 (saved)');
  t.match(await endpointJson(stateDir), { running: true, port: 8132, api_ports: { first: 8130, last: 8134 } });
});

t.test('install refuses a running service, a bad range and words after it', async (t) => {
  const b = await build(t, { login: false });
  await t.rejects(cli(['update', '--state-dir', b.stateDir, '--api-ports', '8130-8134']), CliError, 'a running service keeps its files');
  t.notMatch(await endpointJson(b.stateDir), { api_ports: {} }, 'nothing saved');
  const stateDir = await tempDir(t);
  await t.rejects(cli(['install', '--state-dir', stateDir, '--api-ports', '8134-8130']), new UsageError('--api-ports: 8134-8130 must be an ascending range within 1024-65535'));
  await t.rejects(cli(['install', '--state-dir', stateDir, 'now']), new UsageError('install: unexpected argument "now"'));
});

t.test('the range in force: serve --api-ports for one run, then the saved range, then SERVICE_DECK_API_PORTS', async (t) => {
  const saved = { first: 8130, last: 8134 };
  const env = { SERVICE_DECK_API_PORTS: '8120-8124' };
  t.match(withSavedPortRange(loadConfig({ stateDir: '/tmp/x', apiPorts: '9000-9009' }, env), saved), { apiPorts: { first: 9000, last: 9009 }, apiPortsFrom: 'option' });
  t.match(withSavedPortRange(loadConfig({ stateDir: '/tmp/x' }, env), saved), { apiPorts: saved, apiPortsFrom: 'saved' });
  t.match(withSavedPortRange(loadConfig({ stateDir: '/tmp/x' }, env), undefined), { apiPorts: { first: 8120, last: 8124 }, apiPortsFrom: 'env' });
  t.match(withSavedPortRange(loadConfig({ stateDir: '/tmp/x' }, {}), undefined), { apiPorts: { first: 1024, last: 65535 }, apiPortsFrom: 'native' });
});
