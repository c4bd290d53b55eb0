// The build's fit check: the argv we give llama-fit-params, its output parsed (the README
// example, two GPUs with -ts, a logged failure, a context the build would shrink), and the real
// spawn path against fake llama-fit-params scripts (right arguments, an error exit, a hang).
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { fitArgs, parseFitOutput, runFitParams, type FitInput } from '../../src/adapters/fitParams.js';
import { tempDir } from '../helpers/build.js';

const INPUT: FitInput = { model: '/models/qwen3-30b-a3b.gguf', context: 8192, slots: 2, reserveMiB: 1536, kv: { typeK: 'q4_0', typeV: 'q4_0' } };

// tools/fit-params/README.md: a 30B MoE model on one 24 GB card; the log goes to the terminal,
// the fitted line to stdout.
const README_STDERR = `ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no
ggml_cuda_init: GGML_CUDA_FORCE_CUBLAS: no
ggml_cuda_init: found 1 CUDA devices:
  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes
build: 6895 (4341dc8bc) with cc (GCC) 15.2.1 20250813 for x86_64-pc-linux-gnu
llama_params_fit_impl: projected to use 61807 MiB of device memory vs. 24077 MiB of free device memory
llama_params_fit_impl: cannot fulfill margin of 1024 MiB, need to reduce device memory by 42444 MiB
llama_params_fit_impl: context size reduced from 40960 to 4096 -> need 3456 MiB less memory in total
llama_params_fit_impl: with only dense weights in device memory there is a total surplus of 16164 MiB
llama_params_fit_impl: distributing layers across devices with overflow to next device/system memory:
llama_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090): 48 layers (34 overflowing),  19187 MiB used,   1199 MiB free
llama_params_fit: successfully fit params to free device memory
llama_params_fit: fitting params to free memory took 1.15 seconds
Printing fitted CLI arguments to stdout...
`;
const README_OT = Array.from({ length: 34 }, (_, i) => `blk\\.${i + 14}\\.ffn_(up|down|gate)_(ch|)exps=CPU`);
const README_STDOUT = `-c 4096 -ngl 48 -ot ${README_OT.join(',')}\n`;

// A newer build (common/fit.cpp, quoted -ot, integer -ts) splitting a dense model over two cards.
const TWO_GPU_STDERR = `ggml_cuda_init: found 2 CUDA devices:
  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes
  Device 1: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes
common_params_fit_impl: projected memory use with initial parameters [MiB]:
common_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090):  24080 total,  29012 used,  -5290 free vs. target of   1536
common_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 3090):  24124 total,    880 used,  22950 free vs. target of   1536
common_params_fit_impl: projected to use 29892 MiB of device memory vs. 47552 MiB of free device memory
common_params_fit_impl: context size set by user to 16384 -> no change
common_params_fit_impl: distributing layers across devices with overflow to next device/system memory:
common_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090): 36 layers ( 0 overflowing),  21310 MiB used,   2412 MiB free
common_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 3090): 13 layers ( 0 overflowing),   8580 MiB used,  15250 MiB free
common_fit_params: successfully fit params to free device memory
common_fit_params: fitting params to free memory took 2.31 seconds
main: printing fitted CLI arguments to stdout...
`;

// An older build that logs the failure and still prints the unchanged parameters, exit 0.
const FAILED_STDERR = `llama_params_fit_impl: projected to use 9240 MiB of device memory vs. 7802 MiB of free device memory
llama_params_fit_impl: cannot meet free memory target of 1024 MiB, need to reduce device memory by 2462 MiB
llama_params_fit_impl: context size set by user to 8192 -> no change
llama_params_fit: failed to fit params to free device memory: model_params::tensor_buft_overrides already set by user, abort
llama_params_fit: fitting params to free memory took 0.41 seconds
Printing fitted CLI arguments to stdout...
`;

