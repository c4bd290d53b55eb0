// The build's own fit check for a chat profile without a fixed GPU split: llama.cpp's
// `llama-fit-params` takes the model and context arguments of llama-server, runs
// `llama_params_fit` and prints the CLI arguments it would use. The spec: "without a fixed split,
// the checked fit parameters of the build apply" and "total context and slots stay as stored", so
// we pass the stored context both as `-c` and as the fit's minimum (`-fitc`), our per-GPU reserve
// as the fit's margin (`-fitt`), and refuse any result that would shrink the context.
//
// What this relies on, read in ggml-org/llama.cpp and checked against the build the set-up makes
// (scripts/build-llama.sh: node-llama-cpp 3.22.1's llama.cpp, v0.5.0, commit de3ff81, whose
// output test/fixtures/fit-params/ holds as captured and test/adapters/fitParams.test.ts runs):
// - tools/fit-params/fit-params.cpp: one stdout line
//   `-c <n_ctx> -ngl <n_gpu_layers>[ -ts <a>,<b>,...][ -ot "<pattern>=<buffer type>,..."]`, the
//   -ts values printed as integers and the -ot list in double quotes; the log goes to stderr with
//   common/log.cpp's prefix (`0.00.018.579 I `: minutes.seconds.ms.us and a level letter), which
//   is stripped. A fit that fails exits 1 with "llama_fit_params: failed to fit CLI arguments to
//   free memory, exiting..." after "common_fit_params: failed to fit params to free device
//   memory: <why>" (or "encountered an error while trying to fit params ...: failed to load
//   model" for a missing model). The log is written by a thread that `exit(1)` does not wait
//   for: now and then a failing run prints nothing at all, or half a line; the exit code is what
//   counts. On a build without a GPU backend the fit runs on host memory ("projected to use N MiB
//   of host memory vs. M MiB of total host memory") and keeps `-ngl -1`.
// - Older builds (llama_params_fit in src/llama.cpp; tools/fit-params/README.md shows their
//   output, which the tests keep as a documented variant) log at INFO with no prefix, print the -ot
//   list unquoted, and print the line (unchanged parameters) with exit 0 even when the fit failed,
//   so the log is read for the failure too.
// - common/fit.cpp `common_params_fit_impl` logs its projection ("projected to use X MiB of device
//   memory vs. Y MiB of free device memory") and "context size set by user to N -> no change" (the
//   fit only shrinks a context left at 0) at TRACE level, which this build prints only with
//   `-lv 4`: we pass it, so that the projection reaches the plan.
// - common/arg.cpp: -c, -np (outside llama-server a common option), -ctk/-ctv, -fa on|off|auto,
//   -lv N, -fitt MiB (a single value is broadcast to every device) and -fitc N are registered for
//   llama-fit-params (LLAMA_EXAMPLE_FIT_PARAMS). `--kv-unified` is NOT: it is registered only for
//   the server, perplexity, batched, bench and parallel examples, and this llama-fit-params exits 1
//   with "error: invalid argument: --kv-unified". It is therefore left out; without it the KV
//   cache is split into one stream per slot of ctx/slots cells each (rounded up to 256), which is
//   the same total or slightly more, so the check errs on the safe side. -ngl: -1 is "auto" to the
//   argument parser, and include/llama.h reads any negative value as "all layers"; 'auto' and
//   'all' are accepted as words too. -ot values are split on ',' (parse_tensor_buffer_overrides).
import { diesWithService, startWorker } from './parentDeath.js';

export interface FitInput {
  /** Path of the GGUF model (its first shard for a split model). */
  model: string;
  /** The stored total context (all slots together). */
  context: number;
  slots: number;
  /** Free memory the fit must leave on each GPU, in MiB. */
  reserveMiB: number;
  kv: { typeK: 'q4_0'; typeV: 'q4_0' };
}

export interface FitResult {
  ok: true;
  /** `-ngl`: a layer count, 'all' (a negative value: every layer), or null when the line had none. */
  gpuLayers: number | 'all' | null;
  /** `-ts` proportions per device, or null when the build put everything on one device. */
  tensorSplit: number[] | null;
  /** The `-ot` values, one `pattern=buffer type` each, in order. */
  overrides: string[];
  /** The stored total context, which the fit confirmed (it never rewrites it). */
  context: number;
  /** The projection for the requested parameters before the fit changed anything, when logged. */
  projectedMiB?: number;
  freeMiB?: number;
  /**
   * What that projection was made on: `device` memory (the build saw GPUs), or `host` memory (a
   * build without a GPU backend: its answer says nothing about the GPUs), when logged.
   */
  projectedOn?: 'device' | 'host';
  /** Arguments of the fitted line this parser does not know, verbatim and in order. */
  extraArgs: string[];
  /** The fit's own log lines. */
  log: string[];
}

