// A service killed with SIGKILL cannot end its chat worker: the next start finds the worker by its
// pid file, ends it, and removes its key and pid files. A pid that is not ours is never signalled.
import { spawn } from 'node:child_process';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { spawnCli } from '../helpers/spawn.js';
import { alive, until } from '../helpers/until.js';

const PASSWORD = 'e2e-password-2';
const TOKEN = 'sd-e2e-token-2';

t.test('the next start ends the chat worker a killed service left behind', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const model = await tinyModelIn(stateDir);
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: apiPort, published: [] }), { mode: 0o600 });
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN, SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none' };

  // A process that is not ours, named in a stray pid file: it must survive.
  const runtime = path.join(stateDir, 'runtime');
  await mkdir(runtime, { recursive: true, mode: 0o700 });
  const bystander = spawn('sleep', ['600'], { stdio: 'ignore' });
  t.teardown(() => bystander.kill('SIGKILL'));
  await writeFile(path.join(runtime, 'chat-7-1.pid'), `${bystander.pid}\n`);

  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await first.waitFor(/inference API on/);
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  const login = await fetch(`${adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const { csrfToken } = (await login.json()) as { csrfToken: string };
  const admin = (method: string, route: string, body?: unknown) =>
    fetch(`${adminUrl}${route}`, { method, headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken, 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
  const id = ((await (await admin('POST', '/api/v1/profiles', { name: 'tiny', category: 'chat', params: { model } })).json()) as { id: string }).id;
  await admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  const client = new OpenAI({ apiKey: TOKEN, baseURL: `http://127.0.0.1:${apiPort}/v1`, maxRetries: 0 });
  await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  const status = (await (await admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number }> };
  const worker = status.workers.find((w) => w.kind === 'chat')?.pid;
  t.ok(worker && alive(worker), 'the chat worker runs');
  t.ok((await readdir(runtime)).some((n) => n.endsWith('.pid')), 'its pid file is in runtime/');

  first.child.kill('SIGKILL');
  await first.exited;
  t.ok(alive(worker!), 'a service killed with SIGKILL leaves its worker behind');

  const second = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await second.waitFor(/inference API on/);
  await until('the left-over worker to end', async () => (alive(worker!) ? undefined : true), 10_000);
  t.notOk(alive(worker!), 'the next start ended it');
  t.ok(alive(bystander.pid!), 'a pid that is not ours was left alone');
  t.same((await readdir(runtime)).filter((n) => n.startsWith('chat-')), [], 'no key or pid file is left');
  t.match(second.output(), /ended chat workers left behind/);
  second.child.kill('SIGTERM');
  await second.exited;
});
