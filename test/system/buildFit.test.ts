// The build's own fit (spec 8: "without a fixed split, the checked fit parameters of the build
// apply") as the operator sees it in the status: with the real llama-fit-params that the set-up
// built, on a generated tiny model and a simulated GPU, the worker plan says the build's fit was
// used and what it chose; without the tool on a host with GPUs, the plan and the profile's view
// say plainly that the layer count is the service's own estimate. No skip: a missing build fails.
import path from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { FIT_TOOL_MISSING_NOTE } from '../../machines/supervisor/index.js';
import type { JobRequest } from '../../src/system/scheduler.js';
import { build, tempDir, type Built } from '../helpers/build.js';
import { fakeLlamaServerIn, llamaFitParamsPath, tinyModelIn } from '../helpers/llama.js';

const ONE_GPU = JSON.stringify([{ uuid: 'GPU-a', name: 'simulated', memoryTotalMiB: 24576 }]);

interface Status {
  workers: Array<{ kind: string; plan: { gpu_layers: number | null; fit: string; fit_tool: string | null } | null }>;
  profiles: Array<{ name: string; notices: string[] }>;
}

async function chatProfile(b: Built, name: string, model: string, gpuSplit: number[] | null): Promise<{ id: string; notices: string[] }> {
  const response = await b.admin('POST', '/api/v1/profiles', { name, category: 'chat', params: { model, context: 512, slots: 1, gpuSplit } });
  if (response.status !== 201) throw new Error(`profile ${name}: ${response.status} ${await response.text()}`);
  return (await response.json()) as { id: string; notices: string[] };
}

/** Reserves a chat start through the real scheduler (the supervisor starts it with the grant: the stand-in llama-server). */
async function reserveChat(t: Test, b: Built, profileId: string, model: string) {
  const job: JobRequest = {
    kind: 'chat',
    source: 'api',
    profileId,
    revision: 1,
    slots: 1,
    device: 'cpu',
    whenBusy: 'wait',
    profile: { name: profileId, category: 'chat', params: { model, context: 512, slots: 1, gpuSplit: null, gpuLayers: null } },
  };
  const lease = await b.service.scheduler.reserve(job);
  t.teardown(() => lease.release());
  return lease;
}

async function status(b: Built): Promise<Status> {
  const response = await b.admin('GET', '/api/v1/endpoint');
  return (await response.json()) as Status;
}

t.test('the real llama-fit-params: the plan in the status says the build chose the layer count', async (t) => {
  const fit = await llamaFitParamsPath();
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_GPUS: ONE_GPU, SERVICE_DECK_LLAMA_FIT_PARAMS: fit, SERVICE_DECK_LLAMA_SERVER: await fakeLlamaServerIn(dir, 'instant') } });
  const profile = await chatProfile(b, 'fitted', model, null);
  t.same(profile.notices, [], 'the build has its fit tool: nothing to note');
  const lease = await reserveChat(t, b, profile.id, model);
  // This build has no GPU backend: it answers "-c 512 -ngl -1" (every layer) from host memory.
  const chose = "the build's llama-fit-params: -ngl 3 (all layers); the build saw no GPU (its fit is for host memory only)";
  t.same([lease.start?.gpus, lease.start?.gpuLayers, lease.start?.fitTool, lease.start?.fit], [['GPU-a'], 3, 'used', chose], 'two blocks and the output layer');
  const seen = await status(b);
  const plan = seen.workers.find((w) => w.kind === 'chat')?.plan;
  t.same([plan?.gpu_layers, plan?.fit_tool, plan?.fit], [3, 'used', chose], 'the status shows the same plan');
  t.same(seen.profiles.find((p) => p.name === 'fitted')?.notices, []);
});

t.test('llama-fit-params missing on a host with GPUs: the plan and the profile say the layer count is our own estimate', async (t) => {
  const dir = await tempDir(t);
  const model = await tinyModelIn(dir);
  const b = await build(t, { env: { SERVICE_DECK_GPUS: ONE_GPU, SERVICE_DECK_LLAMA_FIT_PARAMS: path.join(dir, 'no-such-llama-fit-params'), SERVICE_DECK_LLAMA_SERVER: await fakeLlamaServerIn(dir, 'instant') } });
  const free = await chatProfile(b, 'own-estimate', model, null);
  t.same(free.notices, [FIT_TOOL_MISSING_NOTE], 'the view says so before any start');
  const split = await chatProfile(b, 'fixed-split', model, [1]);
  t.same(split.notices, [], 'a fixed split never asks the build');
  const lease = await reserveChat(t, b, free.id, model);
  t.match(lease.start, { gpus: ['GPU-a'], fitTool: 'not_installed' });
  const seen = await status(b);
  const plan = seen.workers.find((w) => w.kind === 'chat')?.plan;
  t.equal(plan?.fit_tool, 'not_installed');
  t.ok(plan?.fit.startsWith(`${FIT_TOOL_MISSING_NOTE}; shallow search: `), plan?.fit ?? 'no plan');
  t.same(seen.profiles.find((p) => p.name === 'own-estimate')?.notices, [FIT_TOOL_MISSING_NOTE]);

  const cpu = await build(t, { env: { SERVICE_DECK_GPUS: 'none', SERVICE_DECK_LLAMA_FIT_PARAMS: path.join(dir, 'no-such-llama-fit-params') } });
  t.same((await chatProfile(cpu, 'cpu-only', model, null)).notices, [], 'no GPU: the fit tool is not needed, nothing to note');
});