export interface FitFailure {
  ok: false;
  reason: string;
}

export type FitOutcome = FitResult | FitFailure;

export interface RunFitOptions {
  /** Default 120 000 ms: the fit loads the model's metadata several times. */
  timeoutMs?: number;
  /** The complete environment of the tool (not merged with ours) when given. */
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
}

const DEFAULT_TIMEOUT_MS = 120_000;
const LINE_MAX = 300;
const TAIL_LINES = 5;

/** The argv for llama-fit-params (see the header for why `--kv-unified` is not among them). */
export function fitArgs(input: FitInput): string[] {
  for (const [name, value, min] of [
    ['context', input.context, 1],
    ['slots', input.slots, 1],
    ['reserveMiB', input.reserveMiB, 0],
  ] as const) {
    if (!Number.isInteger(value) || value < min) throw new RangeError(`fitArgs: ${name} must be an integer >= ${min}, got ${value}`);
  }
  const context = String(input.context);
  return [
    '-m', input.model,
    '-c', context,
    '-np', String(input.slots),
    '-ctk', input.kv.typeK,
    '-ctv', input.kv.typeV,
    '-fa', 'on',
    '-fitt', String(input.reserveMiB),
    '-fitc', context,
    '-lv', '4',
  ];
}

const ESC = String.fromCharCode(27);
const ANSI = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, 'g');

/** common/log.cpp's prefix of a log line: the time since start (minutes.seconds.ms.us) and the level letter. */
const LOG_PREFIX = /^\d+\.\d{2}\.\d{3}\.\d{3}(?: [IWED](?= |$))?/;

function lines(text: string): string[] {
  return text
    .replace(ANSI, '')
    .split(/\r?\n/)
    .map((line) => line.trim().replace(LOG_PREFIX, '').trim())
    .filter((line) => line !== '');
}

function clip(line: string): string {
  return line.length > LINE_MAX ? `${line.slice(0, LINE_MAX - 1)}…` : line;
}

/** The last lines of the tool's stderr, for a reason an operator can act on. */
function lastLines(stderr: string): string {
  const tail = lines(stderr).slice(-TAIL_LINES).map(clip);
  return tail.length > 0 ? `; last output: ${tail.join(' | ')}` : '; it printed nothing on stderr';
}

const FIT_LOG = /(?:llama_params_fit|common_params_fit|common_fit_params)\w*:|failed to fit /;
const FIT_FAILED = /failed to fit params to free device memory|error while trying to fit params|failed to fit CLI arguments/;
const PROJECTED = /projected to use (\d+) MiB of (device|host) memory vs\. (\d+) MiB of (?:free device|total host) memory/;
const FITTED_LINE = /^-c\s+\d+(?:\s|$)/;
const FLAG = /^--?[A-Za-z]/;

/** Splits the fitted line like a shell would for it: whitespace outside double quotes; backslashes stay. */
function tokenize(line: string): string[] {
  const tokens: string[] = [];
  let current = '';
  let quoted = false;
  let started = false;
  for (const char of line) {
    if (char === '"') {
      quoted = !quoted;
      started = true;
    } else if (!quoted && /\s/.test(char)) {
      if (started) tokens.push(current);
      current = '';
      started = false;
    } else {
      current += char;
      started = true;
    }
  }
  if (started) tokens.push(current);
  return tokens;
}

function readGpuLayers(value: string): number | 'all' | null | undefined {
  if (value === 'all') return 'all';
  if (value === 'auto') return null;
  if (!/^-?\d+$/.test(value)) return undefined;
  const layers = Number(value);
  return layers < 0 ? 'all' : layers;
}

function readSplit(value: string): number[] | undefined {
  const parts = value.split(/[,/]+/).filter((part) => part !== '');
  const split = parts.map(Number);
  return split.length > 0 && split.every((n) => Number.isFinite(n) && n >= 0) ? split : undefined;
}

/**
 * Reads llama-fit-params output: the last stdout line starting with `-c N`, and the fit's log
 * lines from either stream. A logged fit failure, a missing line or a context below the stored one
 * is a failure.
 */
