#!/bin/sh
# Progress of `cmake --build` on stdin, as lines on stdout: PREFIX ($1, e.g. "llama-build: ") and
# the percentage. Make prints `[ 42%] ...`, Ninja `[12/345] ...`; every other line is dropped (the
# build's own log keeps it). The percentage shown never goes back: a parallel make interleaves its
# targets' figures.
# - On a terminal (stdout is a TTY): one line, rewritten in place as the percentage moves, ended
#   when the input ends.
# - Elsewhere (a log, CI): the first percentage, then a line only when the percentage reaches the
#   next tenth (10%, 20%, ...) or moved after SERVICE_DECK_PROGRESS_SECONDS (default 30) without a
#   line, and at the end the last percentage if it was not printed (where a failed build stopped).
#   A whole build prints about 11 lines instead of one per percent.
# Read by the shell line by line: mawk (Debian's awk) holds a pipe's input back until its buffer
# fills, so its lines would all come at the end of the build.
set -u
prefix=${1:-}
every=${SERVICE_DECK_PROGRESS_SECONDS:-30}
case $every in '' | *[!0-9]*) every=30 ;; esac
tty=0
[ -t 1 ] && tty=1

seen=-1   # the highest percentage read
shown=-1  # the percentage of the last line printed (log mode)
shown_at=0
while IFS= read -r line; do
  pct=
  case $line in
    '['*'%]'*)
      pct=${line%%%]*}
      pct=${pct#?}
      pct=${pct##* }
      ;;
    '['[0-9]*/[0-9]*']'*)
      step=${line%%]*}
      step=${step#?}
      done_steps=${step%/*}
      all_steps=${step#*/}
      case $done_steps$all_steps in *[!0-9]*) ;; *) [ "$all_steps" -gt 0 ] && pct=$((done_steps * 100 / all_steps)) ;; esac
      ;;
  esac
  case $pct in '' | *[!0-9]*) continue ;; esac
  [ "$pct" -gt "$seen" ] || continue
  seen=$pct
  if [ "$tty" = 1 ]; then
    printf '\r%s%3d%%' "$prefix" "$pct"
    continue
  fi
  if [ "$shown" -ge 0 ] && [ $((pct / 10)) -le $((shown / 10)) ]; then
    # Within the tenth already shown: only once the interval has passed.
    [ $(($(date +%s) - shown_at)) -ge "$every" ] || continue
  fi
  printf '%s%d%%\n' "$prefix" "$pct"
  shown=$pct
  shown_at=$(date +%s)
done
if [ "$seen" -ge 0 ]; then
  if [ "$tty" = 1 ]; then
    printf '\n'
  elif [ "$seen" != "$shown" ]; then
    printf '%s%d%%\n' "$prefix" "$seen"
  fi
fi
