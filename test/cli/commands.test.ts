// The admin commands of `service-deck` (issue 16 item 4): status and profiles against a running
// service (its admin API on loopback, logged in with the operator password, logged out after) and
// against a stopped state directory (its files; blockers computed as the service computes them);
// --api-port at the first start only; usage errors; `npx service-deck`. The real command runs
// (bin/service-deck.js over the built dist/), its stdout, stderr and exit code are checked.
import { spawn } from 'node:child_process';
import { chmod, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { build, freePort, PASSWORD, tempDir, type Built } from '../helpers/build.js';
import { BIN } from '../helpers/spawn.js';

const ROOT = path.resolve(path.dirname(BIN), '..');

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (at most 60 s) with only PATH, HOME and `env`; `input` is its standard input. */
function run(t: Test, command: string[], env: NodeJS.ProcessEnv, input = ''): Promise<Ran> {
  const [program = process.execPath, ...args] = command;
  const child = spawn(program, args, { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio: 'pipe' });
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  t.teardown(() => {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  child.stdin.end(input);
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

const cli = (t: Test, args: string[], env: NodeJS.ProcessEnv, input?: string) => run(t, [process.execPath, BIN, ...args], env, input);

/** A runtime that is present (a script that is never run here). */
async function fakeRuntime(dir: string): Promise<string> {
  const file = path.join(dir, 'runtime.sh');
  await writeFile(file, '#!/bin/sh\nexit 0\n');
  await chmod(file, 0o755);
  return file;
}

interface Profiles {
  chat: { id: string; model: string };
  voice: { id: string };
  imageA: { id: string };
  imageB: { id: string };
}

/**
 * A service with llama-server and espeak-ng "installed" and no sd-cli: a chat profile whose model
 * file is missing (blocked), a TTS profile (ready), two image profiles (blocked: no sd-cli).
 */
async function serviceWithProfiles(t: Test, stateDir?: string): Promise<{ b: Built; env: NodeJS.ProcessEnv; profiles: Profiles }> {
  const dir = await tempDir(t, 'sd-cli-');
  const runtime = await fakeRuntime(dir);
  const env = { SERVICE_DECK_LLAMA_SERVER: runtime, SERVICE_DECK_ESPEAK_NG: runtime, SERVICE_DECK_SD_CLI: path.join(dir, 'no-sd-cli'), SERVICE_DECK_GPUS: 'none' };
  const b = await build(t, { env, ...(stateDir ? { stateDir } : {}) });
  const create = async (body: unknown) => {
    const response = await b.admin('POST', '/api/v1/profiles', body);
    if (response.status !== 201) throw new Error(`create: ${response.status} ${await response.text()}`);
    return (await response.json()) as { id: string };
  };
  const model = path.join(dir, 'missing.gguf');
  const chat = await create({ name: 'talker', category: 'chat', params: { model } });
  const voice = await create({ name: 'voice', category: 'tts', params: {} });
  const imageA = await create({ name: 'painter-a', category: 'image', params: { model: path.join(dir, 'a.gguf') } });
  const imageB = await create({ name: 'painter-b', category: 'image', params: { model: path.join(dir, 'b.gguf') } });
  for (const id of [chat.id, imageA.id]) {
    const response = await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
    if (response.status !== 200) throw new Error(`publish: ${response.status}`);
  }
  // The command sees what the service sees: the same state directory, cache and runtimes.
  const cliEnv = { SERVICE_DECK_STATE_DIR: b.stateDir, SERVICE_DECK_CACHE_DIR: b.config.cacheDir, ...env };
  return { b, env: cliEnv, profiles: { chat: { ...chat, model }, voice, imageA, imageB } };
}

const noStack = (t: Test, ran: Ran) => t.notMatch(ran.stdout + ran.stderr, /\n\s+at .+:\d+:\d+/, 'no stack trace');

t.test('a running service: status and profiles through the admin API, logged out afterwards', async (t) => {
  const { b, env, profiles } = await serviceWithProfiles(t);
  const withPassword = { ...env, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD };

  const record = JSON.parse(await readFile(path.join(b.stateDir, 'admin.json'), 'utf8')) as Record<string, unknown>;
  t.match(record, { host: '127.0.0.1', port: Number(new URL(b.adminUrl).port), pid: process.pid }, 'admin.json says where the admin listener is');
  t.equal((await stat(path.join(b.stateDir, 'admin.json'))).mode & 0o777, 0o600, 'admin.json is 0600');

  // Every session the command opens is closed again.
  const { sessions } = b.service;
  const opened: string[] = [];
  const create = sessions.create.bind(sessions);
  sessions.create = (stamp) => {
    const session = create(stamp);
    opened.push(session.id);
    return session;
  };

  await b.startEndpoint();
  const port = (await b.service.status()).port;
  const status = await cli(t, ['status'], withPassword);
  t.equal(status.code, 0, `status exits 0: ${status.stderr}`);
  const lines = status.stdout.split('\n');
  t.equal(lines[0], `service-deck: state directory ${b.stateDir}`);
  t.equal(lines[1], `service: running (process ${process.pid}, admin API ${b.adminUrl})`);
  t.equal(lines[2], `inference listener: running on http://127.0.0.1:${port}/v1`);
  t.ok(lines.includes('workers: none loaded'), 'no worker loaded');
  t.ok(lines.includes('queue: 0 waiting, 0 running'));
  t.ok(lines.includes('profiles: 4 (2 published, 3 blocked)'), status.stdout);
  t.ok(lines.includes(`  blocked: talker (${profiles.chat.id}, chat, published): model file missing: ${profiles.chat.model}`), 'the blocked chat profile and why');
  t.notOk(status.stdout.includes('voice ('), 'a ready profile is not listed as blocked');

  const json = await cli(t, ['status', '--json', '--password-stdin'], env, `${PASSWORD}\n`);
  t.equal(json.code, 0, json.stderr);
  const report = JSON.parse(json.stdout) as { state_dir: string; service: Record<string, unknown>; endpoint: { status: string; port: number; profiles: unknown[] } };
  t.equal(report.state_dir, b.stateDir);
  t.same(report.service, { running: true, pid: process.pid, admin_url: b.adminUrl, note: null });
  t.match(report.endpoint, { status: 'running', port, counters: {}, queue: { waiting: [], running: [] } }, 'the endpoint status object as GET /api/v1/endpoint gives it');

  const list = await cli(t, ['profiles'], withPassword);
  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, `service-deck: state directory ${b.stateDir} (service running, process ${process.pid}, admin API ${b.adminUrl})`);
  t.match(list.stdout, new RegExp(`${profiles.voice.id}\\s+voice\\s+tts\\s+no\\s+ready`), 'the TTS profile: unpublished, ready');
  t.match(list.stdout, new RegExp(`${profiles.chat.id}\\s+talker\\s+chat\\s+yes\\s+blocked: model file missing`), 'the chat profile: published, blocked');

  const show = await cli(t, ['profiles', 'show', 'talker'], withPassword);
  t.equal(show.code, 0, show.stderr);
  t.match(show.stdout, `id:         ${profiles.chat.id}\n`);
  t.match(show.stdout, `blockers:\n  - model file missing: ${profiles.chat.model}\n`);
  t.match(show.stdout, `"model": ${JSON.stringify(profiles.chat.model)}`, 'its parameters');

  const published = await cli(t, ['profiles', 'publish', 'voice'], withPassword);
  t.equal(published.code, 0, published.stderr);
  t.match(published.stdout, `published voice (${profiles.voice.id}, tts)`);
  t.ok(b.service.profiles.isPublished(profiles.voice.id), 'the service published it');
  const image = await cli(t, ['profiles', 'publish', profiles.imageB.id], withPassword);
  t.equal(image.code, 0, image.stderr);
  t.match(image.stdout, `unpublished painter-a (${profiles.imageA.id}): at most one image profile is published`);
  t.match(image.stdout, 'it stays out of the model lists until its blockers are gone: runtime missing: sd-cli');
  t.same(b.service.profiles.published, [profiles.chat.id, profiles.voice.id, profiles.imageB.id]);
  const unpublished = await cli(t, ['profiles', 'unpublish', profiles.voice.id, '--json'], withPassword);
  t.equal(unpublished.code, 0, unpublished.stderr);
  t.same((JSON.parse(unpublished.stdout) as { published: string[] }).published, [profiles.chat.id, profiles.imageB.id]);
  t.notOk(b.service.profiles.isPublished(profiles.voice.id));

  t.equal(opened.length, 7, 'one session per command');
  t.same(
    opened.filter((id) => sessions.peek(id) !== undefined),
    [],
    'each command logged out',
  );

  const unknown = await cli(t, ['profiles', 'show', 'nobody'], withPassword);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, `service-deck: no profile with the id or name "nobody" in ${b.stateDir}`);

  const wrong = await cli(t, ['status', '--password-stdin'], env, 'not the password\n');
  t.equal(wrong.code, 1, 'a wrong password: exit 1');
  t.match(wrong.stderr, 'service-deck: login refused: Wrong password');
  noStack(t, wrong);

  const none = await cli(t, ['status'], env);
  t.equal(none.code, 1, 'no password given and no terminal: exit 1');
  t.match(none.stderr, `logs in to the running service of ${b.stateDir} (process ${process.pid}, admin API ${b.adminUrl})`);
  t.match(none.stderr, 'SERVICE_DECK_ADMIN_PASSWORD or --password-stdin');
  t.equal(none.stdout, '');
});

t.test('a stopped service: status and profiles from the state directory, no password, nothing written', async (t) => {
  const { b, env, profiles } = await serviceWithProfiles(t);
  const viewsBefore = await b.service.catalog.views();
  await b.service.shutdown();
  await t.rejects(stat(path.join(b.stateDir, 'admin.json')), { code: 'ENOENT' }, 'the service removed admin.json at its end');
  const endpointBefore = await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8');

  const status = await cli(t, ['status'], env);
  t.equal(status.code, 0, status.stderr);
  t.same(status.stdout.split('\n').slice(0, 6), [
    `service-deck: state directory ${b.stateDir}`,
    'service: not running',
    `inference listener: stopped with the service (port ${(JSON.parse(endpointBefore) as { port: number }).port}; stays stopped when the service starts)`,
    'workers: none loaded',
    'queue: 0 waiting, 0 running',
    'profiles: 4 (2 published, 3 blocked)',
  ]);
  t.match(status.stdout, `  blocked: talker (${profiles.chat.id}, chat, published): model file missing: ${profiles.chat.model}`);
  t.match(status.stdout, `  blocked: painter-b (${profiles.imageB.id}, image): runtime missing: sd-cli`);

  const list = await cli(t, ['profiles', 'list', '--json'], env);
  t.equal(list.code, 0, list.stderr);
  const listed = JSON.parse(list.stdout) as { state_dir: string; service: { running: boolean }; profiles: Array<{ id: string; published: boolean; blockers: string[] }> };
  t.equal(listed.state_dir, b.stateDir);
  t.equal(listed.service.running, false);
  t.same(
    listed.profiles.map((p) => [p.id, p.published, p.blockers]),
    viewsBefore.map((p) => [p.id, p.published, p.blockers]),
    'the same publication and blockers as the running service computed',
  );

  const publish = await cli(t, ['profiles', 'publish', 'voice'], env);
  t.equal(publish.code, 1, 'publishing needs the running service');
  t.match(publish.stderr, `profiles publish needs the running service, and the service of ${b.stateDir} is not running`);
  t.equal(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8'), endpointBefore, 'endpoint.json is left as it was');

  // A service killed without its shutdown leaves admin.json behind, naming a process that is gone.
  const gone = await run(t, [process.execPath, '-e', 'process.stdout.write(String(process.pid))'], {});
  await writeFile(path.join(b.stateDir, 'admin.json'), JSON.stringify({ host: '127.0.0.1', port: await freePort(), pid: Number(gone.stdout), started_at: new Date().toISOString() }));
  const stale = await cli(t, ['status'], env);
  t.equal(stale.code, 0, stale.stderr);
  t.match(stale.stdout, `service: not running (admin.json names process ${gone.stdout}, which has ended (a service that was killed))`);
  // A live process that does not answer: this test's own pid on a port nobody listens on.
  await writeFile(path.join(b.stateDir, 'admin.json'), JSON.stringify({ host: '0.0.0.0', port: await freePort(), pid: process.pid, started_at: new Date().toISOString() }));
  const silent = await cli(t, ['profiles', 'show', 'voice'], env);
  t.equal(silent.code, 0, silent.stderr);
  t.match(silent.stdout, /service not running: read from its files; admin.json names process \d+, but nothing answers at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);

  const set = await cli(t, ['set-password'], env, 'another long password\n');
  t.equal(set.code, 0, set.stderr);
  t.equal(set.stdout, `service-deck: operator password saved (scrypt hash) in state directory ${b.stateDir}\n`);

  const missing = await cli(t, ['status', '--state-dir', path.join(b.stateDir, 'nowhere')], env);
  t.equal(missing.code, 1);
  t.match(missing.stderr, `service-deck: no state directory at ${path.join(b.stateDir, 'nowhere')}`);
  noStack(t, missing);
});

t.test('a bad option, command or argument prints the usage on stderr and exits 2', async (t) => {
  const stateDir = await tempDir(t);
  const cases: Array<[string[], string]> = [
    [['status', '--bogus'], "Unknown option '--bogus'"],
    [['profiles', 'frob'], 'profiles: unknown subcommand "frob" (one of list, show, publish, unpublish)'],
    [['profiles', 'show'], 'profiles show needs a profile id or name'],
    [['profiles', 'list', 'x'], 'profiles list takes no argument'],
    [['status', 'now'], 'status: unexpected argument "now"'],
    [['serve', '--api-port', '80'], '--api-port: 80 is outside the allowed ports 1024-65535'],
    [['serve', '--api-ports', '8120-8124', '--api-port', '8125'], '--api-port: 8125 is outside the allowed ports 8120-8124'],
    [['status', '--ui-port', 'abc'], '--ui-port: "abc" is not a port number'],
    [['launch'], 'unknown command "launch"'],
    [[], 'no command given'],
  ];
  // Each case is its own process: they run side by side.
  const runs = await Promise.all(cases.map(([args]) => cli(t, args, { SERVICE_DECK_STATE_DIR: stateDir })));
  for (const [i, [args, message]] of cases.entries()) {
    const ran = runs[i]!;
    t.equal(ran.code, 2, `${args.join(' ') || '(nothing)'}: exit 2`);
    t.match(ran.stderr, `service-deck: ${message}`, `${args.join(' ') || '(nothing)'}: says what is wrong`);
    t.match(ran.stderr, 'usage: service-deck <command> [options]', 'and prints the usage');
    t.equal(ran.stdout, '');
    noStack(t, ran);
  }
  const help = await cli(t, ['--help'], {});
  t.equal(help.code, 0);
  t.match(help.stdout, /profiles publish <id\|name>/);
});

/**
 * `service-deck serve` until it listens, then SIGTERM: its `service-deck:` lines, the port that
 * endpoint.json held while it ran (no endpoint start was asked for) and what `status --json` said.
 */
async function serveOnce(t: Test, env: NodeJS.ProcessEnv, args: string[]) {
  const child = spawn(process.execPath, [BIN, 'serve', ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_GPUS: 'none', ...env } });
  t.teardown(() => void child.kill('SIGKILL'));
  const closed = new Promise((resolve) => child.once('close', resolve));
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start within 30 s:\n${out}`)), 30_000);
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (!out.includes('inference listener is stopped')) return;
      clearTimeout(timer);
      resolve();
    });
  });
  const stateDir = env.SERVICE_DECK_STATE_DIR ?? '';
  const { port } = JSON.parse(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8')) as { port: number };
  const status = await cli(t, ['status', '--json'], { ...env, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD });
  child.kill('SIGTERM');
  await closed;
  const lines = out.split('\n').filter((l) => l.startsWith('service-deck:'));
  return { lines, port, status: JSON.parse(status.stdout) as { endpoint: { port: number } }, stateDir };
}

t.test('--api-port and SERVICE_DECK_API_PORT set the inference port of the first start only', async (t) => {
  const [uiPort, first, later] = await Promise.all([freePort(), freePort(), freePort()]);
  const envOf = async () => {
    const stateDir = await tempDir(t);
    return { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') };
  };
  const env = await envOf();
  const one = await serveOnce(t, env, ['--ui-port', String(uiPort), '--api-port', String(first)]);
  t.equal(one.lines[0], `service-deck: state directory ${one.stateDir}`, 'serve names its state directory first');
  t.equal(one.port, first, 'the first start saved its --api-port in endpoint.json at once');
  t.equal(one.status.endpoint.port, first, 'status shows it');
  await t.rejects(stat(path.join(one.stateDir, 'admin.json')), { code: 'ENOENT' }, 'SIGTERM removed admin.json');

  const two = await serveOnce(t, { ...env, SERVICE_DECK_API_PORT: String(later) }, ['--ui-port', String(uiPort)]);
  t.equal(two.port, first, 'a later start keeps the saved port');
  t.equal(
    two.lines[1],
    `service-deck: --api-port ${later} applies only at the first start: ${path.join(one.stateDir, 'endpoint.json')} keeps port ${first} (change it with POST /api/v1/endpoint/config while the listener is stopped)`,
  );

  const fresh = await serveOnce(t, { ...(await envOf()), SERVICE_DECK_API_PORT: String(later) }, ['--ui-port', String(uiPort)]);
  t.equal(fresh.port, later, 'SERVICE_DECK_API_PORT at a first start');
  t.equal(fresh.lines.filter((l) => l.includes('applies only at the first start')).length, 0, 'no notice at the first start');
});

t.test('npx service-deck runs the command from the checkout', async (t) => {
  const ran = await run(t, ['npx', '--no-install', 'service-deck', '--help'], { npm_config_update_notifier: 'false' });
  t.equal(ran.code, 0, ran.stderr);
  t.match(ran.stdout, /^usage: service-deck <command> \[options\]/);
});
