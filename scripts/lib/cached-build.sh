# What the cached native builds (scripts/build-llama.sh, scripts/build-whisper.sh) share, sourced
# by them. The caller sets, before it calls these:
#   cache     the cache folder (<cache>/bin holds the links)
#   area      its folder under the cache (llama, whisper): the builds per key, the lock
#   dest      <cache>/<area>/<key>, the finished build of this key
#   key       the key of this build
#   programs  the programs the build makes, space-separated (the first is named in messages)
# and defines say() and die().

# Links <cache>/bin/<program> to this key's build, each replaced in one rename.
cached_link() {
  mkdir -p "$cache/bin"
  for name in $programs; do
    ln -sfn "$dest/bin/$name" "$cache/bin/$name.tmp.$$"
    mv -f "$cache/bin/$name.tmp.$$" "$cache/bin/$name"
  done
}

# A finished build has its KEY file and every program: the folder is moved into place whole.
cached_done() {
  [ -f "$dest/KEY" ] || return 1
  for name in $programs; do [ -x "$dest/bin/$name" ] || return 1; done
}

# Done already: link and end the script. Otherwise take the lock (one build at a time: a second
# run waits for the first and then finds its result).
cached_skip_or_lock() {
  if cached_done; then
    cached_link
    exit 0
  fi
  mkdir -p "$cache/$area"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/$area/.lock"
    if ! flock -n 9; then
      say "another build is running; waiting for it"
      flock 9
    fi
    if cached_done; then
      cached_link
      exit 0
    fi
  fi
}

# The build tools (`need_tools git cmake c++ make`). As root on Debian, what is missing is
# installed; otherwise the script says what to install and stops.
need_tools() {
  missing=
  for tool in "$@"; do
    case $tool in
      c++) command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || missing="$missing g++" ;;
      ninja) command -v ninja >/dev/null 2>&1 || missing="$missing ninja-build" ;;
      *) command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool" ;;
    esac
  done
  [ -n "$missing" ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing build tools:$missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || true
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2 ||
      die "apt-get could not install:$missing"
  else
    die "building ${programs%% *} needs:$missing. Install them (Debian: apt-get install$missing) and run again"
  fi
}

# A private build folder under the area, removed however the script ends.
cached_workdir() {
  work="$cache/$area/.build-$key.$$"
  rm -rf "$work"
  mkdir -p "$work"
  trap 'rm -rf "$work"' EXIT
  trap 'rm -rf "$work"; exit 130' INT TERM
}

# Progress of `cmake --build` on stdin, to stderr: one updating line on a terminal, else a line
# per tenth or per 30 s (scripts/lib/progress.sh).
cmake_progress() {
  sh scripts/lib/progress.sh "$area-build: " >&2
}

# Checks that `$1/<program>` was built for each program, then moves them into place whole (copied
# next to the destination, then renamed) and links them.
cached_install() {
  for name in $programs; do
    if [ ! -x "$1/$name" ]; then
      grep -E 'error|Error' "$work/build.log" | head -n 20 >&2 || true
      die "the build did not produce $programs (errors above; full log lost with the build folder)"
    fi
  done
  mkdir -p "$work/install/bin"
  for name in $programs; do cp "$1/$name" "$work/install/bin/"; done
  printf '%s\n' "$key" >"$work/install/KEY"
  rm -rf "$dest.old.$$"
  [ -d "$dest" ] && mv "$dest" "$dest.old.$$"
  mv "$work/install" "$dest"
  rm -rf "$dest.old.$$"
  cached_link
  say "done: $cache/bin/${programs%% *} -> $dest/bin/${programs%% *}"
}
