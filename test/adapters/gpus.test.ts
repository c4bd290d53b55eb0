// The GPU probe: nvidia-smi output parsed and ordered by UUID, own and foreign processes told
// apart; the simulated inventory of CONTRACT section 1, inline or from a file re-read per probe.
import { execFile, spawn } from 'node:child_process';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { ownAncestor, parseNvidiaSmi, probeGpus } from '../../src/adapters/gpus.js';
import { tempDir } from '../helpers/build.js';

const GPU_CSV = `GPU-b2, NVIDIA H100 80GB HBM3, 81559, 80000
GPU-a1, NVIDIA RTX 4090, 24564, 20000
`;
const APPS_CSV = `GPU-a1, 4242, 3000
GPU-a1, 777, 1500
GPU-zz, 1, 1
`;

t.test('nvidia-smi output: ordered by UUID, processes attached, own pids marked', async (t) => {
  const gpus = parseNvidiaSmi(GPU_CSV, APPS_CSV, new Set([4242]));
  t.same(
    gpus.map((g) => g.uuid),
    ['GPU-a1', 'GPU-b2'],
  );
  t.same(gpus[0], {
    uuid: 'GPU-a1',
    name: 'NVIDIA RTX 4090',
    memoryTotalMiB: 24564,
    memoryFreeMiB: 20000,
    processes: [
      { pid: 4242, usedMiB: 3000, own: true },
      { pid: 777, usedMiB: 1500, own: false },
    ],
  });
  t.same(gpus[1]?.processes, [], 'a process on an unknown GPU is ignored');
  t.same(parseNvidiaSmi('', '', new Set()), [], 'no GPU: empty inventory');
});

t.test('a real probe path: a nvidia-smi on PATH is run with the query flags', async (t) => {
  const dir = await tempDir(t);
  const smi = path.join(dir, 'nvidia-smi');
  await writeFile(
    smi,
    `#!/bin/sh\ncase "$1" in\n  --query-gpu=uuid,name,memory.total,memory.free) printf '%s\\n' 'GPU-x, Sim, 1000, 900' ;;\n  --query-compute-apps=gpu_uuid,pid,used_memory) printf '%s\\n' 'GPU-x, 55, 100' ;;\n  *) exit 3 ;;\nesac\n`,
  );
  await chmod(smi, 0o755);
  const inventory = await probeGpus({ PATH: dir });
  t.same(inventory, {
    source: 'nvidia-smi',
    gpus: [{ uuid: 'GPU-x', name: 'Sim', memoryTotalMiB: 1000, memoryFreeMiB: 900, processes: [{ pid: 55, usedMiB: 100, own: false }] }],
  });
  await writeFile(smi, '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n');
  const failed = await probeGpus({ PATH: dir });
  t.same(failed.gpus, []);
  t.match(failed.problem, /nvidia-smi failed/, 'a failing probe says so instead of pretending CPU-only');
  t.same(await probeGpus({ PATH: path.join(dir, 'nowhere') }), { source: 'none', gpus: [] }, 'no nvidia-smi: CPU only');
});

t.test('SERVICE_DECK_GPUS: none, inline JSON, and a file re-read at every probe', async (t) => {
  t.same(await probeGpus({ SERVICE_DECK_GPUS: 'none', PATH: '' }), { source: 'none', gpus: [] });
  const inline = await probeGpus({ SERVICE_DECK_GPUS: '[{"uuid":"GPU-b","name":"sim","memoryTotalMiB":24576},{"uuid":"GPU-a","memoryTotalMiB":8192}]' });
  t.same(
    inline.gpus.map((g) => [g.uuid, g.memoryTotalMiB, g.memoryFreeMiB]),
    [
      ['GPU-a', 8192, 8192],
      ['GPU-b', 24576, 24576],
    ],
  );
  const dir = await tempDir(t);
  const file = path.join(dir, 'gpus.json');
  await writeFile(file, JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24576 }]));
  t.equal((await probeGpus({ SERVICE_DECK_GPUS: file })).gpus[0]?.memoryFreeMiB, 24576);
  await writeFile(file, JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24576, processes: [{ pid: 999, usedMiB: 20000 }] }]));
  const changed = await probeGpus({ SERVICE_DECK_GPUS: file }, new Set([1]));
  t.same(changed.gpus[0]?.processes, [{ pid: 999, usedMiB: 20000, own: false }], 'a foreign process appeared at run time');
  t.equal(changed.gpus[0]?.memoryFreeMiB, 4576);
  await t.rejects(probeGpus({ SERVICE_DECK_GPUS: '[{"uuid":"GPU-a"}]' }), /SERVICE_DECK_GPUS \(inline\)/);
});

t.test('fixture files in nvidia-smi’s csv,noheader,nounits format: UUID order, own pid, [N/A] memory', async (t) => {
  const dir = path.join(import.meta.dirname, '..', 'fixtures', 'nvidia-smi');
  const gpus = parseNvidiaSmi(await readFile(path.join(dir, 'query-gpu.csv'), 'utf8'), await readFile(path.join(dir, 'query-compute-apps.csv'), 'utf8'), new Set([41873]));
  t.same(
    gpus.map((g) => [g.uuid.slice(0, 12), g.name, g.memoryTotalMiB, g.memoryFreeMiB]),
    [
      ['GPU-0b3e5d6a', 'NVIDIA GeForce RTX 3090', 24576, 24237],
      ['GPU-f2d1c4a0', 'NVIDIA GeForce RTX 4090', 24564, 1873],
    ],
  );
  t.same(gpus[1]?.processes, [
    { pid: 41873, usedMiB: 20112, own: true },
    { pid: 2290, usedMiB: 2048, own: false },
  ]);
  t.same(gpus[0]?.processes, [{ pid: 3310, usedMiB: 0, own: false }], 'a process whose memory nvidia-smi cannot read still counts as a process on that GPU');
});

