// The build's fit check: the argv we give llama-fit-params, and its output parsed: what the real
// tool that the set-up builds prints (run here on a generated model, and kept as captured in
// test/fixtures/fit-params/), the older build of tools/fit-params/README.md, two GPUs in this
// build's format, a logged failure. Fake tools remain only to inject what the real one cannot be
// made to do on demand: a hang, a cancel, a run whose log is lost, a missing program.
import { chmod, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { execa } from 'execa';
import t from 'tap';
import { fitArgs, parseFitOutput, runFitParams, type FitInput } from '../../src/adapters/fitParams.js';
import { tempDir } from '../helpers/build.js';
import { llamaFitParamsPath, tinyModelIn } from '../helpers/llama.js';
import { alive, until } from '../helpers/until.js';

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

// Two CUDA devices in the format of this build's common/fit.cpp and fit-params.cpp (the log
// prefix, TRACE lines under -lv 4, integer -ts). No CUDA build is at hand to capture it, so the
// numbers are made up; every line's text is the code's.
const TWO_GPU_STDERR = `0.00.000.412 I common_params_fit_impl: getting device memory data for initial parameters:
0.00.310.225 I common_params_fit_impl: projected memory use with initial parameters [MiB]:
0.00.310.231 I common_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090):  24080 total,  29012 used,  -5290 free vs. target of   1536
0.00.310.233 I common_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 3090):  24124 total,    880 used,  22950 free vs. target of   1536
0.00.310.240 I common_params_fit_impl: projected to use 29892 MiB of device memory vs. 47552 MiB of free device memory
0.00.310.244 I common_params_fit_impl: cannot meet free memory targets on all devices, need to use 1000 MiB less in total
0.00.310.246 I common_params_fit_impl: context size set by user to 16384 -> no change
0.00.911.530 I common_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090): 36 layers ( 0 overflowing),  21310 MiB used,   2412 MiB free
0.00.911.533 I common_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 3090): 13 layers ( 0 overflowing),   8580 MiB used,  15250 MiB free
0.00.911.540 I common_fit_params: successfully fit params to free device memory
0.00.911.541 I common_fit_params: fitting params to free memory took 0.91 seconds
0.00.911.542 I llama_fit_params: printing fitted CLI arguments to stdout...
`;

// An older build that logs the failure and still prints the unchanged parameters, exit 0.
const FAILED_STDERR = `llama_params_fit_impl: projected to use 9240 MiB of device memory vs. 7802 MiB of free device memory
llama_params_fit_impl: cannot meet free memory target of 1024 MiB, need to reduce device memory by 2462 MiB
llama_params_fit_impl: context size set by user to 8192 -> no change
llama_params_fit: failed to fit params to free device memory: model_params::tensor_buft_overrides already set by user, abort
llama_params_fit: fitting params to free memory took 0.41 seconds
Printing fitted CLI arguments to stdout...
`;

/** A run of the real llama-fit-params as test/fixtures/fit-params/ keeps it (execa's strings: the final newline stripped). */
interface Captured {
  tool: string;
  args: string[];
  exitCode: number;
  stdout: string;
  stderr: string;
}

async function captured(name: 'fitted' | 'no-room' | 'missing-model'): Promise<Captured> {
  return JSON.parse(await readFile(path.join(import.meta.dirname, '..', 'fixtures', 'fit-params', `${name}.json`), 'utf8')) as Captured;
}

/** The fixtures' input: a generated tiny model (writeTinyModel's defaults), 4096 tokens for two slots. */
const TINY: Omit<FitInput, 'model'> = { context: 4096, slots: 2, reserveMiB: 1024, kv: { typeK: 'q4_0', typeV: 'q4_0' } };

/** A log as it compares across runs and hosts: numbers (times, host memory) and the padding around them masked. */
const shape = (stderr: string) =>
  stderr
    .split('\n')
    .map((line) => line.replace(/\d+/g, 'N').replace(/\s+/g, ' ').trim())
    .filter((line) => line !== '');

t.test('fitArgs: the stored context as -c and as the fit minimum, the reserve as the margin, the fit log at -lv 4', async (t) => {
  t.same(fitArgs(INPUT), [
    '-m', '/models/qwen3-30b-a3b.gguf', '-c', '8192', '-np', '2', '-ctk', 'q4_0', '-ctv', 'q4_0', '-fa', 'on', '-fitt', '1536', '-fitc', '8192', '-lv', '4',
  ]);
  t.notOk(fitArgs(INPUT).includes('--kv-unified'), 'not a llama-fit-params option (the real tool refuses it, below)');
  t.throws(() => fitArgs({ ...INPUT, context: 0 }), RangeError);
  t.throws(() => fitArgs({ ...INPUT, reserveMiB: 1.5 }), RangeError);
});

t.test('what this build prints, as captured: the fitted line on stdout, the prefixed fit log on stderr', async (t) => {
  const fitted = await captured('fitted');
  t.same(fitted.args, fitArgs({ ...TINY, model: '<model>' }), 'captured with the argv of fitArgs');
  t.equal(fitted.exitCode, 0);
  t.equal(fitted.stdout, '-c 4096 -ngl -1', 'a build without a GPU backend keeps -ngl -1 (all layers)');
  const result = parseFitOutput(fitted.stdout, fitted.stderr, 4096);
  t.same(result, {
    ok: true,
    gpuLayers: 'all',
    tensorSplit: null,
    overrides: [],
    context: 4096,
    projectedMiB: 5,
    freeMiB: 24105,
    projectedOn: 'host',
    extraArgs: [],
    log: [
      'common_params_fit_impl: getting device memory data for initial parameters:',
      'common_params_fit_impl: projected to use 5 MiB of host memory vs. 24105 MiB of total host memory',
      'common_params_fit_impl: will leave 24100 >= 1024 MiB of system memory, no changes needed',
      'common_fit_params: successfully fit params to free device memory',
      'common_fit_params: fitting params to free memory took 0.01 seconds',
    ],
  }, 'the log prefix (time, level letter) is stripped; the projection was on host memory');

  const noRoom = await captured('no-room');
  t.equal(noRoom.exitCode, 1);
  t.equal(noRoom.stdout, '', 'a failed fit prints no line');
  const refused = parseFitOutput(noRoom.stdout, noRoom.stderr, 4096);
  t.equal(refused.ok, false);
  if (!refused.ok) t.match(refused.reason, /could not fit the model to free device memory: common_fit_params: failed to fit params to free device memory: was unable to fit model into system memory by reducing context, abort$/);
  const missing = await captured('missing-model');
  const unloadable = parseFitOutput(missing.stdout, missing.stderr, 4096);
  t.equal(unloadable.ok, false);
  if (!unloadable.ok) t.match(unloadable.reason, /common_fit_params: encountered an error while trying to fit params to free device memory: failed to load model/);
});

t.test('the older build of the README: layers, unquoted CPU overrides, projection and the fit log', async (t) => {
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
  t.equal(result.projectedOn, 'device');
  t.same(result.extraArgs, []);
  t.equal(result.log.length, 8, 'only the fit lines, not the CUDA init or build lines');
  t.match(result.log.at(-2), /successfully fit params/);

  const oneStream = parseFitOutput(README_STDERR + README_STDOUT, '', 4096);
  t.same(oneStream, result, 'the log on stdout before the fitted line reads the same');
});

t.test('two GPUs in this build’s format: the -ts split, a quoted -ot, -ngl -1 means all; unknown arguments kept', async (t) => {
  const result = parseFitOutput('-c 16384 -ngl 49 -ts 36,13\n', TWO_GPU_STDERR, 16384);
  t.ok(result.ok);
  if (!result.ok) return;
  t.same(result.tensorSplit, [36, 13]);
  t.equal(result.gpuLayers, 49);
  t.same(result.overrides, []);
  t.equal(result.projectedMiB, 29892, 'the total projection, not a per-device line');
  t.equal(result.freeMiB, 47552);
  t.equal(result.projectedOn, 'device');
  t.match(result.log, ['common_params_fit_impl: getting device memory data for initial parameters:'], 'the prefix is stripped');

  const quoted = parseFitOutput('-c 16384 -ngl -1 -ts 3,1 -ot "blk\\.40\\.ffn_down.*=CPU,blk\\.41\\.ffn_down.*=CUDA1"\n', '', 16384);
  t.ok(quoted.ok);
  if (!quoted.ok) return;
  t.equal(quoted.gpuLayers, 'all');
  t.same(quoted.tensorSplit, [3, 1]);
  t.same(quoted.overrides, ['blk\\.40\\.ffn_down.*=CPU', 'blk\\.41\\.ffn_down.*=CUDA1']);
  t.same(quoted.extraArgs, []);
  t.equal(quoted.projectedMiB, undefined, 'no log, no projection');
  // No build prints more than -c, -ngl, -ts and -ot; a later one might, and it is kept, not lost.
  const later = parseFitOutput('-c 16384 -ngl 20 -sm row --no-op-offload\n', '', 16384);
  t.match(later, { ok: true, gpuLayers: 20, extraArgs: ['-sm', 'row', '--no-op-offload'] });
});

t.test('a logged fit failure is a failure even with a printed line and exit 0 (older builds)', async (t) => {
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

t.test('the real llama-fit-params of the set-up, on a generated model: what it prints is what we read', async (t) => {
  const tool = await llamaFitParamsPath();
  const dir = await tempDir(t);
  const input: FitInput = { ...TINY, model: await tinyModelIn(dir) };
  const raw = await execa(tool, fitArgs(input), { reject: false, stdin: 'ignore' });
  t.equal(raw.exitCode, 0, `it accepts every argument of fitArgs: ${raw.stderr}`);
  t.match(raw.stdout, /^-c \d+ -ngl -?\d+(?: -ts \S+)?(?: -ot "[^"]+")?$/, 'one line in the format of fit-params.cpp');
  const fixture = await captured('fitted');
  t.equal(raw.stdout, fixture.stdout, 'the same line as captured in test/fixtures/fit-params/fitted.json');
  t.same(shape(raw.stderr), shape(fixture.stderr), 'the same log as captured, numbers aside (update the fixture when the build changes)');

  const result = await runFitParams(tool, input);
  const printed = /^-c (\d+) -ngl (-?\d+)/.exec(raw.stdout);
  t.ok(printed, raw.stdout);
  t.match(result, { ok: true, context: Number(printed?.[1]), gpuLayers: Number(printed?.[2]) < 0 ? 'all' : Number(printed?.[2]), tensorSplit: null, overrides: [], extraArgs: [] });
  t.equal(result.ok && result.context, 4096, 'the stored context for both slots, not shrunk');
  t.match(result, { projectedOn: 'host', projectedMiB: Number(/projected to use (\d+) MiB/.exec(raw.stderr)?.[1]) }, 'a build without a GPU backend projects on host memory');

  // The failure it really gives: a margin no host has. Its log may be lost (see fitParams.ts), the exit code never.
  const refused = await runFitParams(tool, { ...input, reserveMiB: 100_000_000 });
  t.equal(refused.ok, false);
  if (!refused.ok) {
    t.match(refused.reason, /^llama-fit-params exited with code 1(?:: common_fit_params: failed to fit params to free device memory: was unable to fit model into system memory by reducing context, abort)?;/);
  }
  const unified = await execa(tool, [...fitArgs(input), '--kv-unified'], { reject: false, stdin: 'ignore' });
  t.equal(unified.exitCode, 1, '--kv-unified is not an argument of llama-fit-params');
  t.match(unified.stderr, /invalid argument: --kv-unified/);
});

async function fakeTool(dir: string, name: string, body: string): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, 0o755);
  return file;
}

/** A fake that replays a captured run: its stderr, its stdout, its exit code. */
async function replay(dir: string, name: string, run: Pick<Captured, 'stdout' | 'stderr' | 'exitCode'>): Promise<string> {
  const stderr = path.join(dir, `${name}.stderr`);
  const stdout = path.join(dir, `${name}.stdout`);
  await writeFile(stderr, run.stderr);
  await writeFile(stdout, run.stdout);
  return fakeTool(dir, name, `cat '${stderr}' >&2\ncat '${stdout}'\nexit ${run.exitCode}`);
}

t.test('error exits, as the real tool gives them, become failures naming why', async (t) => {
  const dir = await tempDir(t);
  const noRoom = await runFitParams(await replay(dir, 'no-room', await captured('no-room')), INPUT);
  t.equal(noRoom.ok, false);
  if (!noRoom.ok) {
    t.match(noRoom.reason, /^llama-fit-params exited with code 1: common_fit_params: failed to fit params to free device memory: was unable to fit model/);
    t.match(noRoom.reason, /last output: .* \| llama_fit_params: failed to fit CLI arguments to free memory, exiting\.\.\.$/);
  }
  const missing = await runFitParams(await replay(dir, 'missing', await captured('missing-model')), INPUT);
  t.equal(missing.ok, false);
  if (!missing.ok) t.match(missing.reason, /^llama-fit-params exited with code 1: common_fit_params: encountered an error .*failed to load model/);
  const lost = await runFitParams(await replay(dir, 'lost', { stdout: '', stderr: '', exitCode: 1 }), INPUT);
  t.same(lost, { ok: false, reason: 'llama-fit-params exited with code 1; it printed nothing on stderr' }, 'a failing run whose log the tool lost');
});

t.test('a hang is stopped at the time limit; a cancel stops the tool and keeps its last output', async (t) => {
  const dir = await tempDir(t);
  const silent = await fakeTool(dir, 'silent', 'exec sleep 30');
  const hung = await runFitParams(silent, INPUT, { timeoutMs: 200 });
  t.same(hung, { ok: false, reason: 'llama-fit-params did not finish within 0.2 s and was stopped; it printed nothing on stderr' });

  const pidFile = path.join(dir, 'pid');
  const loading = await fakeTool(dir, 'loading', `echo "0.00.001.000 I common_params_fit_impl: getting device memory data for initial parameters:" >&2\necho $$ > '${pidFile}'\nexec sleep 30`);
  const controller = new AbortController();
  const pending = runFitParams(loading, INPUT, { signal: controller.signal });
  const pid = await until('the tool to start', async () => {
    const text = await readFile(pidFile, 'utf8').catch(() => '');
    return text.endsWith('\n') ? Number(text) : undefined;
  });
  controller.abort();
  const cancelled = await pending;
  t.same(cancelled, { ok: false, reason: 'the fit check was cancelled; last output: common_params_fit_impl: getting device memory data for initial parameters:' });
  await until('the cancelled tool to end', async () => (alive(pid) ? undefined : true));

  const missing = await runFitParams(path.join(dir, 'nowhere'), INPUT);
  t.equal(missing.ok, false);
  if (!missing.ok) t.match(missing.reason, /could not start llama-fit-params .*ENOENT/);
});
