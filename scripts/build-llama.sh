#!/bin/sh
# Builds llama-server and llama-fit-params from the llama.cpp source that the node-llama-cpp
# package ships (llama/gitRelease.bundle), once per version and flags, into the cache folder:
#   <cache>/node-llama-cpp/<version>/                         the package's llama.cpp source (npm pack)
#   <cache>/llama/<key>/bin/{llama-server,llama-fit-params}   the build, kept per key
#   <cache>/bin/{llama-server,llama-fit-params}               links to the current key
# The package is fetched with `npm pack` (the tarball alone: none of its dependencies, binaries or
# install scripts), so it is not a dependency of the service.
# CPU by default; CUDA when nvcc and an NVIDIA GPU are present, or when asked for with
# SERVICE_DECK_LLAMA_CUDA=1 (SERVICE_DECK_LLAMA_CUDA=0 forces the CPU build).
# A second run with the same key only checks the links: it takes well under a second.
#
# Also read:
#   SERVICE_DECK_LLAMA_SOURCE=FILE.tar.xz   build from that source tarball instead of the package's
#       bundle (scripts/gpu-pack.sh makes it, with FILE.info beside it naming the release, the
#       commit and the node-llama-cpp version): no npm and no git needed, the same cache key.
#   SERVICE_DECK_CUDA_ARCHITECTURES=90      CMAKE_CUDA_ARCHITECTURES of a CUDA build (default: the
#       GPUs present, as llama.cpp's CMake chooses; one architecture builds in minutes, not tens).
#   SERVICE_DECK_CMAKE_GENERATOR=Ninja      the CMake generator (default: CMake's own, make).
#   SERVICE_DECK_LLAMA_KEEP_BUILD=1         keep the build folder of an interrupted run: the next
#       run resumes the compile (a time-boxed GPU machine, scripts/gpu-check.sh).
# `--fetch-only` fetches the package's source into the cache, prints its folder and stops;
# `--configure-only` runs CMake's configure step with the build's flags in a scratch folder and stops
# (it proves the source and the tools complete in seconds; scripts/gpu-check.sh --dry-run uses it).
set -eu
cd "$(dirname "$0")/.."

say() { printf 'llama-build: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

home=${HOME:-/root}
cache=${SERVICE_DECK_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/service-deck}
# The node-llama-cpp release whose llama.cpp source is built (a new version gives a new key).
NODE_LLAMA_CPP_VERSION=${SERVICE_DECK_NODE_LLAMA_CPP_VERSION:-3.22.1}
source_dir="$cache/node-llama-cpp/$NODE_LLAMA_CPP_VERSION"
bundle=$source_dir/llama/gitRelease.bundle
info=$source_dir/llama/llama.cpp.info.json
tarball=${SERVICE_DECK_LLAMA_SOURCE:-}
if [ -n "$tarball" ]; then
  [ -f "$tarball" ] || die "SERVICE_DECK_LLAMA_SOURCE=$tarball: no such file"
  [ -f "$tarball.info" ] || die "SERVICE_DECK_LLAMA_SOURCE=$tarball: $tarball.info (release and commit) is missing"
elif [ ! -f "$bundle" ] || [ ! -f "$info" ]; then
  say "fetching node-llama-cpp@$NODE_LLAMA_CPP_VERSION from the npm registry (its llama.cpp source)"
  fetch=$(mktemp -d)
  (cd "$fetch" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null 2>"$fetch/npm.log") || {
    cat "$fetch/npm.log" >&2
    rm -rf "$fetch"
    die "npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION failed (is the npm registry reachable?)"
  }
  tar -xzf "$fetch"/node-llama-cpp-*.tgz -C "$fetch" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json ||
    { rm -rf "$fetch"; die "the node-llama-cpp@$NODE_LLAMA_CPP_VERSION package has no llama/gitRelease.bundle"; }
  mkdir -p "$source_dir"
  rm -rf "$source_dir/llama.$$"
  mv "$fetch/package/llama" "$source_dir/llama.$$"
  rm -rf "$source_dir/llama"
  mv "$source_dir/llama.$$" "$source_dir/llama"
  rm -rf "$fetch"
fi

if [ "${1:-}" = --fetch-only ]; then
  printf '%s\n' "$source_dir/llama"
  exit 0
fi

# Which backend.
want=${SERVICE_DECK_LLAMA_CUDA:-auto}
backend=cpu
case $want in
  1 | yes | true | on) backend=cuda ;;
  0 | no | false | off) backend=cpu ;;
  *)
    if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
      backend=cuda
    fi
    ;;
esac
if [ "$backend" = cuda ] && ! command -v nvcc >/dev/null 2>&1; then
  die "a CUDA build was asked for (SERVICE_DECK_LLAMA_CUDA=$want) but nvcc is not on PATH; install the CUDA toolkit or unset SERVICE_DECK_LLAMA_CUDA"