t.test("a process that one of our workers started (behind a wrapper) is reported as that worker's, never as foreign", async (t) => {
  const wrapper = spawn('sh', ['-c', 'sleep 30 & echo $!; wait'], { stdio: ['ignore', 'pipe', 'ignore'] });
  t.teardown(() => {
    wrapper.kill('SIGKILL');
  });
  const child = Number(await new Promise<string>((resolve) => wrapper.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()))));
  t.teardown(() => {
    try {
      process.kill(child, 'SIGKILL');
    } catch {
      // gone
    }
  });
  t.equal(await ownAncestor(child, new Set([wrapper.pid!])), wrapper.pid, 'found through /proc/<pid>/stat');
  t.equal(await ownAncestor(process.pid, new Set([wrapper.pid!])), undefined, 'an unrelated process is not ours');
  const env = { SERVICE_DECK_GPUS: JSON.stringify([{ uuid: 'GPU-a', memoryTotalMiB: 24_576, processes: [{ pid: child, usedMiB: 7_000 }, { pid: 999_999, usedMiB: 1_000 }] }]) };
  const inventory = await probeGpus(env, new Set([wrapper.pid!]));
  t.same(inventory.gpus[0]!.processes, [
    { pid: wrapper.pid, usedMiB: 7_000, own: true },
    { pid: 999_999, usedMiB: 1_000, own: false },
  ]);
});

t.test('the nvidia-smi stand-in of the GPU check (test/fixtures/fake-nvidia-smi.mjs) through the real probe: a process is on a GPU its CUDA_VISIBLE_DEVICES names', async (t) => {
  const dir = await tempDir(t);
  const uuid = `GPU-stand-in-${process.pid}`;
  const state = path.join(dir, 'state.json');
  await writeFile(state, JSON.stringify({ driver: '580.00', cuda: '13.0', gpus: [{ uuid, name: 'NVIDIA H100 80GB HBM3', memoryTotalMiB: 81_559 }] }));
  const smi = path.join(dir, 'nvidia-smi');
  await writeFile(smi, `#!/bin/sh\nexec "${process.execPath}" "${path.join(import.meta.dirname, '..', 'fixtures', 'fake-nvidia-smi.mjs')}" "$@"\n`);
  await chmod(smi, 0o755);
  const env = { PATH: `${dir}:${process.env.PATH}`, FAKE_NVIDIA_SMI_STATE: state };
  const idle = await probeGpus(env);
  t.equal(idle.source, 'nvidia-smi', 'the probe ran the program it found on PATH, not a simulation');
  t.same(idle.gpus, [{ uuid, name: 'NVIDIA H100 80GB HBM3', memoryTotalMiB: 81_559, memoryFreeMiB: 81_559, processes: [] }]);

  const onGpu = spawn('sleep', ['30'], { env: { ...process.env, CUDA_VISIBLE_DEVICES: `GPU-other,${uuid}` }, stdio: 'ignore' });
  const elsewhere = spawn('sleep', ['30'], { env: { ...process.env, CUDA_VISIBLE_DEVICES: 'GPU-other' }, stdio: 'ignore' });
  t.teardown(() => {
    onGpu.kill('SIGKILL');
    elsewhere.kill('SIGKILL');
  });
  // The environment of a fresh process is readable once it has exec'd sleep.
  let busy = await probeGpus(env);
  for (let i = 0; i < 50 && busy.gpus[0]?.processes.length === 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    busy = await probeGpus(env);
  }
  const processes = busy.gpus[0]?.processes ?? [];
  t.same(processes.map((p) => [p.pid, p.own]), [[onGpu.pid, false]], 'only the process whose CUDA_VISIBLE_DEVICES names the GPU, foreign to us');
  t.ok((processes[0]?.usedMiB ?? 0) >= 1, 'its resident memory stands in for GPU memory');
  t.equal(busy.gpus[0]?.memoryFreeMiB, 81_559 - (processes[0]?.usedMiB ?? 0), 'free memory is the total less what processes hold');
  const ours = await probeGpus(env, new Set([onGpu.pid!]));
  t.same(ours.gpus[0]?.processes.map((p) => [p.pid, p.own]), [[onGpu.pid, true]], 'the same process, started by us, is ours');

  const run = (args: string[]) =>
    new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile(smi, args, { env: { ...process.env, ...env } }, (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, out: `${stdout}${stderr}` }));
    });
  t.match((await run(['-L'])).out, new RegExp(`^GPU 0: NVIDIA H100 80GB HBM3 \\(UUID: ${uuid}\\)$`, 'm'));
  t.match((await run(['--query-gpu=name,memory.total', '--format=csv'])).out, /^name, memory\.total \[MiB\]\nNVIDIA H100 80GB HBM3, 81559 MiB\n$/);
  const unknown = await run(['--query-gpu=power.draw', '--format=csv,noheader']);
  t.equal(unknown.code, 2, 'a field it does not know is refused, as nvidia-smi refuses one');
  t.match(unknown.out, /"power\.draw" is not a valid field/);
});
