#!/bin/sh
# The whole test suite (`npm test`): set-up, type check, lint, then every tap test. Ends with the
# line "N passed, N failed": the tap assertions plus one each for the type check and the lint.
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
stage() {
  name=$1
  shift
  printf '== %s\n' "$name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); printf '== %s FAILED\n' "$name"; fi
}

if ! sh scripts/setup.sh; then
  echo "== set-up FAILED"
  echo "0 passed, 1 failed"
  exit 1
fi
stage typecheck npx --no-install tsc -p tsconfig.json --noEmit
stage lint npx --no-install eslint .

log=$(mktemp)
printf '== tap\n'
npx --no-install tap "$@" 2>&1 | tee "$log"
tap_status=$(tail -n 400 "$log" | grep -E '^# \{ total: ' | tail -n 1)
rm -f "$log"
if [ -z "$tap_status" ]; then
  echo "== tap printed no summary: counted as one failure"
  failed=$((failed + 1))
else
  tap_pass=$(printf '%s' "$tap_status" | sed -n 's/.*pass: \([0-9]*\).*/\1/p')
  tap_fail=$(printf '%s' "$tap_status" | sed -n 's/.*fail: \([0-9]*\).*/\1/p')
  passed=$((passed + ${tap_pass:-0}))
  failed=$((failed + ${tap_fail:-0}))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
