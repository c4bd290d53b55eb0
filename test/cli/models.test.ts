// `service-deck models`: the real command (bin/service-deck.js over the built dist/) against a real
// running service whose model folders hold a tiny GGUF, a tiny whisper model and a hostile header,
// and whose hub is the local one (test/helpers/hub.ts). `list` and `hub` print what the admin API
// answers; `profile` makes a profile of a listed file and says how to publish it; `pull` starts a
// download in the service and follows it with a line per tenth (no terminal here) until the file
// is there, then prints the command that makes a profile of it, which is run as printed; a failed
// or cancelled pull exits 1; each refusal prints the service's message. The usage errors are
// checked in this process, and the progress line that a terminal rewrites in place as a pure
// function.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { writeTinyModel } from '../../src/adapters/tinyModel.js';
import { main } from '../../src/cli.js';
import { UsageError } from '../../src/cli/errors.js';
import { pullDisplay, pullLine, suggestedName, type PullView } from '../../src/cli/models.js';
import type { ProfileView } from '../../src/store/profile.schema.js';
import { build, PASSWORD, tempDir } from '../helpers/build.js';
import { cheapPasswordCheck, cli, noStack } from '../helpers/cli.js';
import { hostileGguf } from '../helpers/hostileGguf.js';
import { startHub } from '../helpers/hub.js';
import { writeTinyWhisper } from '../helpers/tinyWhisper.js';
import { until } from '../helpers/until.js';

const REPO = 'test-org/tiny';

const pull = (over: Partial<PullView>): PullView => ({
  id: 'p1',
  repo: REPO,
  revision: 'main',
  path: 'tiny.gguf',
  state: 'downloading',
  bytes_done: 0,
  bytes_total: 200 * 2 ** 20,
  error: null,
  file: null,
  rate_bytes_per_s: null,
  waiting: false,
  ...over,
});

t.test('the progress line: percent, MiB of MiB, MiB/s, the wait for a slot, the end', async (t) => {
  t.equal(pullLine(pull({ bytes_done: 50 * 2 ** 20, rate_bytes_per_s: 12.5 * 2 ** 20 })), 'test-org/tiny/tiny.gguf: 25% 50.0 MiB of 200.0 MiB, 12.5 MiB/s');
  t.equal(pullLine(pull({ bytes_done: 3 * 2 ** 20 })), 'test-org/tiny/tiny.gguf: 1% 3.0 MiB of 200.0 MiB', 'no rate yet');
  t.equal(pullLine(pull({ waiting: true, bytes_done: 2 ** 20 })), 'test-org/tiny/tiny.gguf: waiting for a download slot');
  t.equal(pullLine(pull({ state: 'done', bytes_done: 3 * 2 ** 30 })), 'test-org/tiny/tiny.gguf: done, 3.0 GiB');
  t.equal(pullLine(pull({ state: 'failed', error: 'sha256 differs' })), 'test-org/tiny/tiny.gguf: failed: sha256 differs');
  t.equal(pullLine(pull({ state: 'cancelled' })), 'test-org/tiny/tiny.gguf: cancelled');

  const written: string[] = [];
  const tty = pullDisplay({ isTTY: true, write: (text: string) => written.push(text) });
  tty.show(pull({ waiting: true }));
  tty.show(pull({ bytes_done: 100 * 2 ** 20, rate_bytes_per_s: 2 ** 20 }));
  tty.show(pull({ bytes_done: 101 * 2 ** 20, rate_bytes_per_s: 2 ** 20 }));
  tty.end();
  t.same(written, [
    '\rtest-org/tiny/tiny.gguf: waiting for a download slot\x1b[K',
    '\rtest-org/tiny/tiny.gguf: 50% 100.0 MiB of 200.0 MiB, 1.0 MiB/s\x1b[K',
    '\rtest-org/tiny/tiny.gguf: 50% 101.0 MiB of 200.0 MiB, 1.0 MiB/s\x1b[K',
    '\n',
  ], 'a terminal: every poll rewrites the one line in place, cleared to its end; the end closes it');

  const logged: string[] = [];
  const log = pullDisplay({ write: (text: string) => logged.push(text) });
  for (const mib of [0, 5, 19, 20, 21, 45, 200]) log.show(pull({ bytes_done: mib * 2 ** 20, ...(mib === 200 ? { state: 'done' as const } : {}) }));
  log.end();
  t.same(logged, [
    'test-org/tiny/tiny.gguf: 0% 0.0 MiB of 200.0 MiB\n',
    'test-org/tiny/tiny.gguf: 10% 20.0 MiB of 200.0 MiB\n',
    'test-org/tiny/tiny.gguf: 22% 45.0 MiB of 200.0 MiB\n',
    'test-org/tiny/tiny.gguf: done, 200.0 MiB\n',
  ], 'a log: a line per tenth and at the end, nothing in place');

  t.equal(suggestedName('/srv/models/org/x/Qwen2.5-1.5B-Instruct-Q4_K_M.gguf'), 'Qwen2.5-1.5B-Instruct-Q4_K_M');
  t.equal(suggestedName('/m/big-00001-of-00003.gguf'), 'big', 'a split model by its name');
  t.equal(suggestedName('/m/ggml-base.en.bin'), 'ggml-base.en');
  t.equal(suggestedName('/m/_my model (v2).gguf'), 'my-model-v2-', 'what a name may not hold becomes -');
});

