// A service killed with SIGKILL cannot end its workers itself: the kernel ends them with it
// (setpriv --pdeathsig, src/adapters/parentDeath.ts). Where that is missing (SERVICE_DECK_SETPRIV=off
// here), the next start finds the chat worker, the STT engine and the speech server by their pid
// files and the tag in their environment, ends them, and removes the pid and key files. A pid that
// is not ours is never signalled.
import { spawn } from 'node:child_process';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { freePort, tempDir } from '../helpers/build.js';
import { llamaServerPath, tinyModelIn } from '../helpers/llama.js';
import { spawnCli } from '../helpers/spawn.js';
import { alive, ended, until } from '../helpers/until.js';

const PASSWORD = 'e2e-password-2';
const TOKEN = 'sd-e2e-token-2-0123456789abcdefghijklmnop';

/** A logged-in admin session on the service's admin port: `admin(method, route, body)`. */
async function adminSession(uiPort: number) {
  const adminUrl = `http://127.0.0.1:${uiPort}`;
  const login = await fetch(`${adminUrl}/api/v1/session`, { method: 'POST', headers: { 'x-service-deck': '1', 'content-type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
  const { csrfToken } = (await login.json()) as { csrfToken: string };
  return (method: string, route: string, body?: unknown) =>
    fetch(`${adminUrl}${route}`, { method, headers: { 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken, 'content-type': 'application/json' }, ...(body ? { body: JSON.stringify(body) } : {}) });
}

t.test('workers die with a service killed with SIGKILL: the chat worker, sd-cli, and a speech server behind its wrapper are gone within 2 s', async (t) => {
  const { fileURLToPath } = await import('node:url');
  const { readFile } = await import('node:fs/promises');
  const speechServer = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));
  const record = path.join(await tempDir(t), 'requests.jsonl');
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const model = await tinyModelIn(stateDir);
  const painting = path.join(stateDir, 'stuck.gguf');
  // The stand-in sd-cli (a shell script that execs node) hangs after two steps with this model.
  await writeFile(painting, 'hang');
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: apiPort, published: [] }), { mode: 0o600 });
  const env = {
    SERVICE_DECK_STATE_DIR: stateDir,
    SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
    SERVICE_DECK_API_TOKEN: TOKEN,
    SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(),
    SERVICE_DECK_SD_CLI: fileURLToPath(new URL('../fixtures/sd-cli', import.meta.url)),
    SERVICE_DECK_GPUS: 'none',
  };
  /** `start` loads the worker; it may return the pid of a process the worker started itself, to be gone too. */
  const killedWith = async (kind: 'chat' | 'image' | 'tts', start: (admin: Awaited<ReturnType<typeof adminSession>>) => Promise<(() => Promise<number>) | void>) => {
    const service = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
    await service.waitFor(/inference API on/);
    t.notMatch(service.output(), /workers are started without setpriv/, 'setpriv was found');
    const admin = await adminSession(uiPort);
    const behind = await start(admin);
    const worker = await until(`the ${kind} worker`, async () => {
      const status = (await (await admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number | null }> };
      return status.workers.find((w) => w.kind === kind && w.pid !== null)?.pid ?? undefined;
    });
    t.ok(alive(worker), `the ${kind} worker ${worker} runs`);
    const grandchild = behind ? await behind() : undefined;
    if (grandchild !== undefined) {
      t.not(grandchild, worker);
      t.ok(alive(grandchild), `the process ${grandchild} the ${kind} worker started runs`);
      t.teardown(() => {
        if (alive(grandchild)) process.kill(grandchild, 'SIGKILL');
      });
    }
    service.child.kill('SIGKILL');
    await service.exited;
    const pids = grandchild === undefined ? [worker] : [worker, grandchild];
    await until(`the ${kind} worker to die with the service`, async () => (pids.every(ended) ? true : undefined), 2_000).catch(() => undefined);
    t.ok(ended(worker), `the ${kind} worker is gone within 2 s of the service's SIGKILL`);
    if (grandchild !== undefined) t.ok(ended(grandchild), `the process the ${kind} worker started is gone within 2 s too`);
  };
  const publish = async (admin: Awaited<ReturnType<typeof adminSession>>, profile: object) => {
    const id = ((await (await admin('POST', '/api/v1/profiles', profile)).json()) as { id: string }).id;
    await admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  };

  await killedWith('chat', async (admin) => {
    await publish(admin, { name: 'tiny', category: 'chat', params: { model } });
    const client = new OpenAI({ apiKey: TOKEN, baseURL: `http://127.0.0.1:${apiPort}/v1`, maxRetries: 0 });
    await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  });
  await killedWith('image', async (admin) => {
    await publish(admin, { name: 'stuck', category: 'image', params: { model: painting, width: 64, height: 64, steps: 4 } });
    // Never answered: the service is killed while sd-cli hangs.
    void fetch(`http://127.0.0.1:${apiPort}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'stuck', prompt: 'a lighthouse' }),
    }).catch(() => undefined);
  });
  // A speech server command that is a wrapper: the parent-death signal reaches the wrapper (sh), not
  // the server it started; the worker's process group and the watchdog reach both.
  await killedWith('tts', async (admin) => {
    await publish(admin, { name: 'voice', category: 'tts', params: { backend: 'openai-server', command: ['sh', '-c', `"${process.execPath}" "${speechServer}" --port "$1" --record "${record}" & wait`, 'sh', '{port}'] } });
    const spoken = await fetch(`http://127.0.0.1:${apiPort}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'voice', input: 'hello', language: 'English' }),
    });
    t.equal(spoken.status, 200, 'the speech server behind the wrapper answered');
    return async () => (JSON.parse((await readFile(record, 'utf8')).split('\n')[0]!) as { pid: number }).pid;
  });
});

