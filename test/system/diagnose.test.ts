// Why a worker ended: a table of exits with their expected cause and message, each with a fake
// prompt in the output tail that must never reach the message or the evidence.
import t from 'tap';
import { diagnoseExit, type ExitCause, type ExitFacts } from '../../src/system/diagnose.js';

const SECRET = 'PINEAPPLE-7781';
const PROMPT = `user: my launch code is ${SECRET}, please keep it out of any memory or GPU logs`;
const PROMPT_WITH_OOM_TEXT = `Tell me why "CUDA error: out of memory" appears, secret ${SECRET}`;
const LOAD = [
  'llama_model_loader: loaded meta data with 31 key-value pairs and 579 tensors from /models/m.gguf (version GGUF V3 (latest))',
  'load_tensors: offloaded 49/49 layers to GPU',
  'load_tensors:        CUDA0 model buffer size = 17400.12 MiB',
  'llama_kv_cache:      CUDA0 KV buffer size =  1152.00 MiB',
];

const CUDA_OOM = 'CUDA error: out of memory';
const CUDA_MALLOC = '0.18.542.875 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 97809.00 MiB on device 0: cudaMalloc failed: out of memory';
const GALLOCR = 'ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1631584256';
const VULKAN = 'ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory';
const UNKNOWN_ARCH = "llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen9'";
const GGUF = "gguf_init_from_file_impl: failed to read magic";

interface Row {
  name: string;
  facts: Partial<ExitFacts> & { tail: string[] };
  cause: ExitCause;
  message: RegExp;
  evidence: string | null;
}

const UNCLEAR = /memory \(RAM or GPU\), the model file or the build, or a timeout/;

const rows: Row[] = [
  { name: 'asked to stop, SIGTERM', facts: { signal: 'SIGTERM', expected: true, tail: LOAD }, cause: 'stopped', message: /chat worker was stopped as requested/, evidence: null },
  {
    name: 'asked to stop wins over a rising OOM count',
    facts: { exitCode: 0, expected: true, oomKillsBefore: 1, oomKillsAfter: 2, tail: [] },
    cause: 'stopped',
    message: /stopped as requested/,
    evidence: null,
  },
  {
    name: 'oom_kill rose: RAM OOM',
    facts: { signal: 'SIGKILL', oomKillsBefore: 0, oomKillsAfter: 1, tail: LOAD },
    cause: 'ram_oom',
    message: /cgroup's OOM killer ended the chat worker: .*RAM/,
    evidence: 'oom_kill 0 → 1',
  },
  {
    name: 'oom_kill rose, even with a GPU line in the output',
    facts: { worker: 'image', exitCode: 137, oomKillsBefore: 4, oomKillsAfter: 6, tail: [GALLOCR] },
    cause: 'ram_oom',
    message: /OOM killer ended the image worker/,
    evidence: 'oom_kill 4 → 6',
  },
  {
    name: 'SIGKILL without a counted OOM kill',
    facts: { signal: 'SIGKILL', oomKillsBefore: 2, oomKillsAfter: 2, tail: LOAD },
    cause: 'unclear',
    message: /SIGKILL and its cgroup counted no OOM kill: a RAM OOM kill outside the cgroup .* or a manual kill are possible/,
    evidence: null,
  },
  {
    name: 'SIGKILL with unreadable counts',
    facts: { worker: 'stt', signal: 'SIGKILL', tail: [] },
    cause: 'unclear',
    message: /speech-to-text worker was ended by SIGKILL and its cgroup's OOM kill count could not be read/,
    evidence: null,
  },
  { name: 'CUDA error: out of memory', facts: { signal: 'SIGABRT', tail: [...LOAD, CUDA_OOM, '  current device: 0, in function alloc at ggml-cuda.cu:400', '  cudaMalloc(&ptr, size)'] }, cause: 'gpu_oom', message: /ran out of GPU memory/, evidence: CUDA_OOM },
  {
    name: 'cudaMalloc failed with a timestamp prefix, before the model-load error it causes',
    facts: {
      exitCode: 1,
      tail: [
        ...LOAD,
        CUDA_MALLOC,
        '0.18.542.881 E alloc_tensor_range: failed to allocate CUDA0 buffer of size 102560175104',
        '0.19.167.504 E llama_model_load: error loading model: unable to allocate CUDA0 buffer',
        '0.19.167.510 E llama_model_load_from_file_impl: failed to load model',
      ],
    },
    cause: 'gpu_oom',
    message: /chat worker ran out of GPU memory/,
    evidence: CUDA_MALLOC,
  },
  {
    name: "the enhancer's projector does not fit its language model",
    facts: {
      worker: 'enhancer',
      exitCode: 1,
      tail: [
        '0.00.018.452 E mtmd_init_from_file: error: mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)',
        'hint: you may be using wrong mmproj',
        "0.00.018.484 E srv    load_model: failed to load multimodal model, '/state/enhancers/i2i/mmproj.gguf'",
      ],
    },
    cause: 'model_error',
    message: /prompt enhancer could not load its model/,
    evidence: '0.00.018.452 E mtmd_init_from_file: error: mismatch between text model (n_embd = 64) and mmproj (n_embd = 32)',
  },
  { name: 'compute buffer reservation failed', facts: { worker: 'tts', exitCode: 1, tail: [GALLOCR] }, cause: 'gpu_oom', message: /text-to-speech worker ran out of GPU memory/, evidence: GALLOCR },
  {
    name: 'Vulkan ErrorOutOfDeviceMemory (not the per-allocation line before it)',
    facts: { worker: 'image', exitCode: 1, tail: ['ggml_vulkan: Device memory allocation of size 4831838208 failed.', VULKAN] },
    cause: 'gpu_oom',
    message: /image worker ran out of GPU memory/,
    evidence: VULKAN,
  },
  {
    name: 'a Vulkan allocation over the per-allocation cap alone is not a GPU OOM',
    facts: { worker: 'image', signal: 'SIGABRT', tail: ['ggml_vulkan: Device memory allocation of size 5368709120 failed.'] },
    cause: 'unclear',
    message: /image worker was ended by signal SIGABRT without a clear cause/,
    evidence: null,
  },
  {
    name: 'lines that merely mention memory are not evidence',
    facts: { signal: 'SIGABRT', tail: [...LOAD, 'CUDA error: an illegal memory access was encountered', 'llama_context: CUDA_Host  output buffer size = 0.58 MiB', 'srv  update_slots: not enough memory in the KV cache?'] },
    cause: 'unclear',
    message: UNCLEAR,
    evidence: null,
  },
  { name: 'a prompt quoting an OOM message is not evidence', facts: { exitCode: 134, tail: [PROMPT_WITH_OOM_TEXT] }, cause: 'unclear', message: /exited with code 134/, evidence: null },
  {
    name: 'a prompt line shaped like a log line is not evidence',
    facts: { exitCode: 1, tail: [`user: failed to load model, my key is ${SECRET}`, `Assistant: error loading model: ${SECRET}`] },
    cause: 'unclear',
    message: UNCLEAR,
    evidence: null,
  },
  { name: 'timed out', facts: { signal: 'SIGTERM', timedOut: true, tail: LOAD }, cause: 'timeout', message: /did not answer in time .*timeout/, evidence: null },
  { name: 'a clear GPU OOM beats the timeout', facts: { signal: 'SIGTERM', timedOut: true, tail: [CUDA_OOM] }, cause: 'gpu_oom', message: /GPU memory/, evidence: CUDA_OOM },
  { name: 'a timeout beats a model error', facts: { timedOut: true, exitCode: 1, tail: [UNKNOWN_ARCH] }, cause: 'timeout', message: /timeout/, evidence: null },
  {
    name: 'unknown model architecture',
    facts: { exitCode: 1, tail: [UNKNOWN_ARCH, 'llama_model_load_from_file_impl: failed to load model', "srv    load_model: failed to load model, '/models/m.gguf'"] },
    cause: 'model_error',
    message: /could not load its model: .*not supported by this build/,
    evidence: UNKNOWN_ARCH,
  },
  { name: 'a file that is not GGUF', facts: { worker: 'stt', exitCode: 1, tail: [GGUF, 'whisper_init: failed'] }, cause: 'model_error', message: /speech-to-text worker could not load its model/, evidence: GGUF },
  { name: 'a plain non-zero exit', facts: { exitCode: 1, tail: LOAD }, cause: 'unclear', message: /chat worker exited with code 1 without a clear cause in its output\. Possible causes: memory \(RAM or GPU\), the model file or the build, or a timeout\./, evidence: null },
  { name: 'an abort by signal', facts: { signal: 'SIGABRT', oomKillsBefore: 0, oomKillsAfter: 0, tail: [] }, cause: 'unclear', message: /was ended by signal SIGABRT/, evidence: null },
  { name: 'no status at all', facts: { tail: [] }, cause: 'unclear', message: /chat worker ended without a clear cause/, evidence: null },
];