t.test('usage errors', async (t) => {
  const cases: Array<[string[], string]> = [
    [['models', 'frob'], 'models: unknown subcommand "frob" (one of list, hub, pull, profile, cancel)'],
    [['models', 'list', 'x'], 'models list takes no argument (got "x")'],
    [['models', 'hub'], 'models hub needs <owner/name>'],
    [['models', 'hub', REPO, 'x'], 'models hub: unexpected argument "x"'],
    [['models', 'pull', REPO], 'models pull needs <owner/name> <path>'],
    [['models', 'profile', 'a.gguf'], 'models profile needs --name NAME (the name clients will ask for)'],
    [['models', 'profile', 'a.gguf', '--name', 'a', '--context', '8k'], 'models profile: --context must be a whole number of tokens (got "8k")'],
    [['models', 'cancel'], 'models cancel needs <pull id>'],
    [['models', 'list', '--name', 'x'], 'models list takes no --name'],
    [['models', 'pull', REPO, 'a.gguf', '--forecast', 'a.gguf'], 'models pull takes no --forecast'],
    [['models', 'profile', 'a.gguf', '--name', 'a', '--revision', 'dev'], 'models profile takes no --revision'],
    [['status', '--revision', 'dev'], '--revision belongs to the models command'],
  ];
  for (const [args, message] of cases) await t.rejects(main(args), new UsageError(message), args.join(' '));
});

