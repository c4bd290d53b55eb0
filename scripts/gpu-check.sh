#!/bin/sh
# The GPU check: one command that builds llama-server for CUDA on an NVIDIA machine and measures
# the service there against nvidia-smi and against llama-server run by hand. It is also the
# operator's smoke test after installing on a GPU box. docs/gpu.md says how to run it and what it
# found.
#
#   sh scripts/gpu-pack.sh                     here, once: fills .gpu/ (Node, the built service and
#                                              its production packages, the llama.cpp source)
#   sh scripts/gpu-check.sh [OUT]              on the GPU machine (no network needed)
#   sh scripts/gpu-check.sh --dry-run [OUT]    the same steps on a machine without a GPU
#
# It writes into OUT (default $OUT, else ./gpu-out), in order:
#   1-environment.txt  nvidia-smi, its query output, nvcc, cores, memory, OS, tools
#   2-build.txt        the CUDA build of llama-server and llama-fit-params through
#                      scripts/build-llama.sh (one architecture, Ninja), timed, with its output
#   3-probe.json .. 6-foreign.json, service.log   the service's steps (bench/gpuCheck.ts)
#   7-summary.txt      every figure, one line per step, and `result: PASS` or `result: FAIL`
# and exits 0 only when every step passed.
#
# --dry-run: the CPU build in place of the CUDA one (from the pack's source, through the same
# script: the cache makes it instant once built, and a configure run proves the packed source
# complete), the nvidia-smi stand-in test/fixtures/fake-nvidia-smi.mjs on PATH with one simulated
# H100, and a small model. The test suite runs it (test/cli/gpuCheck.test.ts).
#
# Environment: SERVICE_DECK_CUDA_ARCHITECTURES (default 90, the H100), SERVICE_DECK_GPU_CHECK_LIMIT_S
# (the whole run's budget, default 540 s), SERVICE_DECK_GPU_CHECK_SERVICE_S (what of it the build
# leaves to the service steps, default 180 s). A build that does not finish in its share stops, and
# the same command run again resumes it: the build folder is kept in .gpu-cache/ beside the cache.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/lib/xz.sh

dry=0
if [ "${1:-}" = --dry-run ]; then
  dry=1
  shift