t.test('fitArgs: the stored context as -c and as the fit minimum, the reserve as the margin', async (t) => {
  t.same(fitArgs(INPUT), [
    '-m', '/models/qwen3-30b-a3b.gguf', '-c', '8192', '-np', '2', '-ctk', 'q4_0', '-ctv', 'q4_0', '-fa', 'on', '-fitt', '1536', '-fitc', '8192',
  ]);
  t.notOk(fitArgs(INPUT).includes('--kv-unified'), 'not a llama-fit-params option in stock builds (common/arg.cpp)');
  t.throws(() => fitArgs({ ...INPUT, context: 0 }), RangeError);
  t.throws(() => fitArgs({ ...INPUT, reserveMiB: 1.5 }), RangeError);
});

t.test('the README example: layers, CPU overrides, projection and the fit log', async (t) => {
  const result = parseFitOutput(README_STDOUT, README_STDERR, 4096);
  t.ok(result.ok);
  if (!result.ok) return;
  t.equal(result.gpuLayers, 48);
  t.equal(result.tensorSplit, null, 'one device: no -ts');
  t.equal(result.overrides.length, 34);
  t.equal(result.overrides[0], 'blk\\.14\\.ffn_(up|down|gate)_(ch|)exps=CPU', 'backslashes kept verbatim');
  t.equal(result.overrides.at(-1), 'blk\\.47\\.ffn_(up|down|gate)_(ch|)exps=CPU');
  t.equal(result.context, 4096);
  t.equal(result.projectedMiB, 61807);
  t.equal(result.freeMiB, 24077);
  t.same(result.extraArgs, []);
  t.equal(result.log.length, 8, 'only the fit lines, not the CUDA init or build lines');
  t.match(result.log.at(-2), /successfully fit params/);

  const oneStream = parseFitOutput(README_STDERR + README_STDOUT, '', 4096);
  t.same(oneStream, result, 'the log on stdout before the fitted line reads the same');
});

t.test('two GPUs: the -ts split, a quoted -ot, unknown arguments kept, -ngl -1 means all', async (t) => {
  const result = parseFitOutput('-c 16384 -ngl 49 -ts 36,13\n', TWO_GPU_STDERR, 16384);
  t.ok(result.ok);
  if (!result.ok) return;
  t.same(result.tensorSplit, [36, 13]);
  t.equal(result.gpuLayers, 49);
  t.same(result.overrides, []);
  t.equal(result.projectedMiB, 29892, 'the total projection, not a per-device line');
  t.equal(result.freeMiB, 47552);

  const quoted = parseFitOutput('-c 16384 -ngl -1 -ts 3,1 -ot "blk\\.40\\.ffn_down.*=CPU,blk\\.41\\.ffn_down.*=CUDA1" -sm row --no-op-offload\n', '', 16384);
  t.ok(quoted.ok);
  if (!quoted.ok) return;
  t.equal(quoted.gpuLayers, 'all');
  t.same(quoted.tensorSplit, [3, 1]);
  t.same(quoted.overrides, ['blk\\.40\\.ffn_down.*=CPU', 'blk\\.41\\.ffn_down.*=CUDA1']);
  t.same(quoted.extraArgs, ['-sm', 'row', '--no-op-offload']);
  t.equal(quoted.projectedMiB, undefined, 'no log, no projection');
});

t.test('a logged fit failure is a failure even with a printed line and exit 0', async (t) => {
  const result = parseFitOutput('-c 8192 -ngl -1\n', FAILED_STDERR, 8192);
  t.equal(result.ok, false);
  if (result.ok) return;
  t.match(result.reason, /could not fit the model to free device memory: llama_params_fit: failed to fit params .*tensor_buft_overrides already set by user/);
});

t.test('a context the build would shrink is refused; a missing or unreadable line too', async (t) => {
  const shrunk = parseFitOutput('-c 4096 -ngl 48\n', README_STDERR, 32768);
  t.same(shrunk, { ok: false, reason: 'the build would shrink the context from 32768 to 4096: it does not fit' });
  const missing = parseFitOutput('', 'llama_model_load: error loading model: failed to open /models/x.gguf\nmain: exiting\n', 8192);
  t.equal(missing.ok, false);
  if (!missing.ok) t.match(missing.reason, /printed no fitted arguments; last output: .*failed to open \/models\/x\.gguf \| main: exiting/);
  const garbled = parseFitOutput('-c 8192 -ngl many\n', '', 8192);
  t.equal(garbled.ok, false);
  if (!garbled.ok) t.match(garbled.reason, /could not read the fitted arguments: -ngl many/);
});

