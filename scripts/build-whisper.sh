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
key="v${version:-unknown}-${sum}-nw${NODEJS_WHISPER_VERSION}-cpu-$(uname -m)-cpu${cpu}"
dest="$cache/whisper/$key"

link() {
  mkdir -p "$cache/bin"
  for name in whisper-server whisper-cli; do
    ln -sfn "$dest/bin/$name" "$cache/bin/$name.tmp.$$"
    mv -f "$cache/bin/$name.tmp.$$" "$cache/bin/$name"
  done
}

# A finished build has its KEY file: the folder is moved into place whole, never half-copied.
done_already() { [ -f "$dest/KEY" ] && [ -x "$dest/bin/whisper-server" ] && [ -x "$dest/bin/whisper-cli" ]; }
if done_already; then
  link
  exit 0
fi

# One build at a time: a second run waits for the first and then finds its result.
mkdir -p "$cache/whisper"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache/whisper/.lock"
  if ! flock -n 9; then
    say "another build is running; waiting for it"
    flock 9
  fi
  if done_already; then
    link
    exit 0
  fi
fi

# Tools. As root on Debian, install what is missing; otherwise say what to install.
missing=
command -v cmake >/dev/null 2>&1 || missing="$missing cmake"
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || missing="$missing g++"
command -v make >/dev/null 2>&1 || missing="$missing make"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing build tools:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2 ||
      die "apt-get could not install:$missing"
  else
    die "building whisper.cpp needs:$missing. Install them (Debian: apt-get install$missing) and run again"
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
say "building whisper-server and whisper-cli ($key) with $jobs jobs; this takes a few minutes on 2 cores, once"
work="$cache/whisper/.build-$key.$$"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
trap 'rm -rf "$work"; exit 130' INT TERM
tar -xzf "$tarball" -C "$work" package/cpp/whisper.cpp || die "cannot unpack $tarball"

# Only what the two programs need: no tests, no SDL2, curl or ffmpeg (the service sends WAV).
cmake -S "$work/package/cpp/whisper.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DWHISPER_BUILD_TESTS=OFF -DWHISPER_BUILD_EXAMPLES=ON -DWHISPER_BUILD_SERVER=ON \
  -DWHISPER_SDL2=OFF -DWHISPER_CURL=OFF -DWHISPER_COMMON_FFMPEG=OFF -DGGML_CUDA=OFF >"$work/configure.log" 2>&1 || {
  tail -n 30 "$work/configure.log" >&2
  die "cmake could not configure whisper.cpp (log above)"
}
# Progress: cmake's percentage, one line per step that moves it. Read by the shell line by line
# (awk would hold its input back in a buffer, and the lines would all come at the end).
progress() {
  last=
  while IFS= read -r line; do
    case $line in
      '['*'%]'*)
        pct=${line%%%]*}
        pct=${pct#?}
        pct=${pct##* }%
        [ "$pct" = "$last" ] || say "$pct"
        last=$pct
        ;;
    esac
  done
}
cmake --build "$work/build" --config Release -j "$jobs" --target whisper-server whisper-cli 2>&1 | tee "$work/build.log" | progress
if [ ! -x "$work/build/bin/whisper-server" ] || [ ! -x "$work/build/bin/whisper-cli" ]; then
  grep -E 'error|Error' "$work/build.log" | head -n 20 >&2 || true
  die "the build did not produce whisper-server and whisper-cli (errors above; full log lost with the build folder)"
fi
# A static build needs no library of its own at run time; say so now rather than at the first job.
if command -v ldd >/dev/null 2>&1 && ldd "$work/build/bin/whisper-server" "$work/build/bin/whisper-cli" | grep -q 'not found'; then
  ldd "$work/build/bin/whisper-server" "$work/build/bin/whisper-cli" | grep 'not found' >&2
  die "the built programs need libraries that are not found (above)"
fi

# Into place whole: copied next to the destination, then renamed.
mkdir -p "$work/install/bin"
cp "$work/build/bin/whisper-server" "$work/build/bin/whisper-cli" "$work/install/bin/"
printf '%s\n' "$key" >"$work/install/KEY"
rm -rf "$dest.old.$$"
[ -d "$dest" ] && mv "$dest" "$dest.old.$$"
mv "$work/install" "$dest"
rm -rf "$dest.old.$$"
link
say "done: $cache/bin/whisper-server -> $dest/bin/whisper-server"
