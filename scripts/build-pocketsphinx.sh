#!/bin/sh
# Builds the STT engine program native/pocketsphinx-worker.c (a loop around libpocketsphinx that
# keeps the model loaded between recordings) into the cache folder, once per source version:
#   <cache>/pocketsphinx/<source checksum>/pocketsphinx-worker
#   <cache>/bin/pocketsphinx-worker   a link to it
# Needs gcc and libpocketsphinx-dev (scripts/install-debian.sh); without them it says so and
# exits 1.
set -eu
cd "$(dirname "$0")/.."

say() { printf 'pocketsphinx-build: %s\n' "$*" >&2; }
home=${HOME:-/root}
cache=${SERVICE_DECK_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/service-deck}
source=native/pocketsphinx-worker.c
sum=$(cksum "$source" | cut -d ' ' -f 1)
dest="$cache/pocketsphinx/$sum"

if [ ! -x "$dest/pocketsphinx-worker" ]; then
  if ! command -v cc >/dev/null 2>&1 || ! pkg-config --exists pocketsphinx 2>/dev/null; then
    say "needs a C compiler and libpocketsphinx-dev (scripts/install-debian.sh installs them as root)"
    exit 1
  fi
  mkdir -p "$dest"
  # shellcheck disable=SC2046
  cc -O2 -Wall -o "$dest/pocketsphinx-worker.tmp.$$" "$source" $(pkg-config --cflags --libs pocketsphinx)
  mv "$dest/pocketsphinx-worker.tmp.$$" "$dest/pocketsphinx-worker"
  say "built $dest/pocketsphinx-worker"
fi
mkdir -p "$cache/bin"
ln -sfn "$dest/pocketsphinx-worker" "$cache/bin/pocketsphinx-worker.tmp.$$"
mv -f "$cache/bin/pocketsphinx-worker.tmp.$$" "$cache/bin/pocketsphinx-worker"