for (const row of rows) {
  t.test(row.name, async (t) => {
    const { tail, ...rest } = row.facts;
    const lines = [PROMPT, ...tail, PROMPT];
    const facts: ExitFacts = {
      worker: 'chat',
      exitCode: null,
      signal: null,
      oomKillsBefore: null,
      oomKillsAfter: null,
      ...rest,
      outputTail: lines.join('\n'),
    };
    const result = diagnoseExit(facts);
    t.equal(result.cause, row.cause);
    t.match(result.message, row.message);
    t.equal(result.evidence, row.evidence);
    t.notMatch(result.message, SECRET, 'the prompt never reaches the message');
    t.notMatch(result.evidence ?? '', SECRET, 'nor the evidence');
    if (result.evidence !== null && !result.evidence.startsWith('oom_kill ')) {
      t.ok(lines.includes(result.evidence), 'the evidence is one whole line of the tail');
      t.notMatch(result.evidence, /\n/);
    }
  });
}

t.test('evidence is cut to 300 characters, and ANSI colours are dropped', async (t) => {
  const long = `llama_model_load: error loading model: ${'x'.repeat(500)}`;
  const result = diagnoseExit({ worker: 'chat', exitCode: 1, signal: null, oomKillsBefore: 0, oomKillsAfter: 0, outputTail: `${PROMPT}\n${long}` });
  t.equal(result.cause, 'model_error');
  t.equal(result.evidence?.length, 300);
  t.ok(result.evidence?.endsWith('…'));

  const coloured = diagnoseExit({ worker: 'chat', exitCode: 1, signal: null, oomKillsBefore: 0, oomKillsAfter: 0, outputTail: `\u001b[31m${CUDA_OOM}\u001b[0m\r\n` });
  t.equal(coloured.evidence, CUDA_OOM);
});
