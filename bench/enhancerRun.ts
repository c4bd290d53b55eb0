// bench/enhancerRun: what one prompt enhancement costs in the service against the same work done
// by hand, in one run, on the generated tiny model (test models only: weights cannot be fetched).
//
// - Direct: spawn llama-server with the enhancer's command line, wait for /health, send the same
//   request (instructions, JSON schema), read the answer, SIGTERM and wait for the exit.
// - Service: POST /api/v1/prompt-enhancers/preview on a running service: the reservation of every
//   GPU, the memory check (the GGUF's metadata), the enhancer machine's start, the same request, the
//   unload, and the answer. The enhancer is installed from a local hub first (not timed).
//
// The sides alternate round by round after a warm-up; prints the median load and total times per
// side and the median ratio of the service's total over the direct total. Run:
// npm run bench:enhancer-run [-- ROUNDS]
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { execa } from 'execa';
import type { Test } from 'tap';
import { enhancerArgs } from '../machines/enhancerWorker/index.js';
import { loadConfig } from '../src/config.js';
import { startService } from '../src/compose.js';
import { createLogger } from '../src/system/observe/log.js';
import { enhancerRequest, readEnhancerAnswer } from '../src/workers/enhancer/enhancer.js';
import { healthStatus } from '../src/workers/chat/llamaServer.js';
import { freePort } from '../src/workers/process.js';
import { startHub } from '../test/helpers/hub.js';
import { llamaServerPath, tinyModelIn } from '../test/helpers/llama.js';

const ROUNDS = Number(process.argv[2] ?? 5);
const WARM_UP = 1;
const REPO = 'bench-org/enhancer';
const PROMPT = 'a lighthouse on a cliff at dusk';
const CONTEXT = 8192;
const PASSWORD = 'bench password 123';

const teardowns: Array<() => unknown> = [];
const dir = await mkdtemp(path.join(os.tmpdir(), 'sd-bench-enhancer-run-'));
const server = await llamaServerPath();
const model = await tinyModelIn(dir);
const hub = await startHub({ teardown: (fn: () => unknown) => void teardowns.push(fn) } as unknown as Test);
hub.put(REPO, 'main', 'tiny.gguf', await readFile(model));
const recipe = { repo: REPO, revision: 'main', files: [{ path: 'tiny.gguf', role: 'model' }], context: CONTEXT };
const recipes = path.join(dir, 'recipes.json');
await writeFile(recipes, JSON.stringify({ t2i: recipe, i2i: recipe }));

const stateDir = path.join(dir, 'state');
const env = {
  PATH: process.env.PATH,
  HOME: process.env.HOME,
  SERVICE_DECK_ADMIN_PASSWORD: PASSWORD,
  SERVICE_DECK_API_TOKEN: 'sd-bench-token-0123456789abcdefghijklmnop',
  SERVICE_DECK_GPUS: 'none',
  SERVICE_DECK_LLAMA_SERVER: server,
  SERVICE_DECK_ENHANCER_HUB: hub.url,
  SERVICE_DECK_ENHANCER_RECIPES: recipes,
  SERVICE_DECK_SD_CLI: path.resolve('test/fixtures/sd-cli'),
};
const { service } = await startService(loadConfig({ stateDir }, env), { log: createLogger({ level: 'silent' }), adminPort: 0 });
const admin = `http://127.0.0.1:${service.adminAddress()?.port}`;
const login = await fetch(`${admin}/api/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-service-deck': '1' }, body: JSON.stringify({ password: PASSWORD }) });
const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] ?? '';
const { csrfToken } = (await login.json()) as { csrfToken: string };
const call = (url: string, body: unknown) =>
  fetch(`${admin}${url}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-service-deck': '1', cookie, 'x-csrf-token': csrfToken }, body: JSON.stringify(body) });

service.enhancers.install('t2i');
await service.enhancers.settled();
const painter = path.join(dir, 'painter.gguf');
await writeFile(painter, 'ok');
const created = (await (await call('/api/v1/profiles', { name: 'painter', category: 'image', params: { model: painter } })).json()) as { id: string };
const installed = await service.enhancers.installed('t2i');
if (!installed) throw new Error('the enhancer did not install');

async function direct(round: number): Promise<{ loadMs: number; totalMs: number }> {
  const port = await freePort();
  const keyFile = path.join(dir, `direct-${round}.key`);
  await writeFile(keyFile, 'bench-key\n', { mode: 0o600 });
  const launch = { generation: round, profileId: 'bench', revision: 1, name: 'prompt-enhancer-t2i', model: installed!.model, context: CONTEXT, slots: 1, gpuLayers: null, tensorSplit: null, overrides: [], gpus: [], task: 't2i' as const, mmproj: null };
  const started = performance.now();
  const child = execa(server, enhancerArgs(launch, { port, keyFile }), { stdio: 'ignore', reject: false });
  while ((await healthStatus(port)) !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
  const loadMs = performance.now() - started;
  const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer bench-key' },
    body: JSON.stringify(await enhancerRequest('t2i', PROMPT, [])),
  });
  readEnhancerAnswer(await response.json());
  child.kill('SIGTERM');
  await child;
  return { loadMs, totalMs: performance.now() - started };
}

async function throughService(): Promise<{ loadMs: number; totalMs: number }> {
  let loadedAt = 0;
  const started = performance.now();
  const watch = service.enhancer.actor.subscribe((s) => {
    if (loadedAt === 0 && s.matches({ running: 'loaded' })) loadedAt = performance.now();
  });
  const response = await call('/api/v1/prompt-enhancers/preview', { profile_id: created.id, prompt: PROMPT });
  watch.unsubscribe();
  if (response.status !== 200) throw new Error(`preview answered ${response.status}: ${await response.text()}`);
  await service.enhancer.gone(service.enhancer.actor.getSnapshot().context.launch?.generation ?? 0);
  return { loadMs: loadedAt - started, totalMs: performance.now() - started };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
const results = { direct: [] as Array<{ loadMs: number; totalMs: number }>, service: [] as Array<{ loadMs: number; totalMs: number }> };
const ratios: number[] = [];
try {
  for (let round = 0; round < WARM_UP + ROUNDS; round++) {
    const first = round % 2 === 0;
    const a = first ? await direct(round) : await throughService();
    const b = first ? await throughService() : await direct(round);
    const [d, s] = first ? [a, b] : [b, a];
    if (round < WARM_UP) continue;
    results.direct.push(d);
    results.service.push(s);
    ratios.push(s.totalMs / d.totalMs);
  }
  const line = (name: string, rows: Array<{ loadMs: number; totalMs: number }>) =>
    `${name.padEnd(8)} load ${median(rows.map((r) => r.loadMs)).toFixed(0).padStart(6)} ms   load+answer+end ${median(rows.map((r) => r.totalMs)).toFixed(0).padStart(6)} ms`;
  console.log(`prompt enhancer on the tiny model (${ROUNDS} rounds, median):`);
  console.log(line('direct', results.direct));
  console.log(line('service', results.service));
  console.log(`ratio service/direct ${median(ratios).toFixed(2)} (paired rounds: ${ratios.map((r) => r.toFixed(2)).join(', ')})`);
} finally {
  await service.shutdown();
  for (const fn of teardowns) await fn();
  await rm(dir, { recursive: true, force: true });
}
