// Every code block of README.md, examples/README.md and docs/ that is a command or a program is
// accounted for: it shows an example script (the paragraph before it links the script, and
// examples.test.ts runs the script and checks the block stands in it word for word), or this test
// runs it as written against a private demo (the marker `<!-- snippet: run NAME -->` right above
// it), or the line right above it says why it is not run against the demo, in an HTML comment
// that the rendered page does not show (`<!-- not run: what it needs. -->`): the marker is for this
// test, not for readers. Data (JSON bodies, output samples, diagrams) is a block whose fence says
// so. The blocks run here are the ones that change the service's state (the token, the password,
// the endpoint, profiles, the audio policy) and the image script, so they get a demo of their own:
// its own state directory and ports, and the image tests' stand-in for sd-cli with a model file in
// place, so that its `painter` can run.
import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t, { type Test } from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { docBlocks, docFiles, examplesDir, root, type DocBlock } from '../helpers/docBlocks.js';
import { llamaServerPath } from '../helpers/llama.js';
import { spawnCli } from '../helpers/spawn.js';

// The demo's start and a dozen short scripts: about 15 s on 2 idle cores, several times that
// while other work keeps the cores busy.
t.setTimeout(300_000);

/** Fence languages of commands and programs, and of data. Any other (none included) is refused. */
const COMMANDS = new Set(['sh', 'bash', 'console', 'js', 'mjs', 'ts', 'python', 'http']);
const DATA = new Set(['json', 'ini', 'nginx', 'yaml', 'text']);
const RUN = /^<!-- snippet: run ([\w-]+) -->$/;
/** A reason of at least 12 characters; `--` would end an HTML comment early in some renderers. */
const NOT_RUN = /^<!-- not run: ((?:(?!--).){12,}) -->$/;
/** The marker as readers saw it before: it must not come back. */
const VISIBLE_NOT_RUN = /not run against the demo/i;

/** stable-diffusion.cpp's sd-cli cannot be built here: the stand-in the image tests use. */
const SD_CLI = path.join(root, 'test', 'fixtures', 'sd-cli');
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** The private demo's operator password at its start: the password change's block expects it. */
const FIRST_PASSWORD = 'old secret';

interface Context {
  token: string;
  password: string;
  api: string;
  admin: string;
}

/**
 * The blocks run here, in this order (later ones rely on what earlier ones left), with what each
 * must print and what the test checks after it. A block that calls `adm` runs after the login
 * block of docs/api.md, which defines `json` and `adm`.
 */