async function fakeTool(dir: string, body: string): Promise<string> {
  const file = path.join(dir, 'llama-fit-params');
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, 0o755);
  return file;
}

t.test('the real spawn path: the fake tool checks -fitc and -fitt and prints a fitted line', async (t) => {
  const dir = await tempDir(t);
  const argvFile = path.join(dir, 'argv');
  const tool = await fakeTool(
    dir,
    [
      `printf '%s\\n' "$@" > '${argvFile}'`,
      'case " $* " in *" -fitc 8192 "*) ;; *) echo "no -fitc 8192" >&2; exit 9 ;; esac',
      'case " $* " in *" -fitt 1536 "*) ;; *) echo "no -fitt 1536" >&2; exit 9 ;; esac',
      `echo 'common_params_fit_impl: projected to use 30120 MiB of device memory vs. 23890 MiB of free device memory' >&2`,
      `echo 'common_fit_params: successfully fit params to free device memory' >&2`,
      `echo '-c 8192 -ngl 41 -ot "blk\\.40\\.ffn_(up|down|gate)_(ch|)exps=CPU"'`,
    ].join('\n'),
  );
  const result = await runFitParams(tool, INPUT, { env: { PATH: process.env.PATH } });
  t.same(result, {
    ok: true,
    gpuLayers: 41,
    tensorSplit: null,
    overrides: ['blk\\.40\\.ffn_(up|down|gate)_(ch|)exps=CPU'],
    context: 8192,
    projectedMiB: 30120,
    freeMiB: 23890,
    extraArgs: [],
    log: [
      'common_params_fit_impl: projected to use 30120 MiB of device memory vs. 23890 MiB of free device memory',
      'common_fit_params: successfully fit params to free device memory',
    ],
  });
  t.same((await readFile(argvFile, 'utf8')).trimEnd().split('\n'), fitArgs(INPUT), 'exactly the argv of fitArgs');

  const shrinking = await runFitParams(tool, { ...INPUT, context: 16384 });
  t.equal(shrinking.ok, false, 'a different stored context: the fake refuses it (no -fitc 16384)');
  if (!shrinking.ok) t.match(shrinking.reason, /exited with code 9; last output: no -fitc 8192/);
});

t.test('an error exit, a hang and a cancel become failures with the last stderr lines', async (t) => {
  const dir = await tempDir(t);
  const failing = await fakeTool(
    dir,
    [
      `echo "gguf_init_from_file_impl: failed to read magic" >&2`,
      `echo "common_fit_params: failed to fit params to free device memory: n_gpu_layers already set by user to 99, abort" >&2`,
      `echo "main: failed to fit CLI arguments to free memory, exiting..." >&2`,
      'exit 3',
    ].join('\n'),
  );
  const failed = await runFitParams(failing, INPUT);
  t.equal(failed.ok, false);
  if (!failed.ok) {
    t.match(failed.reason, /^llama-fit-params exited with code 3: common_fit_params: failed to fit params/);
    t.match(failed.reason, /last output: gguf_init_from_file_impl: failed to read magic \| .* \| main: failed to fit CLI arguments/);
  }

  const hanging = await fakeTool(dir, `echo "llama_model_loader: loading model" >&2\nexec sleep 30`);
  const started = Date.now();
  const hung = await runFitParams(hanging, INPUT, { timeoutMs: 300 });
  t.ok(Date.now() - started < 10_000, 'stopped well before the sleep ends');
  t.equal(hung.ok, false);
  if (!hung.ok) t.match(hung.reason, /did not finish within 0\.3 s and was stopped; last output: llama_model_loader: loading model/);

  const controller = new AbortController();
  const pending = runFitParams(hanging, INPUT, { signal: controller.signal });
  setTimeout(() => controller.abort(), 100);
  const cancelled = await pending;
  t.equal(cancelled.ok, false);
  if (!cancelled.ok) t.match(cancelled.reason, /cancelled/);

  const missing = await runFitParams(path.join(dir, 'nowhere'), INPUT);
  t.equal(missing.ok, false);
  if (!missing.ok) t.match(missing.reason, /could not start llama-fit-params .*ENOENT/);
});
