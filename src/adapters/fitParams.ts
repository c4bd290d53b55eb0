// The build's own fit check for a chat profile without a fixed GPU split: llama.cpp's
// `llama-fit-params` takes the model and context arguments of llama-server, runs
// `llama_params_fit` and prints the CLI arguments it would use. The spec: "without a fixed split,
// the checked fit parameters of the build apply" and "total context and slots stay as stored", so
// we pass the stored context both as `-c` and as the fit's minimum (`-fitc`), our per-GPU reserve
// as the fit's margin (`-fitt`), and refuse any result that would shrink the context.
//
// What this relies on, read in ggml-org/llama.cpp:
// - tools/fit-params/fit-params.cpp: after its log, one stdout line
//   `-c <n_ctx> -ngl <n_gpu_layers>[ -ts <a>,<b>,...][ -ot <pattern>=<buffer type>,...]`; newer
//   versions wrap the -ot list in double quotes, print -ts as integers and exit 1 with
//   "failed to fit CLI arguments to free memory, exiting..." when the fit fails. Older versions
//   print the line (unchanged parameters) and exit 0 even when the fit failed, so the log is read
//   for the failure too. tools/fit-params/README.md shows the output this parser is tested on.
// - src/llama.cpp `llama_params_fit_impl`/`llama_params_fit` (moved to common/fit.cpp as
//   `common_params_fit_impl`/`common_fit_params` later): "projected to use X MiB of device memory
//   vs. Y MiB of free device memory", "successfully fit params to free device memory",
//   "failed to fit params to free device memory: <why>", and for a context given with -c:
//   "context size set by user to N -> no change" (the fit only shrinks a context left at 0).
// - common/arg.cpp: -c, -np (outside llama-server a common option), -ctk/-ctv, -fa on|off|auto,
//   -fitt MiB (a single value is broadcast to every device; newer builds also take a list) and
//   -fitc N are registered for every tool, so llama-fit-params (LLAMA_EXAMPLE_FIT_PARAMS) parses
//   them. `--kv-unified` is NOT: it is registered only for the server, perplexity, batched, bench
//   and parallel examples, and a stock llama-fit-params rejects it ("invalid argument"). It is
//   therefore left out; without it the KV cache is split into one stream per slot of
//   ctx/slots cells each (rounded up to 256), which is the same total or slightly more, so the
//   check errs on the safe side. -ngl: 'auto' is -1, 'all' is -2; include/llama.h: "a negative
//   value means all layers". -ot values are split on ',' (parse_tensor_buffer_overrides).
import { execa } from 'execa';

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
  ];
}

const ESC = String.fromCharCode(27);
const ANSI = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, 'g');

function lines(text: string): string[] {
  return text
    .replace(ANSI, '')
    .split(/\r?\n/)
    .map((line) => line.trim())
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
const PROJECTED = /projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free device memory/;
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
    result.freeMiB = Number(projected[2]);
  }
  return result;
}

/** Runs llama-fit-params for a profile; every way it can go wrong becomes `ok: false` with a reason. */
export async function runFitParams(binary: string, input: FitInput, options: RunFitOptions = {}): Promise<FitOutcome> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const result = await execa(binary, fitArgs(input), {
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
