// Why a worker process ended, in words an operator can act on. The spec: "a confirmed cgroup OOM
// kill is reported as RAM OOM. A GPU OOM is not claimed without clear evidence. An unclear process
// abort names memory, model or build, or a timeout as possible causes."
//
// A RAM OOM needs the cgroup's oom_kill counter to have risen across the worker's life (read by
// the memory adapter before and after). A GPU OOM or a model error needs one of the diagnostic
// lines ggml and llama.cpp print, matched as a whole log line (an optional timestamp/level prefix
// and a function name, then the message), never a fragment inside some other line: the output
// tail may hold prompts, so the evidence is that single line, cut to 300 characters, and the
// message never quotes the output.
//
// The texts, read in ggml-org/llama.cpp:
// - ggml/src/ggml-cuda/ggml-cuda.cu `ggml_cuda_error`: `GGML_CUDA_NAME " error: %s"` (CUDA, or
//   ROCm/MUSA builds) with cudaGetErrorString's "out of memory";
//   `ggml_backend_cuda_buffer_type_alloc_buffer`: "%s: allocating %.2f MiB on device %d:
//   cudaMalloc failed: %s".
// - ggml/src/ggml-alloc.c `ggml_gallocr_reserve_n` and `alloc_tensor_range`: "%s: failed to
//   allocate %s buffer of size %zu" (the buffer type is CUDA0, Vulkan0, ...; CUDA_Host and CPU are
//   host memory and do not count).
// - ggml/src/ggml-vulkan/ggml-vulkan.cpp `ggml_vk_create_buffer_device`: "ggml_vulkan: Device
//   memory allocation of size N failed." then "ggml_vulkan: <vk::SystemError what()>", e.g.
//   "vk::Device::allocateMemory: ErrorOutOfDeviceMemory". Only the second counts: the first is
//   printed for any vk::SystemError (a lost device, host memory, a driver's per-allocation cap).
// - src/llama.cpp `llama_model_load`: "%s: error loading model: %s" (e.g. "unknown model
//   architecture: 'x'", or "unable to allocate CUDA0 buffer", which is a GPU OOM);
//   `llama_model_load_from_file_impl`: "%s: failed to load model"; ggml/src/gguf.cpp
//   `gguf_init_from_file_impl`: its errors about the file.
import type { WorkerStatus } from './workers.js';

export type WorkerKind = WorkerStatus['kind'];

export interface ExitFacts {
  worker: WorkerKind;
  exitCode: number | null;
  signal: string | null;
  /** The cgroup's oom_kill counter before the worker started and after it ended; null when unreadable. */
  oomKillsBefore: number | null;
  oomKillsAfter: number | null;
  /** The last lines of the worker's stdout and stderr. */
  outputTail: string;
  /** We stopped it because it did not answer in time. */
  timedOut?: boolean;
  /** We asked it to stop. */
  expected?: boolean;
}

export type ExitCause = 'stopped' | 'ram_oom' | 'gpu_oom' | 'timeout' | 'model_error' | 'unclear';

export interface ExitDiagnosis {
  cause: ExitCause;
  message: string;
  /** The one fact the cause rests on: `oom_kill x → y`, or the single diagnostic line. */
  evidence: string | null;
}

const EVIDENCE_MAX = 300;

const WORKER_NAMES: Record<WorkerKind, string> = {
  chat: 'chat worker',
  image: 'image worker',
  tts: 'text-to-speech worker',
  stt: 'speech-to-text worker',
  enhancer: 'prompt enhancer',
};

/** An optional llama.cpp log prefix (`0.02.468.179 E `, the server's `srv  `/`cmn  ` tags). */
const PREFIX = String.raw`^(?:\d+(?:\.\d+)+ [TDIWE] )?(?:(?:srv|cmn|slot|res|que)\s+)?`;
const line = (body: string) => new RegExp(`${PREFIX}${body}\\s*$`);
const DEVICE_BUFFER = String.raw`(?:CUDA|ROCm|MUSA|Vulkan)\d+ buffer`;
/** A C function name as ggml and llama.cpp log it (`__func__`): snake_case, so never `user:` or `Assistant:`. */
const FUNC = String.raw`[a-z][a-z0-9]*_\w*:`;

