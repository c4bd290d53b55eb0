#!/bin/sh
# Packs what a GPU machine without network lacks for scripts/gpu-check.sh, into .gpu/ (ignored by
# git; it travels beside the working tree):
#   .gpu/app.tar.xz          dist/ (the built service, console and benchmarks) and the production
#                            node_modules (the packages package-lock.json does not mark dev)
#   .gpu/llama-src.tar.xz    the llama.cpp source this version builds from (node-llama-cpp's
#                            bundle, checked out), less what the build of llama-server and
#                            llama-fit-params never reads; .info beside it names release and commit
#   .gpu/node.xz             this machine's Node binary (for a device that has none), with
#                            .gpu/node.version
# It prints each part's size and the total, and fails when the pack and the working tree together
# would not fit the device's 64 MiB (the pack must stay under about 56 MiB).
# The compressed Node binary is kept in the cache folder per version, so packing again takes
# seconds.
set -eu
cd "$(dirname "$0")/.."

say() { printf 'gpu-pack: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

home=${HOME:-/root}
cache=${SERVICE_DECK_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/service-deck}
pack=${SERVICE_DECK_GPU_PACK_DIR:-.gpu}
limit_mib=${SERVICE_DECK_GPU_PACK_LIMIT_MIB:-56}
device_mib=64

command -v xz >/dev/null 2>&1 || die "xz is needed (Debian: apt-get install xz-utils)"
[ -d node_modules ] || { say "installing npm dependencies (npm ci)"; npm ci --no-audit --no-fund --loglevel=error; }

rm -rf "$pack.new"
mkdir -p "$pack.new"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Built into a folder of its own: the checkout's dist/ stays as it is (tests may be running from it).
say "building the service and the benchmarks (tsc) and the console (vite)"
npx --no-install tsc -p tsconfig.bench.json --outDir "$stage/dist"
npx --no-install vite build --config console/vite.config.ts --logLevel warn --outDir "$stage/dist/console" --emptyOutDir

# The production packages: every node_modules entry of the lock file that is not for development
# and is on disk. Optional packages for other platforms may be missing; any other is an error.
existing=$(node -e '
  const fs = require("fs");
  const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8"));
  for (const [where, entry] of Object.entries(lock.packages ?? {})) {
    if (!where.startsWith("node_modules/") || entry.dev || entry.devOptional || entry.link) continue;
    if (fs.existsSync(where)) console.log(where);
    else if (!entry.optional) {
      console.error(`gpu-pack: error: ${where} (a production package) is not installed: run npm ci`);
      process.exit(1);
    }
  }
') || exit 1
say "packing dist/ and $(printf '%s\n' "$existing" | wc -l) production packages"
tar -cf "$stage/app.tar" -C "$stage" dist
# shellcheck disable=SC2086
tar -rf "$stage/app.tar" $existing
xz -T0 -6 -c "$stage/app.tar" >"$pack.new/app.tar.xz"

# The llama.cpp source: the bundle's head, checked out, less the model vocabularies, docs, tests,
# examples, Python and media that the build of the two programs never reads, as a tarball the
# build script takes without git (CMake reads every tools/ folder, so those stay).
source_dir=$(sh scripts/build-llama.sh --fetch-only)
bundle=$source_dir/gitRelease.bundle
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$source_dir/llama.cpp.info.json")
commit=$(git bundle list-heads "$bundle" | head -n 1 | cut -d ' ' -f 1)
[ -n "$commit" ] || die "cannot read $bundle"
git clone --quiet --no-checkout "$bundle" "$stage/src"
git -C "$stage/src" archive --format=tar "$commit" \
  ':(exclude)models' ':(exclude)docs' ':(exclude)tests' ':(exclude)examples' ':(exclude)gguf-py' ':(exclude)media' \
  ':(exclude)benches' ':(exclude)conversion' ':(exclude)requirements' ':(exclude).devops' ':(exclude).github' |
  xz -T0 -6 >"$pack.new/llama-src.tar.xz"
node_llama_cpp=$(basename "$(dirname "$source_dir")")
printf 'tag=%s\ncommit=%s\nnode_llama_cpp=%s\n' "$tag" "$commit" "$node_llama_cpp" >"$pack.new/llama-src.tar.xz.info"

# Node, compressed once per version.
node_bin=$(node -p 'process.execPath')
node_version=$(node -p 'process.version + "-" + process.platform + "-" + process.arch')
node_xz="$cache/gpu/node-$node_version.xz"
if [ ! -f "$node_xz" ]; then
  say "compressing $node_bin ($node_version) with xz, once"
  mkdir -p "$cache/gpu"
  xz -T0 -6 -c "$node_bin" >"$node_xz.$$"
  mv "$node_xz.$$" "$node_xz"
fi
cp "$node_xz" "$pack.new/node.xz"
printf '%s\n' "$node_version" >"$pack.new/node.version"

rm -rf "$pack"
mv "$pack.new" "$pack"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=0
for file in "$pack"/*; do
  bytes=$(wc -c <"$file")
  total=$((total + bytes))
  printf '%-28s %8s MiB\n' "$file" "$(mib "$bytes")"
done
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 cat 2>/dev/null | wc -c)
printf '%-28s %8s MiB (limit %s MiB)\n' "total" "$(mib "$total")" "$limit_mib"
printf '%-28s %8s MiB (with the pack: %s of the device'"'"'s %s MiB)\n' "working tree" "$(mib "$tree")" "$(mib $((total + tree)))" "$device_mib"
[ "$total" -le $((limit_mib * 1048576)) ] || die "the pack is over $limit_mib MiB"
[ $((total + tree)) -le $((device_mib * 1048576)) ] || die "the pack and the working tree are over the device's $device_mib MiB"