t.test('the next start ends the chat worker a killed service left behind', async (t) => {
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  const model = await tinyModelIn(stateDir);
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: apiPort, published: [] }), { mode: 0o600 });
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN, SERVICE_DECK_LLAMA_SERVER: await llamaServerPath(), SERVICE_DECK_GPUS: 'none', SERVICE_DECK_SETPRIV: 'off' };

  // A process that is not ours, named in a stray pid file: it must survive.
  const runtime = path.join(stateDir, 'runtime');
  await mkdir(runtime, { recursive: true, mode: 0o700 });
  const bystander = spawn('sleep', ['600'], { stdio: 'ignore' });
  t.teardown(() => bystander.kill('SIGKILL'));
  await writeFile(path.join(runtime, 'chat-7-1.pid'), `${bystander.pid}\n`);

  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await first.waitFor(/inference API on/);
  const admin = await adminSession(uiPort);
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
  await until('the left-over worker to end', async () => (alive(worker!) ? undefined : true));
  t.notOk(alive(worker!), 'the next start ended it');
  t.ok(alive(bystander.pid!), 'a pid that is not ours was left alone');
  t.same((await readdir(runtime)).filter((n) => n.startsWith('chat-')), [], 'no key or pid file is left');
  t.match(second.output(), /"count":1,"msg":"ended worker processes left behind by an earlier run of the service"/);
  second.child.kill('SIGTERM');
  await second.exited;
});

