#!/bin/sh
# The admin API's chat test with curl: log in, run a chat test on a chat profile and wait for its
# answer and timings, start another and cancel it, unload the chat worker, log out. The session
# cookie is kept in a private temporary folder that is removed at the end.
# Run: OPERATOR_PASSWORD='…' sh examples/chat-test.sh
#      (on the demo's chat profile demo-chat: put another profile's id into the two start calls)
set -eu

ADMIN=${ADMIN:-http://127.0.0.1:8110}
: "${OPERATOR_PASSWORD:?set OPERATOR_PASSWORD to the operator password that npm run demo printed}"
export OPERATOR_PASSWORD

# If it stops early: log out (once logged in), remove the cookie jar's folder.
trap 'if [ -n "${CSRF:-}" ]; then adm -X DELETE "$ADMIN/api/v1/session" >/dev/null || true; fi; if [ -n "${JAR:-}" ]; then rm -rf "${JAR%/*}"; fi' EXIT
trap 'exit 130' INT TERM
curl() { command curl --fail-with-body "$@"; }
# Prints the JavaScript expression $1 over the JSON answer `a` on standard input; an error answer
# (the OpenAI error body) stops with its code and message.
json() {
  node -e '
    const a = JSON.parse(require("fs").readFileSync(0, "utf8"));
    if (a.error) { console.error(`${a.error.code}: ${a.error.message}`); process.exit(1); }
    console.log(eval(process.argv[1]));' "$1"
}

# Log in as admin.sh does (docs/api.md, "Log in").
JAR=$(mktemp -d)/cookies
CSRF=$(node -pe 'JSON.stringify({ password: process.env.OPERATOR_PASSWORD })' \
  | curl -s -c "$JAR" -H 'X-Service-Deck: 1' -H 'Content-Type: application/json' -d @- "$ADMIN/api/v1/session" \
  | json a.csrfToken)
adm() { curl -s -b "$JAR" -H 'X-Service-Deck: 1' -H "X-CSRF-Token: $CSRF" "$@"; }

adm -X POST "$ADMIN/api/v1/chat-tests/start" -H 'Content-Type: application/json' \
  -d '{"profile_id":"demo-chat","messages":[{"role":"user","content":"Say hello"}],"max_tokens":64}'
# 202 {"job":{"id":"1fcd0cce-…","profile_id":"demo-chat","revision":1,"phase":"waiting", … }}
echo

# Ask for the job until it has ended.
PHASE=waiting
while [ "$PHASE" != done ] && [ "$PHASE" != cancelled ] && [ "$PHASE" != failed ]; do
  sleep 0.25
  PHASE=$(adm "$ADMIN/api/v1/chat-tests" | json a.job.phase)
done
adm "$ADMIN/api/v1/chat-tests" | json '`chat test ${a.job.phase}: ${JSON.stringify(a.job.timings)}`'

# A long test, cancelled at once: a cancel answers once the job has ended.
adm -X POST "$ADMIN/api/v1/chat-tests/start" -H 'Content-Type: application/json' >/dev/null \
  -d '{"profile_id":"demo-chat","messages":[{"role":"user","content":"Tell a long story"}],"max_tokens":4096}'
adm -X POST "$ADMIN/api/v1/chat-tests/cancel" -H 'Content-Type: application/json' -d '{}'
# {"cancelled":true,"job":{ …, "phase":"cancelled", "timings":{"prefill":null,"generation":null}, "usage":null, … }}
echo

# Unload the chat worker: the answer comes once its process is gone.
adm -X POST "$ADMIN/api/v1/chat-tests/unload" -H 'Content-Type: application/json' -d '{}' | json '`unloaded: ${a.unloaded}; chat workers left: ${a.status.workers.filter((w) => w.kind === "chat").length}`'

# Log out.
adm -X DELETE "$ADMIN/api/v1/session"
rm -r "${JAR%/*}"     # the cookie jar's temporary folder
CSRF= JAR=
echo "logged out"
