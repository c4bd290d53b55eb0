#!/bin/sh
# The whole test suite (`npm test`): set-up, type check, lint, then every tap test (or the tap
# arguments given, e.g. one file). Ends with the line "N passed, N failed, N skipped": the tap
# assertions plus one each for the type check and the lint; skipped and todo tests count as
# skipped and are named above that line, like every failed assertion. Exits non-zero when anything
# failed or tap itself did.
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
skipped=0
stage() {
  name=$1
  shift
  printf '== %s\n' "$name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); printf '== %s FAILED\n' "$name"; fi
}

if ! sh scripts/setup.sh; then
  echo "== set-up FAILED"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
# The console's browser tests drive Debian's chromium, and the several-nodes test runs Debian's
# nginx with its JavaScript module (installed here as root, like espeak-ng).
sh scripts/install-debian.sh chromium nginx libnginx-mod-http-js
stage typecheck npx --no-install tsc -p tsconfig.json --noEmit
stage typecheck-console npx --no-install tsc -p console/tsconfig.json
stage lint npx --no-install eslint .

log=$(mktemp)
rc_file=$(mktemp)
printf '== tap\n'
# tap's own exit status survives the pipe through a file.
{
  npx --no-install tap "$@" 2>&1
  echo $? >"$rc_file"
} | tee "$log"
tap_rc=$(cat "$rc_file")
tap_status=$(grep -E '^# \{ total: ' "$log" | tail -n 1)
# Every skipped or todo test or assertion, named by its path of subtests (TAP indents a subtest's
# lines by four spaces per level): "file > subtest > assertion # SKIP reason".
not_run=$(awk '
  {
    line = $0
    match(line, /^ */)
    depth = int(RLENGTH / 4)
    text = substr(line, RLENGTH + 1)
  }
  text ~ /^# Subtest: / { path[depth] = substr(text, 12); next }
  text ~ /^(not )?ok [0-9]+ .*# (SKIP|TODO)/ {
    name = text
    sub(/^(not )?ok [0-9]+ (- )?/, "", name)
    prefix = ""
    for (i = 0; i < depth; i++) if (i in path) prefix = prefix path[i] " > "
    print "  " prefix name
  }
' "$log")
# Every failed assertion, named the same way, with the first lines of what tap printed under it
# (wanted, found, where), and under a failed subtest or file why it ended: a CI log shows only its
# end, so the failures are repeated there.
failures=$(awk '
  {
    line = $0
    match(line, /^ */)
    depth = int(RLENGTH / 4)
    text = substr(line, RLENGTH + 1)
  }
  keep > 0 {
    if (text == "...") { keep = 0; next }
    # A key of the block sits two spaces in from the "not ok" line; its value lines further in.
    match(line, /^ */)
    if (RLENGTH == base + 2) skip = text ~ /^(source|stack|columnNumber|typeName|isToplevel|stdio|cwd|externalID|command|args):/
    if (skip || shown >= 20) next
    # Under a failed subtest or file only what says why it ended; under an assertion the rest.
    if (keep == 1 || text ~ /^(message|signal|exitCode|expired|timeout|error):/) { print "      " substr(line, base + 3); shown++ }
    next
  }
  text ~ /^# Subtest: / { path[depth] = substr(text, 12); next }
  text ~ /^not ok [0-9]+/ && text !~ /# (SKIP|TODO)/ && ++failures > 40 { next }
  text ~ /^not ok [0-9]+/ && text !~ /# (SKIP|TODO)/ {
    name = text
    sub(/^not ok [0-9]+ (- )?/, "", name)
    prefix = ""
    for (i = 0; i < depth; i++) if (i in path) prefix = prefix path[i] " > "
    print "  " prefix name
    keep = name ~ /# time=/ ? 2 : 1
    base = depth * 4
    shown = 0
    skip = 0
  }
  END { if (failures > 40) print "  and " failures - 40 " more failed lines (assertions, subtests, files) above" }
' "$log")
rm -f "$log" "$rc_file"
if [ -z "$tap_status" ]; then
  echo "== tap printed no summary: counted as one failure"
  failed=$((failed + 1))
else
  count() { printf '%s' "$tap_status" | sed -n "s/.*[{ ]$1: \\([0-9]*\\).*/\\1/p"; }
  tap_pass=$(count pass)
  tap_fail=$(count fail)
  tap_skip=$(count skip)
  tap_todo=$(count todo)
  passed=$((passed + ${tap_pass:-0}))
  failed=$((failed + ${tap_fail:-0}))
  skipped=$((skipped + ${tap_skip:-0} + ${tap_todo:-0}))
  if [ "${tap_rc:-1}" -ne 0 ] && [ "${tap_fail:-0}" -eq 0 ]; then
    # A test file that crashed, timed out or left a failure tap did not count as an assertion.
    echo "== tap exited with status ${tap_rc:-unknown} but counted no failure: counted as one failure"
    failed=$((failed + 1))
  fi
fi
if [ -n "$failures" ]; then
  echo "== failed:"
  printf '%s\n' "$failures"
fi
if [ -n "$not_run" ]; then
  echo "== skipped or todo:"
  printf '%s\n' "$not_run"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "${tap_rc:-1}" -eq 0 ]
