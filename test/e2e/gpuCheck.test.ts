// The GPU check as the GPU machine gets it, without the GPU: scripts/gpu-pack.sh fills a pack, and
// scripts/gpu-check.sh --dry-run runs in a copy of the working tree that has nothing but the
// tracked files and the pack (no node_modules, no dist), as the device's copy has. So a change
// that would break the one device call (a package left out of the pack, a step that no longer
// runs, a file the check no longer writes) fails here first. The dry run builds llama-server on
// the CPU from the pack's source through scripts/build-llama.sh (the set-up's build, found in the
// cache, after a configure run of the packed source), finds the one simulated H100 through the
// nvidia-smi stand-in, and runs every service step against the real service.
import { execFile } from 'node:child_process';
import { copyFile, mkdir, readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { tempDir } from '../helpers/build.js';

// The pack (tsc, vite, xz) and the dry run (a configure run, the service, two llama-server starts
// by hand and the chat A/B): 260-385 s on 2 cores beside the rest of the suite, and past 480 s at
// a load of 11.
t.setTimeout(900_000);

const ROOT = path.resolve(import.meta.dirname, '..', '..');
/** The files the check writes: the device sends back at most 8. */
const OUTPUT = ['1-environment.txt', '2-build.txt', '3-probe.json', '4-fit.json', '5-chat.txt', '6-foreign.json', '7-summary.txt', 'service.log'];

function sh(args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile('sh', args, { cwd, env: { ...process.env, ...env }, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

/** The working tree as the device gets it: tracked and untracked files that git does not ignore. */
async function copyWorkingTree(to: string): Promise<number> {
  const listed = await new Promise<string[]>((resolve, reject) => {
    execFile('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 }, (error, stdout) =>
      error ? reject(error) : resolve(stdout.split('\0').filter(Boolean)),
    );
  });
  let copied = 0;
  for (const file of listed) {
    const from = path.join(ROOT, file);
    const info = await stat(from).catch(() => undefined);
    if (!info?.isFile()) continue;
    await mkdir(path.dirname(path.join(to, file)), { recursive: true });
    await copyFile(from, path.join(to, file));
    copied++;
  }
  return copied;
}

t.test('the pack fits the device, and the dry run of the device check passes in a copy that has only the working tree and the pack', async (t) => {
  const dir = await tempDir(t, 'sd-gpu-check-');
  const copy = path.join(dir, 'tree');
  t.ok((await copyWorkingTree(copy)) > 100, 'the working tree is copied');
  // The environment of a test run must not steer the check: it finds the GPUs itself.
  const env = { SERVICE_DECK_GPUS: '' };

  const unpacked = await sh(['scripts/gpu-check.sh', '--dry-run', path.join(dir, 'no-pack')], copy, env);
  t.equal(unpacked.code, 1, 'without a pack the check stops at once');
  t.match(unpacked.out, /no pack in .*\.gpu: run sh scripts\/gpu-pack\.sh first/);

  const packed = await sh(['scripts/gpu-pack.sh'], ROOT, { SERVICE_DECK_GPU_PACK_DIR: path.join(copy, '.gpu') });
  t.equal(packed.code, 0, `gpu-pack.sh succeeds\n${packed.out.slice(-3000)}`);
  const total = /^total\s+([\d.]+) MiB/m.exec(packed.out);
  t.ok(total && Number(total[1]) < 56, `the pack stays under 56 MiB (${total?.[1]} MiB)`);
  t.same((await readdir(path.join(copy, '.gpu'))).sort(), ['app.tar.xz', 'llama-src.tar.xz', 'llama-src.tar.xz.info', 'node.version', 'node.xz']);
  t.match(await readFile(path.join(copy, '.gpu', 'llama-src.tar.xz.info'), 'utf8'), /^tag=.+\ncommit=[0-9a-f]{40}\nnode_llama_cpp=\d+\.\d+\.\d+\n$/);

  const out = path.join(dir, 'out');
  const run = await sh(['scripts/gpu-check.sh', '--dry-run', out], copy, env);
  const summary = await readFile(path.join(out, '7-summary.txt'), 'utf8').catch(() => '');
  t.equal(run.code, 0, `the dry run passes\n${summary}\n${run.out.slice(-4000)}`);
  t.same((await readdir(out)).sort(), OUTPUT, 'it writes the eight files the device can send back, and no more');

  for (const step of ['1 environment', '2 build', '3 probe', '4 fit', '5 chat', '6 foreign GPU process', 'service stop']) {
    t.match(summary, new RegExp(`^${step}[^\\n]*: ok$`, 'm'), `step "${step}" passed`);
  }
  t.match(summary, /^result: PASS$/m);
  t.match(summary, /^ {2}CPU \(dry run\), Ninja|^ {2}CPU \(dry run\), make/m, 'the build went through the CPU backend');
  t.match(await readFile(path.join(out, '2-build.txt'), 'utf8'), /^configure check of the packed source: ok$/m, 'the packed source configures');

  const probe = JSON.parse(await readFile(path.join(out, '3-probe.json'), 'utf8')) as { gpu_probe: { source: string }; service: Array<{ uuid: string; memoryTotalMiB: number }> };
  t.equal(probe.gpu_probe.source, 'nvidia-smi', 'the service probed through nvidia-smi (the stand-in), not a simulated inventory');
  const uuid = probe.service[0]?.uuid ?? '';
  t.match(uuid, /^GPU-dry-run-\d+$/);
  t.equal(probe.service[0]?.memoryTotalMiB, 81_559);

  const fit = JSON.parse(await readFile(path.join(out, '4-fit.json'), 'utf8')) as {
    worker: { argv: string[]; cuda_visible_devices: string; gpus: string[] };
    plan: { gpu_layers: number; fit_tool: string; forecast: { gpu_mib: Record<string, number> } };
    per_gpu: Array<{ uuid: string; forecast_mib: number; measured_mib: number }>;
  };
  t.equal(fit.worker.cuda_visible_devices, uuid, "the chat worker's environment names the GPU");
  t.equal(fit.worker.argv[fit.worker.argv.indexOf('-ngl') + 1], String(fit.plan.gpu_layers), 'its -ngl is the plan');
  t.ok(fit.plan.gpu_layers > 0, 'the plan puts layers on the GPU');
  t.equal(fit.plan.fit_tool, 'used', "the build's llama-fit-params was asked");
  t.ok(fit.per_gpu[0]!.forecast_mib > 0 && fit.per_gpu[0]!.measured_mib > 0, 'forecast and measured memory are both recorded');

  const chat = await readFile(path.join(out, '5-chat.txt'), 'utf8');
  for (const row of ['latency (ms) p50', 'first token (ms) p50', 'one stream (tokens/s) p50', '2 slots (tokens/s) p50', '8 clients: mean (ms)']) {
    t.match(chat, new RegExp(`^${row.replace(/[()]/g, '\\$&')}\\s+\\d+\\.\\d+\\s+\\d+\\.\\d+`, 'm'), `5-chat.txt has ${row} for both sides`);
  }

  const foreign = JSON.parse(await readFile(path.join(out, '6-foreign.json'), 'utf8')) as {
    foreign: Array<{ seen_as_foreign: boolean; own_worker_unloaded: boolean; alive_after: boolean }>;
    tts: { cuda_visible_devices: string; server_saw: string[] };
  };
  t.same(
    foreign.foreign.map((f) => [f.seen_as_foreign, f.own_worker_unloaded, f.alive_after]),
    [
      [true, true, true],
      [true, true, true],
    ],
    'both hand-started llama-servers were seen as foreign, our chat worker unloaded for each, and they were never signalled',
  );
  t.equal(foreign.tts.cuda_visible_devices, uuid, 'the TTS worker on the GPU sees that GPU');
  t.ok(foreign.tts.server_saw.length > 0 && foreign.tts.server_saw.every((v) => v === uuid));
});
