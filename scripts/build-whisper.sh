#!/bin/sh
# Builds whisper-server and whisper-cli from the whisper.cpp source that the nodejs-whisper package
# ships (cpp/whisper.cpp), once per version, into the cache folder:
#   <cache>/nodejs-whisper/<version>/nodejs-whisper-<version>.tgz   the package (npm pack), kept
#   <cache>/whisper/<key>/bin/{whisper-server,whisper-cli}          the build, kept per key
#   <cache>/bin/{whisper-server,whisper-cli}                        links to the current key
# The package is fetched with `npm pack` (the tarball alone: none of its dependencies, binaries or
# install scripts), so it is not a dependency of the service. Only the tarball is kept (about
# 6 MB): the 35 MB source tree is unpacked into the build folder and removed with it.
# Always the CPU build: the STT worker runs on the CPU (spec 3.5). ggml and whisper are linked
# statically, so the links work from anywhere without a library path.
# A second run with the same key only checks the links: it takes well under a second.
set -eu
cd "$(dirname "$0")/.."

say() { printf 'whisper-build: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

home=${HOME:-/root}
cache=${SERVICE_DECK_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/service-deck}
# The nodejs-whisper release whose whisper.cpp source is built (a new version gives a new key).
NODEJS_WHISPER_VERSION=${SERVICE_DECK_NODEJS_WHISPER_VERSION:-0.3.1}
source_dir="$cache/nodejs-whisper/$NODEJS_WHISPER_VERSION"
tarball="$source_dir/nodejs-whisper-$NODEJS_WHISPER_VERSION.tgz"
if [ ! -f "$tarball" ]; then
  say "fetching nodejs-whisper@$NODEJS_WHISPER_VERSION from the npm registry (its whisper.cpp source)"
  fetch=$(mktemp -d)
  (cd "$fetch" && npm pack --silent "nodejs-whisper@$NODEJS_WHISPER_VERSION" >/dev/null 2>"$fetch/npm.log") || {
    cat "$fetch/npm.log" >&2
    rm -rf "$fetch"
    die "npm pack nodejs-whisper@$NODEJS_WHISPER_VERSION failed (is the npm registry reachable?)"
  }
  tar -tzf "$fetch/nodejs-whisper-$NODEJS_WHISPER_VERSION.tgz" package/cpp/whisper.cpp/CMakeLists.txt >/dev/null 2>&1 ||
    { rm -rf "$fetch"; die "the nodejs-whisper@$NODEJS_WHISPER_VERSION package has no cpp/whisper.cpp"; }
  mkdir -p "$source_dir"
  mv "$fetch/nodejs-whisper-$NODEJS_WHISPER_VERSION.tgz" "$tarball.$$"
  mv "$tarball.$$" "$tarball"
  rm -rf "$fetch"
fi

# The key: whisper.cpp's version, the tarball's checksum (the source itself), nodejs-whisper's
# version, the machine. The build is native (tuned to this CPU), so the CPU's feature flags are
# part of the key: a cache restored on another CPU builds again instead of dying with SIGILL.
version=$(tar -xzOf "$tarball" package/cpp/whisper.cpp/CMakeLists.txt | sed -n 's/^project("whisper.cpp" VERSION \([0-9.]*\)).*/\1/p')
sum=$(cksum "$tarball" | cut -d ' ' -f 1)
cpu=$( (grep -m 1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m) | cksum | cut -c1-8)
. scripts/lib/ggml-cpu.sh
key="v${version:-unknown}-${sum}-nw${NODEJS_WHISPER_VERSION}-cpu-$(uname -m)-cpu${cpu}${ggml_cpu_key}"
dest="$cache/whisper/$key"

area=whisper
programs="whisper-server whisper-cli"
. scripts/lib/cached-build.sh
cached_skip_or_lock
need_tools cmake c++ make

jobs=$(nproc 2>/dev/null || echo 2)
say "building whisper-server and whisper-cli ($key) with $jobs jobs; this takes a few minutes on 2 cores, once"
cached_workdir
tar -xzf "$tarball" -C "$work" package/cpp/whisper.cpp || die "cannot unpack $tarball"

# Only what the two programs need: no tests, no SDL2, curl or ffmpeg (the service sends WAV).
cmake -S "$work/package/cpp/whisper.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_EXAMPLES=ON -DWHISPER_BUILD_SERVER=ON \
  -DWHISPER_SDL2=OFF -DWHISPER_CURL=OFF -DWHISPER_COMMON_FFMPEG=OFF -DGGML_CUDA=OFF $ggml_cpu_flags >"$work/configure.log" 2>&1 || {
  tail -n 30 "$work/configure.log" >&2
  die "cmake could not configure whisper.cpp (log above)"
}
cmake --build "$work/build" --config Release -j "$jobs" --target whisper-server whisper-cli 2>&1 | tee "$work/build.log" | cmake_progress
# A static build needs no library of its own at run time; say so now rather than at the first job.
if command -v ldd >/dev/null 2>&1 && ldd "$work/build/bin/whisper-server" "$work/build/bin/whisper-cli" | grep -q 'not found'; then
  ldd "$work/build/bin/whisper-server" "$work/build/bin/whisper-cli" | grep 'not found' >&2
  die "the built programs need libraries that are not found (above)"
fi

cached_install "$work/build/bin"