t.test('the next start ends the STT engine and a speech server (with its process group) a killed service left behind', async (t) => {
  const { pocketsphinxPath, speech } = await import('../helpers/speech.js');
  const { encodeWav } = await import('../../src/adapters/wav.js');
  const { readFile } = await import('node:fs/promises');
  const { fileURLToPath } = await import('node:url');
  const server = fileURLToPath(new URL('../fixtures/fake-speech-server.mjs', import.meta.url));
  const stateDir = await tempDir(t);
  const uiPort = await freePort();
  const apiPort = await freePort();
  await writeFile(path.join(stateDir, 'endpoint.json'), JSON.stringify({ running: true, port: apiPort, published: [] }), { mode: 0o600 });
  const env = { SERVICE_DECK_STATE_DIR: stateDir, SERVICE_DECK_ADMIN_PASSWORD: PASSWORD, SERVICE_DECK_API_TOKEN: TOKEN, SERVICE_DECK_POCKETSPHINX: await pocketsphinxPath(), SERVICE_DECK_GPUS: 'none', SERVICE_DECK_SETPRIV: 'off' };
  const runtime = path.join(stateDir, 'runtime');
  await mkdir(runtime, { recursive: true, mode: 0o700 });
  const bystander = spawn('sleep', ['600'], { stdio: 'ignore' });
  t.teardown(() => bystander.kill('SIGKILL'));
  await writeFile(path.join(runtime, 'stt-7-1.pid'), `${bystander.pid}\n`);
  const record = path.join(stateDir, 'requests.jsonl');

  const first = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await first.waitFor(/inference API on/);
  t.ok(alive(bystander.pid!), 'a pid file for a process without our tag is passed over');
  const admin = await adminSession(uiPort);
  const publish = async (profile: object) => {
    const id = ((await (await admin('POST', '/api/v1/profiles', profile)).json()) as { id: string }).id;
    await admin('POST', '/api/v1/endpoint/profile', { id, enabled: true });
  };
  await publish({ name: 'ears', category: 'stt', params: { defaultLanguage: 'en' } });
  await publish({ name: 'voice', category: 'tts', params: { backend: 'openai-server', command: ['sh', '-c', `"${process.execPath}" "${server}" --port "$1" --record "${record}" & wait`, 'sh', '{port}'] } });
  const api = `http://127.0.0.1:${apiPort}`;
  const spoken = await fetch(`${api}/v1/audio/speech`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'voice', input: 'hello', language: 'English' }) });
  t.equal(spoken.status, 200);
  const pcm = await speech(stateDir, 'hello');
  const form = new FormData();
  form.set('model', 'ears');
  form.set('language', 'en');
  form.set('file', new Blob([encodeWav(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), 16_000)]), 'a.wav');
  t.equal((await fetch(`${api}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` }, body: form })).status, 200);
  const status = (await (await admin('GET', '/api/v1/endpoint')).json()) as { workers: Array<{ kind: string; pid: number }> };
  const engine = status.workers.find((w) => w.kind === 'stt')!.pid;
  const wrapper = status.workers.find((w) => w.kind === 'tts')!.pid;
  const speechServer = (JSON.parse((await readFile(record, 'utf8')).split('\n')[0]!) as { pid: number }).pid;
  t.ok([engine, wrapper, speechServer].every(alive), `the engine ${engine}, the wrapper ${wrapper} and its server ${speechServer} run`);
  const names = await readdir(runtime);
  t.ok(names.some((n) => /^stt-\d+-\d+\.pid$/.test(n)) && names.some((n) => /^tts-\d+-\d+\.pid$/.test(n)), `both are recorded in runtime/ (${names.join(', ')})`);
  t.notOk(names.includes('stt-7-1.pid'), "the stray record was removed at the first start, its process untouched");

  first.child.kill('SIGKILL');
  await first.exited;
  t.ok([engine, wrapper, speechServer].every(alive), 'a service killed with SIGKILL leaves them behind');

  const second = spawnCli(t, ['serve', '--ui-port', String(uiPort)], env);
  await second.waitFor(/inference API on/);
  await until('the left-over workers to end', async () => ([engine, wrapper, speechServer].some(alive) ? undefined : true));
  t.notOk([engine, wrapper, speechServer].some(alive), 'the next start ended the engine, the wrapper and the server behind it');
  t.ok(alive(bystander.pid!), 'a pid that is not ours was left alone');
  t.same((await readdir(runtime)).filter((n) => /^(stt|tts|image)-/.test(n)), [], 'no pid file is left');
  t.match(second.output(), /ended worker processes left behind/);
  second.child.kill('SIGTERM');
  await second.exited;
});