const RUNS: Array<{
  name: string;
  expect: RegExp[];
  /** The files it leaves where it runs (PNG images). */
  writes?: string[];
  before?: (ctx: Context) => Promise<unknown>;
  after?: (t: Test, out: string, ctx: Context) => Promise<unknown>;
}> = [
  {
    name: 'rotate-token-api',
    expect: [/^\{"token":"sd-[\w-]{20,}"\}$/m],
    after: async (t, out, ctx) => {
      const token = out.match(/"token":"(sd-[\w-]+)"/)![1]!;
      t.equal(await healthStatus(ctx.api, ctx.token), 401, 'the old token stops working');
      t.equal(await healthStatus(ctx.api, token), 200, 'the new token works');
      ctx.token = token;
    },
  },
  // /readyz's answer ends without a line break, so grep's first line follows it on the same line.
  { name: 'metrics', expect: [/^\{"status":"ok"\}/, /(^|\})service_deck_http_requests_total\{listener="inference",route="\/health"/m] },
  {
    name: 'profiles',
    expect: [/"revision":2,.*"name":"qwen-small","category":"chat","params":\{"model":"\/models\/qwen-small\.gguf","context":4096,"slots":2/],
    after: async (t, _out, ctx) => {
      const { profiles } = (await admin(ctx, 'GET', '/api/v1/profiles')) as { profiles: Array<{ name: string }> };
      t.notOk(profiles.some((p) => p.name === 'qwen-small'), 'the profile is deleted');
    },
  },
  { name: 'models-chat', expect: [/"name":"qwen-small","category":"chat".*"temperature":0\.7.*"blockers":\["model file missing: \/srv\/models\/qwen2\.5-1\.5b-instruct-q4_k_m\.gguf"\]/] },
  { name: 'models-image', expect: [/"name":"z-image","category":"image".*"steps":8.*"blockers":\[.*"model file missing: \/srv\/models\/z_image_turbo-Q4_K\.gguf"/] },
  { name: 'models-whisper', expect: [/"name":"whisper","category":"stt".*"defaultLanguage":"auto".*"blockers":\[.*"model file missing: \/srv\/models\/ggml-base\.bin"/] },
  { name: 'kokoro-models', expect: [/"name":"kokoro","category":"tts".*"blockers":\[.*"runtime missing: \/opt\/kokoro\/serve-for-deck\.sh/] },
  {
    name: 'kokoro-api',
    expect: [/"name":"kokoro","category":"tts".*"blockers":\[.*"runtime missing: \/opt\/kokoro\/serve-for-deck\.sh/],
    // The same profile as models.md's: that one goes first.
    before: async (ctx) => {
      const { profiles } = (await admin(ctx, 'GET', '/api/v1/profiles')) as { profiles: Array<{ id: string; name: string }> };
      return admin(ctx, 'DELETE', `/api/v1/profiles/${profiles.find((p) => p.name === 'kokoro')!.id}`);
    },
  },
  { name: 'publish', expect: [/^\{"published":\["demo-chat","demo-tts","demo-stt","demo-image","p-[0-9a-f]{12}"\],"profile":\{.*"name":"qwen-small".*"published":true/] },
  { name: 'audio-policy', expect: [/"kind":"stt","mode":"warm","profile_id":"demo-stt"/, /"states":\{"tts":"auto","stt":"warm\.(preloading|held)"\}/] },
  {
    name: 'images',
    expect: [/^1024x1024$/m],
    writes: ['lighthouse-winter.png', 'lighthouse.png'],
    // The edit needs a profile that takes a reference image; the demo's painter takes none.
    before: async (ctx) => {
      const painter = (await admin(ctx, 'GET', '/api/v1/profiles/demo-image')) as { params: Record<string, unknown> };
      return admin(ctx, 'PUT', '/api/v1/profiles/demo-image', { ...painter, params: { ...painter.params, referenceImages: 1 } });
    },
  },
  // Before rotate-token-cli, whose new token stays in its script: this one calls the API with the token.
  {
    name: 'extensions',
    expect: [/^\{"extensions":\{"responses":true\}\}/, /"object":"response",.*"model":"tiny-chat"/],
    before: async (ctx) => {
      const off = await fetch(`${ctx.api}/v1/responses`, { method: 'POST', headers: { authorization: `Bearer ${ctx.token}`, 'content-type': 'application/json' }, body: '{}' });
      if (off.status !== 404) throw new Error(`the demo serves /v1/responses before the block turned it on: ${off.status}`);
    },
    after: async (t, _out, ctx) => t.same(((await admin(ctx, 'GET', '/api/v1/endpoint')) as { extensions: unknown }).extensions, { responses: true }, 'the status shows the switch on'),
  },
  {
    name: 'rotate-token-cli',
    expect: [/^\{"status":"ok","endpoint":"running"\}$/m],
    // The token it makes stays in the script: nothing after it needs the token.
    after: async (t, _out, ctx) => {
      t.equal(await healthStatus(ctx.api, ctx.token), 401, 'the token before the command stops working');
    },
  },
  {
    name: 'password',
    expect: [/^\{"csrfToken":"[^"]+"\}$/m],
    after: async (t, _out, ctx) => {
      t.equal(await loginStatus(ctx.admin, FIRST_PASSWORD), 401, 'the old password is refused');
      t.equal(await loginStatus(ctx.admin, 'a much better passphrase'), 200, 'the new password logs in');
      ctx.password = 'a much better passphrase';
    },
  },
  // curl prints the two answers one after the other, without a line break.
  { name: 'endpoint-start-stop', expect: [/^\{"status":"running",.*\}\{"status":"stopped",/] },
  {
    name: 'endpoint-port',
    expect: [/^\{"status":"stopped",.*"port":8121/m],
    after: async (t, _out, ctx) => t.equal(await healthStatus(ctx.api, ctx.token).catch(() => 'refused'), 'refused', 'the stopped endpoint listens nowhere'),
  },
];

async function healthStatus(api: string, token: string): Promise<number> {
  return (await fetch(`${api}/health`, { headers: { authorization: `Bearer ${token}` } })).status;
}

async function loginStatus(admin: string, password: string): Promise<number> {
  const response = await fetch(`${admin}/api/v1/session`, {
    method: 'POST',
    headers: { 'X-Service-Deck': '1', 'Content-Type': 'application/json' },
    body: JSON.stringify({ password }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** One admin API call in a session of its own. */
async function admin(ctx: Context, method: string, route: string, body?: unknown): Promise<unknown> {
  const login = await fetch(`${ctx.admin}/api/v1/session`, {
    method: 'POST',
    headers: { 'X-Service-Deck': '1', 'Content-Type': 'application/json' },
    body: JSON.stringify({ password: ctx.password }),
  });
  const { csrfToken } = (await login.json()) as { csrfToken: string };
  const headers = { 'X-Service-Deck': '1', 'X-CSRF-Token': csrfToken, cookie: login.headers.getSetCookie()[0]!.split(';')[0]!, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
  const response = await fetch(`${ctx.admin}${route}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!response.ok) throw new Error(`${method} ${route}: ${response.status} ${await response.text()}`);
  return response.status === 204 ? null : response.json();
}

/** How the block is accounted for, or why it is not. */
function verdict(block: DocBlock, scripts: string[]): { kind: 'data' | 'script' | 'run' | 'not run'; detail: string } | { error: string } {
  if (DATA.has(block.lang)) return { kind: 'data', detail: block.lang };
  if (!COMMANDS.has(block.lang)) return { error: `names ${block.lang ? `the language "${block.lang}", which is neither a command nor data` : 'no language'}` };
  if (block.script) return scripts.includes(block.script) ? { kind: 'script', detail: block.script } : { error: `links examples/${block.script}, which is not there` };
  const run = block.above.match(RUN);
  if (run) return { kind: 'run', detail: run[1]! };
  const notRun = block.above.match(NOT_RUN);
  if (notRun) return { kind: 'not run', detail: notRun[1]! };
  if (VISIBLE_NOT_RUN.test(block.above)) return { error: 'says in visible text why it is not run: write the reason as `<!-- not run: … -->`, which readers do not see' };
  return { error: 'is a command, but shows no example script, has no run marker and does not say why it is not run against the demo' };
}

t.test('every command block in the docs is run or says why not', async (t) => {
  const scripts = await readdir(examplesDir);
  const counts = new Map<string, number>();
  const claimed = new Map<string, string>();
  for (const block of await docBlocks()) {
    const where = `${block.doc}:${block.line}`;
    const found = verdict(block, scripts);
    if ('error' in found) {
      t.fail(`${where} ${found.error}`, { block: block.text });
      continue;
    }
    counts.set(found.kind, (counts.get(found.kind) ?? 0) + 1);
    if (found.kind === 'run') {
      t.ok(RUNS.some((r) => r.name === found.detail), `${where} is run here as ${found.detail}`);
      t.notOk(claimed.has(found.detail), `${where}: no other block is run as ${found.detail}`);
      claimed.set(found.detail, where);
    }
  }
  for (const { name } of RUNS) t.ok(claimed.has(name), `the run ${name} has its block in the docs`);
  for (const doc of await docFiles()) {
    const visible = (await readFile(path.join(root, doc), 'utf8')).split('\n').findIndex((line) => /^\*Not run against the demo/i.test(line));
    t.equal(visible, -1, `${doc} shows readers no "Not run against the demo" note${visible < 0 ? '' : ` (line ${visible + 1})`}`);
  }
  t.comment([...counts].map(([kind, n]) => `${kind}: ${n}`).join(', '));
  t.ok((counts.get('script') ?? 0) >= 20 && (counts.get('run') ?? 0) === RUNS.length, 'the docs show the examples and the blocks run here');
});

t.test('a command block that is not accounted for, and a block without a language, are refused', async (t) => {
  const scripts = await readdir(examplesDir);
  const block = (over: Partial<DocBlock>): DocBlock => ({ doc: 'docs/x.md', line: 1, lang: 'sh', text: 'echo hi', above: 'Some prose:', script: undefined, ...over });
  t.match(verdict(block({}), scripts), { error: /does not say why it is not run/ });
  t.match(verdict(block({ lang: '' }), scripts), { error: /no language/ });
  t.match(verdict(block({ lang: 'perl' }), scripts), { error: /neither a command nor data/ });
  t.match(verdict(block({ script: 'gone.mjs' }), scripts), { error: /not there/ });
  t.match(verdict(block({ above: '<!-- not run: -->' }), scripts), { error: /does not say why/ }, 'a marker needs its reason');
  t.match(verdict(block({ above: '<!-- not run: a -- b needs a GPU -->' }), scripts), { error: /does not say why/ }, 'a reason with -- would end the comment early');
  t.same(verdict(block({ above: '<!-- not run: needs a GPU and its model. -->' }), scripts), { kind: 'not run', detail: 'needs a GPU and its model.' });
  t.match(
    verdict(block({ above: '*Not run against the demo: needs a GPU and its model.*' }), scripts),
    { error: /visible text/ },
    'the old visible marker is refused: readers would see it',
  );
  t.same(verdict(block({ above: '<!-- snippet: run images -->' }), scripts), { kind: 'run', detail: 'images' });
  t.same(verdict(block({ lang: 'json' }), scripts), { kind: 'data', detail: 'json' });
});

t.test('the blocks that change the state run as written against a private demo', async (t) => {
  const blocks = new Map<string, DocBlock>();
  for (const block of await docBlocks()) {
    const name = block.above.match(RUN)?.[1];
    if (name) blocks.set(name, block);
  }
  // docs/api.md's login: the helpers `json` and `adm` every admin block uses.
  const login = (await docBlocks()).find((b) => b.doc === 'docs/api.md' && b.text.includes('adm() {'));
  t.ok(login, 'docs/api.md shows the login with adm');

  const dir = await tempDir(t, 'sd-snippets-');
  const stateDir = path.join(dir, 'state');
  const home = path.join(dir, 'home');
  const bin = path.join(dir, 'bin');
  await mkdir(stateDir, { mode: 0o700 });
  await mkdir(path.join(home, '.config'), { recursive: true });
  await mkdir(bin);
  // A script here finds the `openai` package as one in the checkout does.
  await symlink(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
  // The demo's painter with a stand-in for sd-cli: its model file is there.
  await mkdir(path.join(stateDir, 'models'), { mode: 0o700 });
  await writeFile(path.join(stateDir, 'models', 'sd-model.gguf'), 'stand-in weights\n');
  // `service-deck` on the PATH, as an installed package puts it there.
  await writeFile(path.join(bin, 'service-deck'), `#!/bin/sh\nexec "${process.execPath}" "${path.join(root, 'bin', 'service-deck.js')}" "$@"\n`, { mode: 0o755 });
  const uiPort = await freePort();
  const apiPort = await freePort();
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: false, port: apiPort, published: [] }), { mode: 0o600 });
  const env = { SERVICE_DECK_STATE_DIR: stateDir };
  const setPassword = spawnCli(t, ['set-password'], env, `${FIRST_PASSWORD}\n`);
  t.same(await setPassword.exited, { code: 0, signal: null }, 'the password is set before the demo starts');

  const started = performance.now();
  const demo = spawnCli(t, ['demo', '--ui-port', String(uiPort)], { ...env, SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_SD_CLI: SD_CLI, SERVICE_DECK_GPUS: 'none' });
  await demo.waitFor(/Ctrl-C stops the service/, 60_000);
  const token = demo.output().match(/new API token \(shown once, only its hash is stored\): (\S+)/)?.[1];
  t.ok(token, 'the demo printed the API token');
  t.comment(`the private demo started in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const ctx: Context = { token: token!, password: FIRST_PASSWORD, api: `http://127.0.0.1:${apiPort}`, admin: `http://127.0.0.1:${uiPort}` };

  for (const run of RUNS) {
    const block = blocks.get(run.name);
    if (!block) {
      t.fail(`no block is marked to run as ${run.name}`);
      continue;
    }
    const shell = block.lang === 'sh';
    const script = shell && block.text.includes('adm ') ? `${login!.text}\n${block.text}\n` : `${block.text}\n`;
    const cwd = path.join(dir, `run-${run.name}`);
    await mkdir(cwd);
    const file = path.join(dir, `${run.name}.${shell ? 'sh' : 'mjs'}`);
    await writeFile(file, script);
    await run.before?.(ctx);
    const began = performance.now();
    const ran = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(
        shell ? 'sh' : process.execPath,
        [file],
        {
          cwd,
          timeout: 30_000,
          env: {
            PATH: `${bin}:${process.env.PATH}`,
            HOME: home,
            TMPDIR: dir,
            ADMIN: ctx.admin,
            API: ctx.api,
            TOKEN: ctx.token,
            OPERATOR_PASSWORD: ctx.password,
            SERVICE_DECK_STATE_DIR: stateDir,
          },
        },
        (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      );
    });
    t.comment(`${run.name} (${block.doc}:${block.line}): ${((performance.now() - began) / 1000).toFixed(1)} s`);
    const where = `${run.name} (${block.doc}:${block.line})`;
    t.equal(ran.code, 0, `${where} exits 0`, { stdout: ran.stdout, stderr: ran.stderr });
    for (const pattern of run.expect) t.match(ran.stdout, pattern, `${where} prints ${pattern}`, { stderr: ran.stderr });
    t.same((await readdir(cwd)).sort(), run.writes ?? [], `${where} writes ${run.writes?.join(', ') ?? 'nothing'} where it runs`);
    for (const name of run.writes ?? []) t.same([...(await readFile(path.join(cwd, name))).subarray(0, 8)], [...PNG], `${where}: ${name} is a PNG`);
    await run.after?.(t, ran.stdout, ctx);
  }

  demo.child.kill('SIGTERM');
  t.same(await demo.exited, { code: 0, signal: null }, 'the private demo ends cleanly');
});
