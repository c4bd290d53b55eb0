// The admin commands of `service-deck`: status and profiles against a running service (its admin
// API on loopback, logged in with the operator password, logged out after) and against a stopped
// state directory (its files; blockers computed as the service computes them); profiles created,
// edited and deleted through the service; the prompt enhancers installed from a local hub and
// followed; --api-port at the first start only; usage errors; `npx service-deck`. The real command
// runs (bin/service-deck.js over the built dist/), its stdout, stderr and exit code are checked.
//
// Each command is its own process that logs in (scrypt), so the file is sparing with both: one
// service serves the running cases and then, shut down, the stopped ones; its password hash is a
// cheap one; commands that do not depend on each other run side by side; the usage errors are
// checked in this process, and three of them as processes.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, cp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { build, freePort, PASSWORD, tempDir, type Built } from '../helpers/build.js';
import { cheapPasswordCheck, cli, noStack, run } from '../helpers/cli.js';
import { main } from '../../src/cli.js';
import { UsageError } from '../../src/cli/errors.js';
import { startHub, writeTinyRecipes } from '../helpers/hub.js';
import { BIN } from '../helpers/spawn.js';
import { until } from '../helpers/until.js';

// Some forty command processes, each logging in (scrypt), and a service stopped and read: it ran
// past the 180 s file limit on a loaded 2-core machine (220 s at a load of 11).
t.setTimeout(420_000);

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

const ENHANCER_REPO = 'test-org/tiny-enhancer';

/**
 * A service with llama-server and espeak-ng "installed" and no sd-cli: a chat profile whose model
 * file is missing (blocked), a TTS profile (ready), two image profiles (blocked: no sd-cli).
 */