fi

# The key: llama.cpp release, the bundle's commit, node-llama-cpp's version, backend, machine.
if [ -n "$tarball" ]; then
  tag=$(sed -n 's/^tag=//p' "$tarball.info")
  commit=$(sed -n 's/^commit=//p' "$tarball.info" | cut -c1-12)
  pkg=$(sed -n 's/^node_llama_cpp=//p' "$tarball.info")
  [ -n "$commit" ] && [ -n "$pkg" ] || die "$tarball.info names no commit or no node-llama-cpp version"
else
  tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$info")
  pkg=$NODE_LLAMA_CPP_VERSION
  commit=$(git bundle list-heads "$bundle" 2>/dev/null | head -n 1 | cut -c1-12)
  [ -n "$commit" ] || die "cannot read $bundle (is git installed?)"
fi
# The build is native (tuned to this CPU), so the CPU's feature flags are part of the key: a cache
# restored on another CPU builds again instead of dying with SIGILL.
cpu=$( (grep -m 1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -c1-8)
. scripts/lib/ggml-cpu.sh
key="${tag:-unknown}-${commit}-nlc${pkg}-${backend}-$(uname -m)-cpu${cpu}${ggml_cpu_key}"
dest="$cache/llama/$key"

area=llama
programs="llama-server llama-fit-params"
. scripts/lib/cached-build.sh
mode=${1:-}
[ "$mode" = --configure-only ] || cached_skip_or_lock
generator=${SERVICE_DECK_CMAKE_GENERATOR:-}
case $generator in
  '') need_tools cmake c++ make ;;
  Ninja) need_tools cmake c++ ninja ;;
  *) need_tools cmake c++ ;;
esac
[ -n "$tarball" ] || need_tools git

jobs=$(nproc 2>/dev/null || echo 2)
[ "$mode" = --configure-only ] ||
  say "building llama-server and llama-fit-params ($key) with $jobs jobs; this takes about 7 minutes on 2 cores, once"
# SERVICE_DECK_LLAMA_KEEP_BUILD=1: the build folder is one per key and outlives an interrupted run,
# so the next run resumes the compile where it stopped (a time-boxed machine, scripts/gpu-check.sh).
resume=0
if [ "${SERVICE_DECK_LLAMA_KEEP_BUILD:-0}" = 1 ] && [ "$mode" != --configure-only ]; then
  work="$cache/$area/.build-$key"
  mkdir -p "$work"
  if [ -f "$work/configured" ]; then
    resume=1
    say "resuming the build in $work"
  else
    rm -rf "$work/src" "$work/build"
  fi
else
  cached_workdir
fi
if [ "$resume" = 0 ]; then
  if [ -n "$tarball" ]; then
    mkdir -p "$work/src"
    . scripts/lib/xz.sh
    unxz_cat "$tarball" | tar -x -C "$work/src" || die "cannot unpack $tarball"
  else
    git clone --quiet "$bundle" "$work/src" 2>/dev/null || die "git clone of $bundle failed"
  fi

  cuda_flags=
  if [ "$backend" = cuda ]; then
    cuda_flags="-DGGML_CUDA=ON"
    [ -z "${SERVICE_DECK_CUDA_ARCHITECTURES:-}" ] || cuda_flags="$cuda_flags -DCMAKE_CUDA_ARCHITECTURES=$SERVICE_DECK_CUDA_ARCHITECTURES"
  fi
  generator_flags=
  [ -z "$generator" ] || generator_flags="-G $generator"
  # The version llama-server prints: the source's own commit. A tarball has no .git, and llama.cpp's
  # CMake asks git from the source folder, which would find the repository around the cache (a
  # checkout holding .gpu-cache/) and print that one's commit and count: git stops at $work.
  # shellcheck disable=SC2086
  GIT_CEILING_DIRECTORIES=$work cmake $generator_flags -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMIT="$(printf '%s' "$commit" | cut -c1-7)" $cuda_flags $ggml_cpu_flags >"$work/configure.log" 2>&1 || {
    tail -n 30 "$work/configure.log" >&2
    die "cmake could not configure llama.cpp (log above)"
  }
  : >"$work/configured"
fi
if [ "$mode" = --configure-only ]; then
  say "configured ($key): the source and the build tools are complete"
  exit 0
fi
cmake --build "$work/build" --config Release -j "$jobs" --target llama-server llama-fit-params 2>&1 | tee "$work/build.log" | cmake_progress
cached_install "$work/build/bin"
[ "${SERVICE_DECK_LLAMA_KEEP_BUILD:-0}" != 1 ] || rm -rf "$work"