fi
out=${1:-${OUT:-$root/gpu-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
pack=$root/.gpu
limit_s=${SERVICE_DECK_GPU_CHECK_LIMIT_S:-540}
# What the service steps need after the build: the model, the service, the A/B, the speech worker.
service_s=${SERVICE_DECK_GPU_CHECK_SERVICE_S:-180}
started=$(date +%s)
summary=$out/7-summary.txt
: >"$summary"
failed=0

say() { printf 'gpu-check: %s\n' "$*"; }
note() {
  printf '%s\n' "$*" >>"$summary"
  say "$*"
}
failure() {
  failed=1
  note "$*"
}
seconds() { echo $(($(date +%s) - started)); }

[ -f "$pack/app.tar.xz" ] && [ -f "$pack/node.xz" ] && [ -f "$pack/llama-src.tar.xz" ] ||
  { say "no pack in $pack: run sh scripts/gpu-pack.sh first"; exit 1; }
[ "$dry" = 1 ] && note "dry run: CPU build, nvidia-smi stand-in, small model"

# The pack: its Node (whatever the machine has), the built service and its production packages.
mkdir -p "$pack/bin"
if [ ! -x "$pack/bin/node" ] || [ "$pack/node.xz" -nt "$pack/bin/node" ]; then
  unxz_cat "$pack/node.xz" >"$pack/bin/node.tmp" && chmod +x "$pack/bin/node.tmp" && mv "$pack/bin/node.tmp" "$pack/bin/node" ||
    { say "cannot unpack the pack's Node"; exit 1; }
fi
node=$pack/bin/node
[ "$("$node" -p 'process.version + "-" + process.platform + "-" + process.arch' 2>/dev/null)" = "$(cat "$pack/node.version")" ] ||
  { say "the pack's Node does not run here: $("$node" -v 2>&1 | head -n 1)"; exit 1; }
PATH=$pack/bin:$PATH
unxz_cat "$pack/app.tar.xz" | tar -x -C "$root" || { say "cannot unpack $pack/app.tar.xz"; exit 1; }

# The dry run's GPU: the stand-in nvidia-smi, one simulated H100 with a UUID of this run's own.
if [ "$dry" = 1 ]; then
  fake=$(mktemp -d)
  trap 'rm -rf "$fake"' EXIT
  printf '{"driver":"580.00 (stand-in)","cuda":"13.0","gpus":[{"uuid":"GPU-dry-run-%s","name":"NVIDIA H100 80GB HBM3 (stand-in)","memoryTotalMiB":81559}]}\n' "$$" >"$fake/state.json"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node" "$root/test/fixtures/fake-nvidia-smi.mjs" >"$fake/nvidia-smi"
  chmod +x "$fake/nvidia-smi"
  PATH=$fake:$PATH
  FAKE_NVIDIA_SMI_STATE=$fake/state.json
  export FAKE_NVIDIA_SMI_STATE
fi
export PATH

# 1. The environment.
say "1 environment"
{
  echo "# date"; date -u
  echo "# nvidia-smi"; nvidia-smi 2>&1
  echo "# nvidia-smi --query-gpu"
  nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.free,memory.used,compute_cap --format=csv 2>&1
  echo "# nvidia-smi --query-compute-apps"
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name --format=csv 2>&1
  echo "# nvcc --version"; nvcc --version 2>&1 || echo "nvcc: not found"
  echo "# cores"; nproc 2>&1
  echo "# memory"; head -n 3 /proc/meminfo 2>&1
  echo "# os"; uname -srm; sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null
  echo "# tools"
  for tool in cmake ninja git xz python3; do
    printf '%s: %s\n' "$tool" "$("$tool" --version 2>/dev/null | head -n 1 || echo 'not found')"
  done
  echo "node (the pack's): $("$node" -v)"
} >"$out/1-environment.txt" 2>&1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
smi_head=$(nvidia-smi 2>/dev/null | grep -o 'Driver Version: *[^ ]*.*CUDA Version: *[^ ]*' | head -n 1 | tr -s ' ')
gpu_names=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';' -)
nvcc_version=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p')
if [ "$gpus" -ge 1 ]; then
  note "1 environment: ok"
else
  failure "1 environment: FAILED (nvidia-smi lists no GPU)"
fi
note "  $gpus GPU(s): $gpu_names; ${smi_head:-no driver line}; nvcc ${nvcc_version:-not found}; $(nproc) cores"

# 2. The build, through the project's own script.
say "2 build"
cache=${SERVICE_DECK_CACHE_DIR:-$root/.gpu-cache}
if [ "$dry" = 1 ]; then
  home=${HOME:-/root}
  cache=${SERVICE_DECK_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/service-deck}
  SERVICE_DECK_LLAMA_CUDA=0
  backend="CPU (dry run)"
else
  SERVICE_DECK_LLAMA_CUDA=1
  SERVICE_DECK_CUDA_ARCHITECTURES=${SERVICE_DECK_CUDA_ARCHITECTURES:-90}
  # A build cut off by the time box resumes at the next run (the folder is kept under the cache).
  SERVICE_DECK_LLAMA_KEEP_BUILD=1
  export SERVICE_DECK_CUDA_ARCHITECTURES SERVICE_DECK_LLAMA_KEEP_BUILD
  backend="CUDA, architectures $SERVICE_DECK_CUDA_ARCHITECTURES"
fi
SERVICE_DECK_CACHE_DIR=$cache
SERVICE_DECK_LLAMA_SOURCE=$pack/llama-src.tar.xz
export SERVICE_DECK_CACHE_DIR SERVICE_DECK_LLAMA_CUDA SERVICE_DECK_LLAMA_SOURCE
if command -v ninja >/dev/null 2>&1; then
  SERVICE_DECK_CMAKE_GENERATOR=Ninja
  export SERVICE_DECK_CMAKE_GENERATOR
fi
build_log=$(mktemp)
build_started=$(date +%s)
configured=skipped
if [ "$dry" = 1 ]; then
  if sh scripts/build-llama.sh --configure-only >"$build_log" 2>&1; then configured=ok; else configured=FAILED; fi
fi
# The build may take what the service steps do not need (about 3 minutes on an H100 machine).
build_budget=$((limit_s - $(seconds) - service_s))
if command -v timeout >/dev/null 2>&1 && [ "$build_budget" -gt 0 ]; then
  timeout "$build_budget" sh scripts/build-llama.sh >>"$build_log" 2>&1
else
  sh scripts/build-llama.sh >>"$build_log" 2>&1
fi
build_rc=$?
build_s=$(($(date +%s) - build_started))
{
  echo "backend: $backend; generator: ${SERVICE_DECK_CMAKE_GENERATOR:-make}; jobs: $(nproc); exit $build_rc; $build_s s (budget $build_budget s)"
  echo "configure check of the packed source: $configured"
  tail -n 200 "$build_log"
  for program in llama-server llama-fit-params; do
    printf '%s -> %s\n' "$program" "$(readlink "$cache/bin/$program" 2>/dev/null || echo missing)"
  done
  "$cache/bin/llama-server" --version 2>&1 | tail -n 3
} >"$out/2-build.txt" 2>&1
rm -f "$build_log"
if [ "$build_rc" = 0 ] && [ -x "$cache/bin/llama-server" ] && [ -x "$cache/bin/llama-fit-params" ] && [ "$configured" != FAILED ]; then
  note "2 build: ok"
elif [ "$build_rc" = 124 ]; then
  failure "2 build: NOT FINISHED within its $build_budget s: run the same command again at once (the build resumes where it stopped)"
else
  failure "2 build: FAILED (exit $build_rc, configure check $configured; see 2-build.txt)"
fi
note "  $backend, ${SERVICE_DECK_CMAKE_GENERATOR:-make}, $(nproc) jobs: $build_s s (a cached build takes no time)"

# 3-6. The service's steps, in the time that is left.
left=$((limit_s - $(seconds) - 15))
if [ "$build_rc" = 0 ] && [ "$left" -gt 60 ]; then
  dry_flag=
  [ "$dry" = 1 ] && dry_flag=--dry-run
  # shellcheck disable=SC2086
  "$node" dist/bench/gpuCheck.js --out "$out" --limit-s "$left" $dry_flag || failed=1
else
  failure "3-6 service steps: not run (build exit $build_rc, $left s left)"
fi

note "gpu-check: $(seconds) s in all"
if [ "$failed" = 0 ] && grep -q '^result: PASS$' "$summary"; then
  say "PASS ($out)"
  exit 0
fi
say "FAIL ($out/7-summary.txt)"
exit 1
