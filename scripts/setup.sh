#!/bin/sh
# Installs what this checkout lacks, then builds. Every README command runs it first, so a fresh
# clone needs nothing but Node 20 and npm. Safe to run again: each step is skipped when done.
set -eu
cd "$(dirname "$0")/.."

say() { printf 'setup: %s\n' "$*" >&2; }

# npm dependencies (no install scripts are needed: npm here blocks them unless approved).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm dependencies (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
fi

# llama-server and llama-fit-params from the llama.cpp source that node-llama-cpp ships, built once
# per version into the cache folder (about 7 minutes on 2 cores the first time, instant after).
# A failed build does not stop the set-up: chat profiles then show `runtime missing: llama-server`.
if ! sh scripts/build-llama.sh; then
  say "warning: llama-server could not be built (see above); chat profiles stay blocked until it is"
fi

# Speech: espeak-ng and pocketsphinx from Debian (as root), and the STT engine program
# built against libpocketsphinx. Neither stops the set-up.
sh scripts/install-debian.sh
sh scripts/build-pocketsphinx.sh || say "warning: the pocketsphinx engine could not be built; STT profiles stay blocked"

# whisper-server and whisper-cli from the whisper.cpp source that nodejs-whisper ships, built once
# per version into the cache folder (CPU only, a few minutes on 2 cores the first time, instant
# after). A failed build does not stop the set-up: whisper.cpp STT profiles then show
# `runtime missing: whisper-server or whisper-cli`.
if ! sh scripts/build-whisper.sh; then
  say "warning: whisper.cpp could not be built (see above); whisper.cpp STT profiles stay blocked until it is"
fi

# What `serve` needs, as `npm run build` makes it: the service (tsc, `build:service`) to dist/,
# and the operator console (Vite, `build:console`) to dist/console. Each step is skipped when
# nothing it reads changed since its last build (scripts/build-step.mjs: a hash of its inputs).
say "building the service (tsc) unless it is up to date"
npm run -s build:service
say "building the operator console (vite) unless it is up to date"
npm run -s build:console -- --logLevel warn