async function serviceWithProfiles(t: Test, hubUrl: string): Promise<{ b: Built; env: NodeJS.ProcessEnv; profiles: Profiles }> {
  const dir = await tempDir(t, 'sd-cli-');
  const runtime = await fakeRuntime(dir);
  const env = { SERVICE_DECK_LLAMA_SERVER: runtime, SERVICE_DECK_ESPEAK_NG: runtime, SERVICE_DECK_SD_CLI: path.join(dir, 'no-sd-cli'), SERVICE_DECK_GPUS: 'none' };
  // The prompt enhancers come from a local hub: a small model for t2i, the model and a projector for i2i.
  const recipes = await writeTinyRecipes(dir, ENHANCER_REPO);
  const b = await build(t, { env: { ...env, SERVICE_DECK_ENHANCER_HUB: hubUrl, SERVICE_DECK_ENHANCER_RECIPES: recipes } });
  await cheapPasswordCheck(b);
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



// What runs apart from the service below starts at once, beside its cases; the subtests at the end
// check what it gave. A failure is reported there (the catch only keeps it from going unhandled).
const USAGE_CASES: Array<[string[], string]> = [
  [['status', '--bogus'], "Unknown option '--bogus'"],
  [['profiles', 'frob'], 'profiles: unknown subcommand "frob" (one of list, show, create, edit, set, delete, publish, unpublish)'],
  [['profiles', 'show'], 'profiles show needs a profile id or name'],
  [['profiles', 'list', 'x'], 'profiles list takes no argument (got "x")'],
  [['profiles', 'create'], 'profiles create needs --file FILE (a JSON profile; - reads standard input)'],
  [['profiles', 'create', 'x', '--file', 'p.json'], 'profiles create takes no argument (got "x")'],
  [['profiles', 'edit', 'x'], 'profiles edit needs --file FILE'],
  [['profiles', 'show', 'x', '--file', 'p.json'], 'profiles show takes no --file'],
  [['profiles', 'set', 'x'], 'profiles set needs at least one key=value after the profile'],
  [['profiles', 'set', 'x', 'params.context'], 'profiles set: "params.context" is not key=value'],
  [['profiles', 'set', 'x', 'params..context=1'], 'profiles set: "params..context=1" is not key=value'],
  [['profiles', 'set', 'x', '__proto__.polluted=1'], 'profiles set: "__proto__" is not a profile field'],
  [['profiles', 'set', 'x', 'params.constructor=1'], 'profiles set: "constructor" is not a profile field'],
  [['profiles', 'delete', 'x', 'y'], 'profiles delete: unexpected argument "y"'],
  [['profiles', 'create', '--file', '-', '--password-stdin'], 'profiles create: --file - and --password-stdin both read standard input'],
  [['enhancers', 'frob'], 'enhancers: unknown subcommand "frob" (one of list, install, cancel)'],
  [['enhancers', 'install'], 'enhancers install needs the task: t2i or i2i'],
  [['enhancers', 'install', 'x2y'], 'enhancers install needs the task: t2i or i2i (got "x2y")'],
  [['enhancers', 'cancel', 'now'], 'enhancers cancel takes no argument (got "now")'],
  [['extensions', 'frob'], 'extensions: unknown subcommand "frob" (one of list, enable, disable)'],
  [['extensions', 'enable'], 'extensions enable needs the extension: responses'],
  [['extensions', 'disable', 'assistants'], 'extensions disable needs the extension: responses (got "assistants")'],
  [['extensions', 'enable', 'responses', 'now'], 'extensions enable: unexpected argument "now"'],
  [['extensions', 'list', 'x'], 'extensions list takes no argument (got "x")'],
  [['status', 'now'], 'status: unexpected argument "now"'],
  [['serve', '--api-port', '80'], '--api-port: 80 is outside the allowed ports 1024-65535'],
  [['serve', '--api-ports', '8120-8124', '--api-port', '8125'], '--api-port: 8125 is outside the allowed ports 8120-8124'],
  [['status', '--ui-port', 'abc'], '--ui-port: "abc" is not a port number'],
  [['launch'], 'unknown command "launch"'],
  [[], 'no command given'],
];
/** The usage cases that also run as processes: of the option parser, a subcommand and no command. */
const USAGE_AS_PROCESSES = [0, 1, USAGE_CASES.length - 1];
const usageState = await tempDir(t);
const usageRuns = Promise.all([
  cli(t, ['--help'], {}),
  run(t, ['npx', '--no-install', 'service-deck', '--help'], { npm_config_update_notifier: 'false' }),
  ...USAGE_AS_PROCESSES.map((i) => cli(t, USAGE_CASES[i]![0], { SERVICE_DECK_STATE_DIR: usageState })),
]);
const portStarts = apiPortStarts(t);
portStarts.catch(() => undefined);

// The one service of the running cases; the stopped cases shut it down and read its files.
const hub = await startHub(t);
hub.put(ENHANCER_REPO, 'main', 'tiny-Q4.gguf', randomBytes(1024 * 1024));
hub.put(ENHANCER_REPO, 'main', 'mmproj/tiny-mmproj.gguf', randomBytes(1024 * 1024));
const { b, env, profiles } = await serviceWithProfiles(t, hub.url);
const withPassword = { ...env, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD };

// Every session a command opens is counted, and must be closed again.
const { sessions } = b.service;
const opened: string[] = [];
const createSession = sessions.create.bind(sessions);
sessions.create = (stamp) => {
  const session = createSession(stamp);
  opened.push(session.id);
  return session;
};
const stillOpen = () => opened.filter((id) => sessions.peek(id) !== undefined);

t.test('a running service: status and profiles through the admin API, logged out afterwards', async (t) => {
  const record = JSON.parse(await readFile(path.join(b.stateDir, 'admin.json'), 'utf8')) as Record<string, unknown>;
  t.match(record, { host: '127.0.0.1', port: Number(new URL(b.adminUrl).port), pid: process.pid }, 'admin.json says where the admin listener is');
  t.equal((await stat(path.join(b.stateDir, 'admin.json'))).mode & 0o777, 0o600, 'admin.json is 0600');

  await b.startEndpoint();
  const port = (await b.service.status()).port;
  const sessionsBefore = opened.length;
  // The commands that only read run side by side.
  const [status, json, list, show, unknown, wrong, none] = await Promise.all([
    cli(t, ['status'], withPassword),
    cli(t, ['status', '--json', '--password-stdin'], env, `${PASSWORD}\n`),
    cli(t, ['profiles'], withPassword),
    cli(t, ['profiles', 'show', 'talker'], withPassword),
    cli(t, ['profiles', 'show', 'nobody'], withPassword),
    cli(t, ['status', '--password-stdin'], env, 'not the password\n'),
    cli(t, ['status'], env),
  ]);

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

  t.equal(json.code, 0, json.stderr);
  const report = JSON.parse(json.stdout) as { state_dir: string; service: Record<string, unknown>; endpoint: { status: string; port: number; profiles: unknown[] } };
  t.equal(report.state_dir, b.stateDir);
  t.same(report.service, { running: true, pid: process.pid, admin_url: b.adminUrl, note: null });
  t.match(report.endpoint, { status: 'running', port, counters: {}, queue: { waiting: [], running: [] } }, 'the endpoint status object as GET /api/v1/endpoint gives it');

  t.equal(list.code, 0, list.stderr);
  t.match(list.stdout, `service-deck: state directory ${b.stateDir} (service running, process ${process.pid}, admin API ${b.adminUrl})`);
  t.match(list.stdout, new RegExp(`${profiles.voice.id}\\s+voice\\s+tts\\s+no\\s+ready`), 'the TTS profile: unpublished, ready');
  t.match(list.stdout, new RegExp(`${profiles.chat.id}\\s+talker\\s+chat\\s+yes\\s+blocked: model file missing`), 'the chat profile: published, blocked');

  t.equal(show.code, 0, show.stderr);
  t.match(show.stdout, `id:         ${profiles.chat.id}\n`);
  t.match(show.stdout, `blockers:\n  - model file missing: ${profiles.chat.model}\n`);
  t.match(show.stdout, `"model": ${JSON.stringify(profiles.chat.model)}`, 'its parameters');

  t.equal(unknown.code, 1);
  t.match(unknown.stderr, `service-deck: no profile with the id or name "nobody" in ${b.stateDir}`);

  t.equal(wrong.code, 1, 'a wrong password: exit 1');
  t.match(wrong.stderr, 'service-deck: login refused: Wrong password');
  t.match(wrong.stderr, 'Wrong password. (HTTP 401 invalid_password)\n', 'with the status and code of the refusal');
  noStack(t, wrong);

  t.equal(none.code, 1, 'no password given and no terminal: exit 1');
  t.match(none.stderr, `logs in to the running service of ${b.stateDir} (process ${process.pid}, admin API ${b.adminUrl})`);
  t.match(none.stderr, 'SERVICE_DECK_ADMIN_PASSWORD or --password-stdin');
  t.equal(none.stdout, '');

  // Publication changes one after the other: each answer depends on the one before.
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

  // status, status --json, profiles, show talker, show nobody, publish, publish, unpublish.
  t.equal(opened.length - sessionsBefore, 8, 'one session per command that logged in');
  t.same(stillOpen(), [], 'each command logged out');
});

t.test('profiles create, edit, set and delete go through the running service with its revisions', async (t) => {
  const dir = await tempDir(t);
  const file = async (name: string, body: unknown) => {
    const at = path.join(dir, name);
    await writeFile(at, typeof body === 'string' ? body : JSON.stringify(body));
    return at;
  };
  const sessionsBefore = opened.length;
  const [created, taken, invalid, notJson] = await Promise.all([
    cli(t, ['profiles', 'create', '--file', await file('reader.json', { name: 'reader', category: 'stt', params: { defaultLanguage: 'en' } })], withPassword),
    cli(t, ['profiles', 'create', '--file', '-'], withPassword, JSON.stringify({ name: 'talker', category: 'chat', params: { model: profiles.chat.model } })),
    cli(t, ['profiles', 'create', '--file', await file('bad.json', { name: 'french', category: 'stt', params: { defaultLanguage: 'fr' } })], withPassword),
    cli(t, ['profiles', 'create', '--file', await file('broken.json', '{"name": ')], withPassword),
  ]);

  t.equal(created.code, 0, created.stderr);
  const id = /created reader \((p-[0-9a-f]+), stt\) at revision 1; unpublished/.exec(created.stdout)?.[1] ?? '';
  t.ok(id, `the new profile's id and revision: ${created.stdout}`);
  t.match(b.service.profiles.get(id), { name: 'reader', category: 'stt', revision: 1, params: { defaultLanguage: 'en', backend: 'pocketsphinx' } }, 'the service holds it');
  t.notOk(b.service.profiles.isPublished(id), 'a new profile is unpublished');
  t.match(created.stdout, `id:         ${id}\n`, 'the profile is shown as the service stored it');
  t.match(created.stdout, '"backend": "pocketsphinx"', 'with the defaults filled in');

  t.equal(taken.code, 1, 'a refusal: exit 1');
  t.match(taken.stderr, /^service-deck: POST \/api\/v1\/profiles: the API profile name "talker" is already used by profile p-[0-9a-f]+ \(HTTP 409 name_taken\)\n$/, 'the refusal from standard input with its status and code');
  t.equal(invalid.code, 1);
  t.match(invalid.stderr, /\(HTTP 400 invalid_value, field params\.defaultLanguage\)/, 'a refused value names its field');
  noStack(t, invalid);
  t.equal(notJson.code, 1);
  t.match(notJson.stderr, `service-deck: ${path.join(dir, 'broken.json')} is not JSON: `);
  t.equal(b.service.profiles.list().length, 5, 'nothing else was created');

  // A partial profile on standard input: name, category and revision are the profile's own.
  const edited = await cli(t, ['profiles', 'edit', 'reader', '--file', '-'], withPassword, JSON.stringify({ params: { defaultLanguage: 'auto' } }));
  t.equal(edited.code, 0, edited.stderr);
  t.match(edited.stdout, `updated reader (${id}, stt) from revision 1 to 2`);
  t.match(b.service.profiles.get(id), { name: 'reader', revision: 2, params: { defaultLanguage: 'auto' } });

  const set = await cli(t, ['profiles', 'set', id, 'params.threads=4', 'name=reader-2', '--json'], withPassword);
  t.equal(set.code, 0, set.stderr);
  t.match(JSON.parse(set.stdout), { state_dir: b.stateDir, profile: { id, name: 'reader-2', revision: 3, params: { threads: 4, defaultLanguage: 'auto' } } }, 'a JSON value is a number; what set leaves alone stays');
  t.match(b.service.profiles.get(id), { params: { threads: 4 } }, 'the service holds the change');

  // A file read at revision 1 is refused: the changes since are not overwritten.
  const stale = await cli(t, ['profiles', 'edit', 'reader-2', '--file', await file('stale.json', { revision: 1, name: 'reader-2', category: 'stt', params: {} })], withPassword);
  t.equal(stale.code, 1);
  t.match(stale.stderr, `is at revision 3, not 1: read it again and reapply the change (HTTP 409 stale_revision)`);
  t.equal(b.service.profiles.get(id)?.revision, 3, 'the profile is unchanged');

  t.equal((await b.admin('POST', '/api/v1/endpoint/profile', { id, enabled: true })).status, 200);
  const deleted = await cli(t, ['profiles', 'delete', 'reader-2'], withPassword);
  t.equal(deleted.code, 0, deleted.stderr);
  t.match(deleted.stdout, `deleted reader-2 (${id}, stt), which was published: it left the model lists`);
  t.equal(b.service.profiles.get(id), undefined, 'the service deleted it');
  t.notOk(b.service.profiles.isPublished(id), 'and its publication');

  // created, taken, invalid, edited, set, stale, deleted: the file that is not JSON logged in nowhere.
  t.equal(opened.length - sessionsBefore, 7, 'one session per command that reached the service');
  t.same(stillOpen(), [], 'each command logged out');
});

t.test('enhancers install follows the download in the service; a second install and a cancel', async (t) => {
  const sessionsBefore = opened.length;
  // About 2.5 s per file: the command sees it part-way.
  hub.options.chunkBytes = 16 * 1024;
  hub.options.chunkDelayMs = 40;
  const installed = await cli(t, ['enhancers', 'install', 't2i'], withPassword);
  t.equal(installed.code, 0, installed.stderr);
  const lines = installed.stdout.trimEnd().split('\n');
  t.match(lines[0], `service-deck: state directory ${b.stateDir} (service running`);
  t.match(lines[1], /^t2i: test-org\/tiny-enhancer installing/, 'the first line: the install has started');
  const partWay = lines.filter((l) => /installing tiny-Q4\.gguf, \d+\.\d MiB of 1\.0 MiB \(([1-9]\d?)%\)$/.test(l));
  t.ok(partWay.length >= 1, `progress part-way through the file:\n${installed.stdout}`);
  t.equal(lines.at(-1), 't2i: test-org/tiny-enhancer installed, 1.0 MiB of 1.0 MiB (100%)', 'the last line: installed');
  t.equal(b.service.enhancers.view().t2i.state, 'installed', 'the service installed it');

  // i2i's two files, held after their first chunk until the cancel: a second install is refused
  // while it runs, and a cancel ends it.
  let release = () => {};
  hub.options.gate = new Promise<void>((resolve) => (release = resolve));
  t.teardown(() => release());
  const following = cli(t, ['enhancers', 'install', 'i2i'], withPassword);
  await until('the i2i install to run', async () => (b.service.enhancers.view().i2i.state === 'installing' ? true : undefined));
  const second = await cli(t, ['enhancers', 'install', 't2i'], withPassword);
  t.equal(second.code, 1, 'a refused install: exit 1');
  t.match(second.stderr, /^service-deck: POST \/api\/v1\/prompt-enhancers\/install: .+ \(HTTP 409 install_running\)\n$/);
  const cancel = await cli(t, ['enhancers', 'cancel'], withPassword);
  hub.options.gate = null;
  release();
  t.equal(cancel.code, 0, cancel.stderr);
  t.match(cancel.stdout, 'cancelled the running install; its partial files are removed\nt2i: test-org/tiny-enhancer installed');
  t.match(cancel.stdout, '\ni2i: test-org/tiny-enhancer cancelled');
  const ended = await following;
  t.equal(ended.code, 1, 'the follower of a cancelled install: exit 1');
  t.match(ended.stdout, /^i2i: test-org\/tiny-enhancer installing /m);
  t.equal(ended.stderr, 'service-deck: the i2i install ended cancelled\n');
  hub.options.chunkDelayMs = 0;
  hub.options.chunkBytes = 64 * 1024;

  const list = await cli(t, ['enhancers', '--json'], withPassword);
  t.equal(list.code, 0, list.stderr);
  t.match(JSON.parse(list.stdout), { state_dir: b.stateDir, t2i: { state: 'installed' }, i2i: { state: 'cancelled' } });
  t.equal(opened.length - sessionsBefore, 5, 'one session per command');
  t.same(stillOpen(), [], 'each command logged out');
});

t.test('extensions: listed off, enabled and disabled through the running service, which serves by the switch at once', async (t) => {
  const sessionsBefore = opened.length;
  const responses = () => b.api('POST', '/v1/responses', { model: 'talker', input: 'x' });
  const listed = await cli(t, ['extensions'], withPassword);
  t.equal(listed.code, 0, listed.stderr);
  t.same(listed.stdout.trimEnd().split('\n').slice(1), ["responses: off (POST /v1/responses, OpenAI's Responses API; 404 while off)"], 'off on a default install');
  t.equal((await responses()).status, 404, 'and the route answers 404');

  const enabled = await cli(t, ['extensions', 'enable', 'responses'], withPassword);
  t.equal(enabled.code, 0, enabled.stderr);
  t.same(enabled.stdout.trimEnd().split('\n').slice(1), [
    "responses: on (POST /v1/responses, OpenAI's Responses API)",
    'responses is on from the next request, and stays so across restarts',
  ]);
  t.equal(b.service.extensions.isOn('responses'), true, 'the service has it on');
  // Served now: talker's model file is missing, so the Responses door gets as far as its profile look-up.
  const served = (await (await responses()).json()) as { error: { code: string } };
  t.equal(served.error.code, 'model_not_found', 'the route is served: the door looked the profile up');

  const json = await cli(t, ['extensions', '--json'], withPassword);
  t.equal(json.code, 0, json.stderr);
  t.match(JSON.parse(json.stdout), { state_dir: b.stateDir, service: { running: true }, extensions: { responses: true } });
  const disabled = await cli(t, ['extensions', 'disable', 'responses', '--json'], withPassword);
  t.equal(disabled.code, 0, disabled.stderr);
  t.match(JSON.parse(disabled.stdout), { extensions: { responses: false } });
  t.equal((await responses()).status, 404, 'off again: 404');
  // Left on: the stopped service's list below reads it from endpoint.json.
  t.equal((await cli(t, ['extensions', 'enable', 'responses'], withPassword)).code, 0);
  t.equal(opened.length - sessionsBefore, 5, 'one session per command');
  t.same(stillOpen(), [], 'each command logged out');
});

t.test('a stopped service: status and profiles from the state directory, no password, nothing written', async (t) => {
  // After the cases above: talker and painter-b are published; talker, painter-a and painter-b are blocked.
  const viewsBefore = await b.service.catalog.views();
  await b.service.shutdown();
  await t.rejects(stat(path.join(b.stateDir, 'admin.json')), { code: 'ENOENT' }, 'the service removed admin.json at its end');
  const endpointBefore = await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8');
  const profileFile = path.join(await tempDir(t), 'p.json');
  await writeFile(profileFile, JSON.stringify({ name: 'late', category: 'tts', params: {} }));

  const [status, list, publish, create, enhancers, extensions, enable, missing, gone] = await Promise.all([
    cli(t, ['status'], env),
    cli(t, ['profiles', 'list', '--json'], env),
    cli(t, ['profiles', 'publish', 'voice'], env),
    cli(t, ['profiles', 'create', '--file', profileFile], env),
    cli(t, ['enhancers'], env),
    cli(t, ['extensions'], env),
    cli(t, ['extensions', 'disable', 'responses'], env),
    cli(t, ['status', '--state-dir', path.join(b.stateDir, 'nowhere')], env),
    // A process that has ended, for the admin.json of a killed service below.
    run(t, [process.execPath, '-e', 'process.stdout.write(String(process.pid))'], {}),
  ]);
  t.equal(status.code, 0, status.stderr);
  t.same(status.stdout.split('\n').slice(0, 6), [
    `service-deck: state directory ${b.stateDir}`,
    'service: not running',
    `inference listener: stopped with the service (port ${(JSON.parse(endpointBefore) as { port: number }).port}; starts again when the service starts)`,
    'workers: none loaded',
    'queue: 0 waiting, 0 running',
    'profiles: 4 (2 published, 3 blocked)',
  ]);
  t.match(status.stdout, `  blocked: talker (${profiles.chat.id}, chat, published): model file missing: ${profiles.chat.model}`);
  t.match(status.stdout, `  blocked: painter-a (${profiles.imageA.id}, image): runtime missing: sd-cli`);

  t.equal(list.code, 0, list.stderr);
  const listed = JSON.parse(list.stdout) as { state_dir: string; service: { running: boolean }; profiles: Array<{ id: string; published: boolean; blockers: string[] }> };
  t.equal(listed.state_dir, b.stateDir);
  t.equal(listed.service.running, false);
  t.same(
    listed.profiles.map((p) => [p.id, p.published, p.blockers]),
    viewsBefore.map((p) => [p.id, p.published, p.blockers]),
    'the same publication and blockers as the running service computed',
  );

  t.equal(publish.code, 1, 'publishing needs the running service');
  t.match(publish.stderr, `profiles publish needs the running service, and the service of ${b.stateDir} is not running`);
  t.equal(create.code, 1, 'creating needs the running service');
  t.match(create.stderr, `profiles create needs the running service, and the service of ${b.stateDir} is not running`);
  t.equal(await readFile(path.join(b.stateDir, 'endpoint.json'), 'utf8'), endpointBefore, 'endpoint.json is left as it was');
  t.equal((await readdir(path.join(b.stateDir, 'profiles'))).length, 4, 'no profile file was written');
  t.equal(enhancers.code, 1);
  t.match(enhancers.stderr, `enhancers list needs the running service, and the service of ${b.stateDir} is not running`);
  t.equal(extensions.code, 0, extensions.stderr);
  t.same(extensions.stdout.trimEnd().split('\n'), [
    `service-deck: state directory ${b.stateDir} (service not running: read from its files)`,
    "responses: on (POST /v1/responses, OpenAI's Responses API)",
  ], 'extensions list reads endpoint.json');
  t.equal(enable.code, 1, 'switching needs the running service');
  t.match(enable.stderr, `extensions disable needs the running service, and the service of ${b.stateDir} is not running`);

  t.equal(missing.code, 1);
  t.match(missing.stderr, `service-deck: no state directory at ${path.join(b.stateDir, 'nowhere')}`);
  noStack(t, missing);

  // A service killed without its shutdown leaves admin.json behind, naming a process that is gone.
  await writeFile(path.join(b.stateDir, 'admin.json'), JSON.stringify({ host: '127.0.0.1', port: await freePort(), pid: Number(gone.stdout), started_at: new Date().toISOString() }));
  // A live process that does not answer (this test's own pid on a port nobody listens on), in a copy.
  const copy = path.join(await tempDir(t), 'state');
  await cp(b.stateDir, copy, { recursive: true });
  await writeFile(path.join(copy, 'admin.json'), JSON.stringify({ host: '0.0.0.0', port: await freePort(), pid: process.pid, started_at: new Date().toISOString() }));
  const [stale, silent, set] = await Promise.all([
    cli(t, ['status'], env),
    cli(t, ['profiles', 'show', 'voice', '--state-dir', copy], env),
    cli(t, ['set-password'], env, 'another long password\n'),
  ]);
  t.equal(stale.code, 0, stale.stderr);
  t.match(stale.stdout, `service: not running (admin.json names process ${gone.stdout}, which has ended (a service that was killed))`);
  t.equal(silent.code, 0, silent.stderr);
  t.match(silent.stdout, /service not running: read from its files; admin.json names process \d+, but nothing answers at http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
  t.match(silent.stdout, `id:         ${profiles.voice.id}\n`, 'and the profile from the files');

  t.equal(set.code, 0, set.stderr);
  t.equal(set.stdout, `service-deck: operator password saved (scrypt hash) in state directory ${b.stateDir}\n`);
});

t.test('a bad option, command or argument prints the usage on stderr and exits 2; npx service-deck runs', async (t) => {
  const stateDir = await tempDir(t);
  const cases = USAGE_CASES;
  // Every case is refused by the command's own code before it acts: in this process, each case's
  // error is a UsageError with its message. The real command turns any UsageError into the message
  // and the usage on stderr and exit 2 in one place (run in src/cli.ts): three cases, of the option
  // parser, a subcommand and no command, show that as processes (USAGE_AS_PROCESSES).
  const [help, npx, ...runs] = await usageRuns;
  for (const [args, message] of cases) {
    const what = args.join(' ') || '(nothing)';
    const error = await main([...args, '--state-dir', stateDir]).then(
      (code) => new Error(`exit ${code}`),
      (thrown: unknown) => thrown as Error,
    );
    t.type(error, UsageError, `${what}: a usage error`);
    t.match(error.message, message, `${what}: says what is wrong`);
  }
  for (const [i, ran] of runs.entries()) {
    const [args, message] = cases[USAGE_AS_PROCESSES[i]!]!;
    const what = args.join(' ') || '(nothing)';
    t.equal(ran.code, 2, `${what}: exit 2`);
    t.match(ran.stderr, `service-deck: ${message}\nusage: service-deck <command> [options]`, `${what}: says what is wrong, then the usage`);
    t.equal(ran.stdout, '');
    noStack(t, ran);
  }
  t.equal(help.code, 0);
  t.match(help.stdout, /profiles publish <id\|name>/);
  t.match(help.stdout, /profiles create --file FILE/);
  t.match(help.stdout, /enhancers install <t2i\|i2i>/);
  t.equal(npx.code, 0, `npx service-deck runs the command from the checkout: ${npx.stderr}`);
  t.match(npx.stdout, /^usage: service-deck <command> \[options\]/);
});

/**
 * `service-deck serve` until it listens, then SIGTERM: its `service-deck:` lines, the port that
 * endpoint.json held while it ran (no endpoint start was asked for) and, when `askStatus`, what
 * `status --json` said.
 */
async function serveOnce(t: Test, env: NodeJS.ProcessEnv, args: string[], askStatus = false) {
  const child = spawn(process.execPath, [BIN, 'serve', ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME, SERVICE_DECK_GPUS: 'none', ...env } });
  t.teardown(() => void child.kill('SIGKILL'));
  const closed = new Promise((resolve) => child.once('close', resolve));
  let out = '';
  await new Promise<void>((resolve, reject) => {
    // A generous limit: a start takes a second or two, but over ten on a machine whose cores are
    // all busy; this only ends a start that never comes.
    const timer = setTimeout(() => reject(new Error(`no start within 90 s:\n${out}`)), 90_000);
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (!out.includes('inference listener is stopped')) return;
      clearTimeout(timer);
      resolve();
    });
  });
  const stateDir = env.SERVICE_DECK_STATE_DIR ?? '';
  const { port } = JSON.parse(await readFile(path.join(stateDir, 'endpoint.json'), 'utf8')) as { port: number };
  const status = askStatus ? await cli(t, ['status', '--json'], { ...env, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD }) : undefined;
  child.kill('SIGTERM');
  await closed;
  const lines = out.split('\n').filter((l) => l.startsWith('service-deck:'));
  return { lines, port, status: status && (JSON.parse(status.stdout) as { endpoint: { port: number } }), stateDir };
}