export function parseFitOutput(stdout: string, stderr: string, storedContext: number): FitOutcome {
  const all = [...lines(stderr), ...lines(stdout)];
  const log = all.filter((line) => FIT_LOG.test(line));
  const failed = log.find((line) => FIT_FAILED.test(line));
  if (failed) return { ok: false, reason: `the build could not fit the model to free device memory: ${clip(failed)}` };
  const fitted = lines(stdout).filter((line) => FITTED_LINE.test(line)).at(-1);
  if (!fitted) return { ok: false, reason: `llama-fit-params printed no fitted arguments${lastLines(stderr)}` };

  const tokens = tokenize(fitted);
  const unreadable = (flag: string, value: string | undefined) =>
    ({ ok: false, reason: `could not read the fitted arguments: ${flag} ${value ?? '(no value)'} in "${clip(fitted)}"` }) as const;
  let context: number | undefined;
  let gpuLayers: number | 'all' | null = null;
  let tensorSplit: number[] | null = null;
  const overrides: string[] = [];
  const extraArgs: string[] = [];
  for (let i = 0; i < tokens.length; ) {
    const flag = tokens[i] as string;
    const value = tokens[i + 1];
    if (flag === '-c' || flag === '-ngl' || flag === '-ts' || flag === '-ot') {
      if (value === undefined) return unreadable(flag, value);
      if (flag === '-c') {
        if (!/^\d+$/.test(value)) return unreadable(flag, value);
        context = Number(value);
      } else if (flag === '-ngl') {
        const layers = readGpuLayers(value);
        if (layers === undefined) return unreadable(flag, value);
        gpuLayers = layers;
      } else if (flag === '-ts') {
        const split = readSplit(value);
        if (!split) return unreadable(flag, value);
        tensorSplit = split;
      } else {
        const items = value.split(',').filter((item) => item !== '');
        if (items.length === 0 || !items.every((item) => item.includes('='))) return unreadable(flag, value);
        overrides.push(...items);
      }
      i += 2;
    } else {
      extraArgs.push(flag);
      i += 1;
      while (i < tokens.length && !FLAG.test(tokens[i] as string)) extraArgs.push(tokens[i++] as string);
    }
  }
  if (context === undefined) return unreadable('-c', undefined);
  if (context < storedContext) {
    return { ok: false, reason: `the build would shrink the context from ${storedContext} to ${context}: it does not fit` };
  }

  const result: FitResult = { ok: true, gpuLayers, tensorSplit, overrides, context: storedContext, extraArgs, log };
  const projected = log.map((line) => PROJECTED.exec(line)).find((match) => match !== null);
  if (projected) {
    result.projectedMiB = Number(projected[1]);
    result.freeMiB = Number(projected[3]);
    result.projectedOn = projected[2] === 'host' ? 'host' : 'device';
  }
  return result;
}

/** Runs llama-fit-params for a profile; every way it can go wrong becomes `ok: false` with a reason. */
export async function runFitParams(binary: string, input: FitInput, options: RunFitOptions = {}): Promise<FitOutcome> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  // It loads the model's tensors onto the GPUs: bound to the service's life like a worker.
  const command = await diesWithService(binary, fitArgs(input), options.env ?? process.env);
  const result = await startWorker(command, {
    reject: false,
    timeout: timeoutMs,
    stdin: 'ignore',
    ...(options.signal ? { cancelSignal: options.signal } : {}),
    ...(options.env ? { env: options.env, extendEnv: false } : {}),
  });
  const stdout = typeof result.stdout === 'string' ? result.stdout : '';
  const stderr = typeof result.stderr === 'string' ? result.stderr : '';
  if (result.isCanceled) return { ok: false, reason: `the fit check was cancelled${lastLines(stderr)}` };
  if (result.timedOut) {
    return { ok: false, reason: `llama-fit-params did not finish within ${timeoutMs / 1000} s and was stopped${lastLines(stderr)}` };
  }
  if (result.exitCode === undefined && result.signal === undefined) {
    return { ok: false, reason: `could not start llama-fit-params (${binary}): ${result.code ?? result.shortMessage}` };
  }
  if (result.signal !== undefined) return { ok: false, reason: `llama-fit-params was ended by ${result.signal}${lastLines(stderr)}` };
  if (result.exitCode !== 0) {
    const failure = lines(`${stderr}\n${stdout}`).find((line) => FIT_FAILED.test(line));
    const why = failure ? `: ${clip(failure)}` : '';
    return { ok: false, reason: `llama-fit-params exited with code ${result.exitCode}${why}${lastLines(stderr)}` };
  }
  return parseFitOutput(stdout, stderr, input.context);
}