t.test('list, hub, profile, pull and cancel through the running service', async (t) => {
  const dir = await tempDir(t);
  const stateDir = await tempDir(t);
  const tiny = await writeTinyModel(path.join(dir, 'tiny.gguf'));
  const whisper = await writeTinyWhisper(path.join(dir, 'ggml-tiny.bin'));
  const hostile = path.join(dir, 'hostile.gguf');
  await writeFile(hostile, hostileGguf());
  const hub = await startHub(t);
  const tinyBytes = await readFile(tiny);
  hub.put(REPO, 'main', 'tiny.gguf', tinyBytes);
  hub.put(REPO, 'main', 'README.md', Buffer.from('# tiny\n'));
  const pulled = path.join(stateDir, 'models', REPO, 'tiny.gguf');
  const b = await build(t, { stateDir, env: { SERVICE_DECK_MODEL_DIRS: `${dir}:${path.join(stateDir, 'models')}`, SERVICE_DECK_MODEL_HUB: hub.url, SERVICE_DECK_GPUS: 'none' } });
  await cheapPasswordCheck(b);
  const env = { SERVICE_DECK_STATE_DIR: b.stateDir, SERVICE_DECK_CACHE_DIR: b.config.cacheDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD };
  const target = `service-deck: state directory ${b.stateDir} (service running, process `;
  const profiles = async () => ((await (await b.admin('GET', '/api/v1/profiles')).json()) as { profiles: ProfileView[] }).profiles;

  await t.test('list: a line per file with its facts and forecast, or its error', async (t) => {
    const [listed, json] = await Promise.all([cli(t, ['models'], env), cli(t, ['models', 'list', '--json'], env)]);
    t.equal(listed.code, 0, listed.stderr);
    const lines = listed.stdout.trimEnd().split('\n');
    t.match(lines[0], target);
    t.equal(lines.length, 4, listed.stdout);
    t.match(lines.find((l) => l.startsWith(`${tiny} `)), new RegExp(`^${tiny} \\(\\d+\\.\\d MiB, gguf, llama, [\\d.]+[KM] parameters, F32, 32768 tokens\\): runs on the CPU at 8192 tokens, \\d+\\.\\d GiB of RAM$`));
    t.match(lines.find((l) => l.startsWith(`${whisper} `)), new RegExp(`^${whisper} \\(\\d+\\.\\d MiB, whisper, whisper, Q4_0\\)$`), 'a whisper model: its facts, no forecast');
    t.match(lines.find((l) => l.startsWith(`${hostile} `)), `${hostile} (0.0 MiB, gguf): error: ${hostile}: absurd tensor count`);
    t.equal(json.code, 0, json.stderr);
    t.match(JSON.parse(json.stdout), { state_dir: b.stateDir, service: { running: true }, files: [{}, {}, {}], problems: [] });
  });

  await t.test('hub: the files of a repository, a forecast from the header, and the refusals', async (t) => {
    const [files, forecast, missing, invalid] = await Promise.all([
      cli(t, ['models', 'hub', REPO], env),
      cli(t, ['models', 'hub', REPO, '--forecast', 'tiny.gguf', '--revision', 'main'], env),
      cli(t, ['models', 'hub', 'test-org/missing'], env),
      cli(t, ['models', 'hub', REPO, '--forecast', '../tiny.gguf'], env),
    ]);
    t.equal(files.code, 0, files.stderr);
    t.same(files.stdout.trimEnd().split('\n').slice(1), [`${REPO} at main: 2 files`, `  tiny.gguf (${(tinyBytes.length / 2 ** 20).toFixed(1)} MiB, gguf)`, '  README.md (0.0 MiB, unknown)']);
    t.equal(forecast.code, 0, forecast.stderr);
    const [, facts, said] = forecast.stdout.trimEnd().split('\n');
    t.match(facts, /^test-org\/tiny\/tiny\.gguf at main: llama, [\d.]+[KM] parameters, F32, 32768 tokens, with a chat template$/);
    t.match(said, /^forecast: runs on the CPU at 8192 tokens, \d+\.\d GiB of RAM$/);
    t.equal(missing.code, 1);
    t.match(missing.stderr, /^service-deck: GET \/api\/v1\/model-hub\/files\?repo=test-org%2Fmissing&revision=main: The hub did not list test-org\/missing at main: .*404.* \(HTTP 502 hub_refused\)\n$/);
    t.equal(invalid.code, 1);
    t.match(invalid.stderr, /\(HTTP 400 invalid_value, field path\)\n$/);
    noStack(t, invalid);
  });

  await t.test('profile: a chat profile and an stt profile, a relative path, the refusals', async (t) => {
    const [chat, ears, relative] = await Promise.all([
      cli(t, ['models', 'profile', tiny, '--name', 'tiny-chat'], env),
      cli(t, ['models', 'profile', whisper, '--name', 'ears', '--json'], env),
      cli(t, ['models', 'profile', 'tiny.gguf', '--name', 'tiny-short', '--context', '4096'], env, undefined, dir),
    ]);
    t.equal(chat.code, 0, chat.stderr);
    const made = (await profiles()).find((p) => p.name === 'tiny-chat');
    t.same(chat.stdout.trimEnd().split('\n').slice(1), [`created profile ${made?.id}: tiny-chat (chat, context 32768 tokens), not published`, 'publish it: service-deck profiles publish tiny-chat']);
    t.match(made, { category: 'chat', published: false, params: { model: tiny, context: 32768 } });
    t.equal(ears.code, 0, ears.stderr);
    t.match(JSON.parse(ears.stdout), { profile: { name: 'ears', category: 'stt', published: false, params: { backend: 'whisper.cpp', model: whisper } } });
    t.equal(relative.code, 0, relative.stderr);
    t.match((await profiles()).find((p) => p.name === 'tiny-short'), { params: { model: tiny, context: 4096 } }, 'a path relative to the working folder, made absolute');

    const [taken, outside, unreadable] = await Promise.all([
      cli(t, ['models', 'profile', tiny, '--name', 'tiny-chat'], env),
      cli(t, ['models', 'profile', '/etc/passwd', '--name', 'x'], env),
      cli(t, ['models', 'profile', hostile, '--name', 'x'], env),
    ]);
    t.equal(taken.code, 1);
    t.match(taken.stderr, /^service-deck: POST \/api\/v1\/model-files\/profile: the API profile name "tiny-chat" is already used by profile .+ \(HTTP 409 name_taken\)\n$/);
    t.equal(outside.code, 1);
    t.match(outside.stderr, /^service-deck: POST \/api\/v1\/model-files\/profile: \/etc\/passwd is not a model file in the model folders .+ \(HTTP 400 invalid_value, field path\)\n$/);
    t.equal(unreadable.code, 1);
    t.match(unreadable.stderr, /hostile\.gguf cannot be read as a chat model: absurd tensor count .+ \(HTTP 422 model_unreadable, field path\)\n$/);
    t.same((await profiles()).map((p) => p.name).sort(), ['ears', 'tiny-chat', 'tiny-short'], 'the refusals made none');
  });

  await t.test('pull: followed to the file, then the printed command makes its profile', async (t) => {
    // About 2 s for the file: the command sees it part-way.
    hub.options.chunkBytes = Math.ceil(tinyBytes.length / 40);
    hub.options.chunkDelayMs = 50;
    t.teardown(() => Object.assign(hub.options, { chunkBytes: 64 * 1024, chunkDelayMs: 0 }));
    const ran = await cli(t, ['models', 'pull', REPO, 'tiny.gguf'], env);
    t.equal(ran.code, 0, ran.stderr);
    const lines = ran.stdout.trimEnd().split('\n');
    t.match(lines[0], target);
    t.ok(lines.some((l) => /^test-org\/tiny\/tiny\.gguf: [1-9]\d?% \d+\.\d MiB of \d+\.\d MiB(, \d+\.\d MiB\/s)?$/.test(l)), `progress part-way:\n${ran.stdout}`);
    t.match(lines.at(-3), /^test-org\/tiny\/tiny\.gguf: done, \d+\.\d MiB$/);
    t.equal(lines.at(-2), `the file: ${pulled}`);
    t.equal(lines.at(-1), `next: service-deck models profile ${pulled} --name tiny`);
    t.same(await readFile(pulled), tinyBytes, 'the file is there, whole');

    const next = await cli(t, (lines.at(-1) ?? '').replace('next: service-deck ', '').split(' '), env);
    t.equal(next.code, 0, next.stderr);
    t.match((await profiles()).find((p) => p.name === 'tiny'), { category: 'chat', published: false, params: { model: pulled } }, 'the next command, as printed, made the profile');
  });

  await t.test('pull: refusals, a failed pull, a pull running twice, a cancel', async (t) => {
    const [invalid, unknown, badCancel] = await Promise.all([
      cli(t, ['models', 'pull', REPO, '../tiny.gguf'], env),
      cli(t, ['models', 'pull', REPO, 'missing.gguf'], env),
      cli(t, ['models', 'cancel', 'no-such-pull'], env),
    ]);
    t.equal(invalid.code, 1);
    t.match(invalid.stderr, /^service-deck: POST \/api\/v1\/model-pulls: .+ \(HTTP 400 invalid_value, field path\)\n$/);
    t.equal(unknown.code, 1);
    t.match(unknown.stderr, /^service-deck: POST \/api\/v1\/model-pulls: .+ \(HTTP 502 hub_refused\)\n$/);
    t.equal(badCancel.code, 1);
    t.match(badCancel.stderr, /^service-deck: POST \/api\/v1\/model-pulls\/no-such-pull\/cancel: .+ \(HTTP 404 pull_not_found\)\n$/);

    // A file the disk cannot hold: refused before a byte is written.
    hub.put(REPO, 'main', 'huge.gguf', tinyBytes);
    hub.options.linkedSize = 2 ** 50;
    const huge = await cli(t, ['models', 'pull', REPO, 'huge.gguf'], env);
    hub.options.linkedSize = null;
    t.equal(huge.code, 1);
    t.match(huge.stderr, /^service-deck: POST \/api\/v1\/model-pulls: .+ \(HTTP 507 insufficient_storage\)\n$/);

    hub.put(REPO, 'main', 'corrupt.gguf', tinyBytes);
    hub.options.etag = `"${'0'.repeat(64)}"`;
    const failed = await cli(t, ['models', 'pull', REPO, 'corrupt.gguf'], env);
    hub.options.etag = null;
    t.equal(failed.code, 1, 'a failed pull: exit 1');
    t.match(failed.stderr, /^service-deck: the pull of test-org\/tiny\/corrupt\.gguf ended failed: .+\n$/);

    // Held after its first chunk until the cancel: a second pull of the file is refused while it runs.
    hub.put(REPO, 'main', 'held.gguf', tinyBytes);
    hub.options.chunkBytes = 16 * 1024;
    let release = () => {};
    hub.options.gate = new Promise<void>((resolve) => (release = resolve));
    t.teardown(() => {
      release();
      Object.assign(hub.options, { gate: null, chunkBytes: 64 * 1024 });
    });
    const following = cli(t, ['models', 'pull', REPO, 'held.gguf'], env);
    const id = await until('the pull to run', async () => {
      const { pulls } = (await (await b.admin('GET', '/api/v1/model-pulls')).json()) as { pulls: PullView[] };
      return pulls.find((p) => p.path === 'held.gguf' && p.state === 'downloading')?.id;
    });
    const twice = await cli(t, ['models', 'pull', REPO, 'held.gguf'], env);
    t.equal(twice.code, 1);
    t.match(twice.stderr, /^service-deck: POST \/api\/v1\/model-pulls: .+ \(HTTP 409 pull_running\)\n$/);
    const cancel = await cli(t, ['models', 'cancel', id], env);
    release();
    t.equal(cancel.code, 0, cancel.stderr);
    t.equal(cancel.stdout.trimEnd().split('\n')[1], 'test-org/tiny/held.gguf: cancelled');
    const ended = await following;
    t.equal(ended.code, 1, 'the follower of a cancelled pull: exit 1');
    t.equal(ended.stderr, 'service-deck: the pull of test-org/tiny/held.gguf ended cancelled\n');
  });
});

t.test('models needs the running service; the usage names the subcommands', async (t) => {
  const stateDir = await tempDir(t);
  const [ran, help] = await Promise.all([cli(t, ['models', 'list'], { SERVICE_DECK_STATE_DIR: stateDir }), cli(t, ['--help'], {})]);
  t.equal(help.code, 0);
  for (const usage of ['models [list]', 'models hub <owner/name> [--revision R] [--forecast PATH]', 'models pull <owner/name> <path> [--revision R]', 'models profile <file> --name N [--context C]', 'models cancel <pull id>']) {
    t.match(help.stdout, `\n  ${usage}`, usage);
  }
  t.equal(ran.code, 1);
  t.equal(ran.stderr, `service-deck: models list needs the running service, and the service of ${stateDir} is not running: start it (service-deck serve), then run this again\n`);
});