/**
 * The three starts of `serve`: a first start with --api-port, a later start of the same state
 * directory with SERVICE_DECK_API_PORT, and a first start of another one with SERVICE_DECK_API_PORT
 * (beside the other two). `oneAdminJson`: what a stat of admin.json said after the first one ended.
 */
async function apiPortStarts(t: Test) {
  const [uiPort, freshUiPort, first, later] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  const envOf = async () => {
    const stateDir = await tempDir(t);
    return { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_CACHE_DIR: path.join(stateDir, 'cache') };
  };
  const env = await envOf();
  const freshRun = envOf().then((freshEnv) => serveOnce(t, { ...freshEnv, SERVICE_DECK_API_PORT: String(later) }, ['--ui-port', String(freshUiPort)]));
  // Awaited last: until then its failure must not end the file as an unhandled rejection.
  freshRun.catch(() => undefined);
  const one = await serveOnce(t, env, ['--ui-port', String(uiPort), '--api-port', String(first)], true);
  const oneAdminJson = await stat(path.join(one.stateDir, 'admin.json')).then(
    () => 'still there',
    (error: NodeJS.ErrnoException) => error.code,
  );
  const two = await serveOnce(t, { ...env, SERVICE_DECK_API_PORT: String(later) }, ['--ui-port', String(uiPort)]);
  return { one, oneAdminJson, two, fresh: await freshRun, first, later };
}

t.test('--api-port and SERVICE_DECK_API_PORT set the inference port of the first start only', async (t) => {
  const { one, oneAdminJson, two, fresh, first, later } = await portStarts;
  t.equal(one.lines[0], `service-deck: state directory ${one.stateDir}`, 'serve names its state directory first');
  t.equal(one.port, first, 'the first start saved its --api-port in endpoint.json at once');
  t.equal(one.status?.endpoint.port, first, 'status shows it');
  t.equal(oneAdminJson, 'ENOENT', 'SIGTERM removed admin.json');

  t.equal(two.port, first, 'a later start keeps the saved port');
  t.equal(
    two.lines[1],
    `service-deck: --api-port ${later} applies only at the first start: ${path.join(one.stateDir, 'endpoint.json')} keeps port ${first} (change it with POST /api/v1/endpoint/config while the listener is stopped)`,
  );

  t.equal(fresh.port, later, 'SERVICE_DECK_API_PORT at a first start');
  t.equal(fresh.lines.filter((l) => l.includes('applies only at the first start')).length, 0, 'no notice at the first start');
});