const GPU_OOM = [
  line(String.raw`(?:CUDA|ROCm|MUSA) error: out of memory`),
  line(String.raw`${FUNC} allocating [\d.]+ MiB on device \d+: cudaMalloc failed: out of memory`),
  line(String.raw`${FUNC} failed to allocate ${DEVICE_BUFFER} of size \d+`),
  line(String.raw`${FUNC} error loading model: unable to allocate ${DEVICE_BUFFER}`),
  line(String.raw`ggml_vulkan: vk::\w+(?:::\w+)*: ErrorOutOfDeviceMemory`),
  line(String.raw`what\(\):\s+vk::\w+(?:::\w+)*: ErrorOutOfDeviceMemory`),
];

const MODEL_ERROR = [
  line(String.raw`${FUNC} error loading model: .+`),
  line(String.raw`${FUNC} failed to load model\b.*`),
  // The enhancer's projector (--mmproj) that does not fit its language model, or cannot be read.
  line(String.raw`${FUNC} error: mismatch between text model .+`),
  line(String.raw`${FUNC} failed to load multimodal model\b.*`),
  line(String.raw`gguf_init_from_file\w*: .+`),
  line(String.raw`${FUNC} .*unknown model architecture: '[^']*'.*`),
];

const ESC = String.fromCharCode(27);
const ANSI = new RegExp(`${ESC}\\[[0-9;?]*[A-Za-z]`, 'g');

function clip(text: string): string {
  return text.length > EVIDENCE_MAX ? `${text.slice(0, EVIDENCE_MAX - 1)}…` : text;
}

/** The first whole line of the tail that one of the patterns matches, clipped. */
function findLine(tail: string, patterns: readonly RegExp[]): string | null {
  for (const raw of tail.replace(ANSI, '').split(/\r?\n/)) {
    const text = raw.trim();
    if (text !== '' && patterns.some((pattern) => pattern.test(text))) return clip(text);
  }
  return null;
}

function howItEnded(facts: ExitFacts): string {
  if (facts.signal) return `was ended by signal ${facts.signal}`;
  if (facts.exitCode !== null) return `exited with code ${facts.exitCode}`;
  return 'ended';
}

/** Classifies a worker's end; pure, so the caller gathers the facts (oom_kill counts, tail). */
export function diagnoseExit(facts: ExitFacts): ExitDiagnosis {
  const name = WORKER_NAMES[facts.worker];
  if (facts.expected) return { cause: 'stopped', message: `The ${name} was stopped as requested.`, evidence: null };

  const { oomKillsBefore: before, oomKillsAfter: after } = facts;
  const countsKnown = before !== null && after !== null;
  if (countsKnown && after > before) {
    return {
      cause: 'ram_oom',
      message: `The cgroup's OOM killer ended the ${name}: the service ran out of RAM (its memory limit).`,
      evidence: `oom_kill ${before} → ${after}`,
    };
  }

  const gpuLine = findLine(facts.outputTail, GPU_OOM);
  if (gpuLine) {
    return { cause: 'gpu_oom', message: `The ${name} ran out of GPU memory: the GPU could not allocate what the model needs.`, evidence: gpuLine };
  }

  if (facts.timedOut) {
    return { cause: 'timeout', message: `The ${name} did not answer in time and was stopped (timeout).`, evidence: null };
  }

  const modelLine = findLine(facts.outputTail, MODEL_ERROR);
  if (modelLine) {
    return {
      cause: 'model_error',
      message: `The ${name} could not load its model: the file is missing, damaged or not supported by this build.`,
      evidence: modelLine,
    };
  }

  const causes = 'Possible causes: memory (RAM or GPU), the model file or the build, or a timeout.';
  if (facts.signal === 'SIGKILL') {
    const counted = countsKnown ? 'its cgroup counted no OOM kill' : "its cgroup's OOM kill count could not be read";
    return {
      cause: 'unclear',
      message: `The ${name} was ended by SIGKILL and ${counted}: a RAM OOM kill outside the cgroup (by the host) or a manual kill are possible. ${causes}`,
      evidence: null,
    };
  }
  return { cause: 'unclear', message: `The ${name} ${howItEnded(facts)} without a clear cause in its output. ${causes}`, evidence: null };
}
