#!/bin/sh
# The admin API with curl: log in, make a chat profile of a GGUF file (or find the one made
# before), publish it, chat with it through the inference API, log out. The session cookie is
# kept in a private temporary folder that is removed at the end; the password goes to curl on
# its standard input, never on a command line.
# Run: OPERATOR_PASSWORD='…' TOKEN=sd-... sh examples/admin.sh
#      with GGUF=/srv/models/qwen2.5-1.5b-instruct-q4_k_m.gguf NAME=qwen-small for your own model
#      (default: the demo's tiny model under the profile name my-chat)
set -eu

ADMIN=${ADMIN:-http://127.0.0.1:8110}
API=${API:-http://127.0.0.1:8120}
: "${OPERATOR_PASSWORD:?set OPERATOR_PASSWORD to the operator password that npm run demo printed}"
: "${TOKEN:?set TOKEN to the API token that npm run demo printed}"
GGUF=${GGUF:-${SERVICE_DECK_STATE_DIR:-$HOME/.local/state/service-deck}/models/service-deck-tiny.gguf}
NAME=${NAME:-my-chat}
export OPERATOR_PASSWORD GGUF NAME

# At the end, whatever way it comes: log out (once logged in), remove the cookie jar's folder.
trap 'if [ -n "${CSRF:-}" ]; then adm -X DELETE "$ADMIN/api/v1/session" || true; fi; if [ -n "${JAR:-}" ]; then rm -rf "${JAR%/*}"; fi' EXIT
trap 'exit 130' INT TERM
# Every curl call below stops the script on an HTTP error status, after printing the error body.
curl() { command curl --fail-with-body "$@"; }

# Prints the JavaScript expression $1 over the JSON answer `a` on standard input; an error answer
# (the OpenAI error body) stops with its code and message.
json() {
  node -e '
    const a = JSON.parse(require("fs").readFileSync(0, "utf8"));
    if (a.error) { console.error(`${a.error.code}: ${a.error.message}`); process.exit(1); }
    console.log(eval(process.argv[1]));' "$1"
}

# Log in: the session cookie goes to a private temporary folder, the password to curl's stdin.
JAR=$(mktemp -d)/cookies
CSRF=$(node -pe 'JSON.stringify({ password: process.env.OPERATOR_PASSWORD })' \
  | curl -s -c "$JAR" -H 'X-Service-Deck: 1' -H 'Content-Type: application/json' -d @- "$ADMIN/api/v1/session" \
  | json a.csrfToken)

# every later call: the cookie jar, the header, and the CSRF token
adm() { curl -s -b "$JAR" -H 'X-Service-Deck: 1' -H "X-CSRF-Token: $CSRF" "$@"; }

# The profile: the one of this name, or a new one (unpublished, revision 1).
ID=$(adm "$ADMIN/api/v1/profiles" | json 'a.profiles.find((p) => p.name === process.env.NAME)?.id ?? ""')
if [ -z "$ID" ]; then
  BODY=$(node -pe 'JSON.stringify({ name: process.env.NAME, category: "chat", params: { model: process.env.GGUF, context: 8192, slots: 2 } })')
  ID=$(adm -H 'Content-Type: application/json' -d "$BODY" "$ADMIN/api/v1/profiles" | json a.id)
  echo "created the chat profile $NAME ($ID) for $GGUF"
else
  echo "the chat profile $NAME ($ID) is there already"
fi
# Publish it: clients may then send its name as `model`. A missing file or runtime is a blocker.
BLOCKERS=$(adm -H 'Content-Type: application/json' -d "{\"id\":\"$ID\",\"enabled\":true}" "$ADMIN/api/v1/endpoint/profile" \
  | json 'a.profile.blockers.join("; ")')
if [ -n "$BLOCKERS" ]; then
  echo "published $NAME, but it cannot run until this is fixed: $BLOCKERS" >&2
  exit 1
fi
echo "published $NAME"

# The first request for the profile starts its worker.
curl -s "$API/v1/chat/completions" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":16}"
echo
