#!/bin/sh
# The inference API with curl: health, the model lists, a chat answer, a streamed answer, the
# same through the Responses API (once an operator turned it on), and speech into a WAV file in a
# new temporary folder.
# Run: TOKEN=sd-... sh examples/curl.sh     (API for another inference address)
set -eu

API=${API:-http://127.0.0.1:8120}
: "${TOKEN:?set TOKEN to the API token that npm run demo printed}"
# Every curl call below stops the script on an HTTP error status, after printing the error body.
curl() { command curl --fail-with-body "$@"; echo; }
cd "$(mktemp -d)"

curl -s -H "Authorization: Bearer $TOKEN" "$API/health"
curl -s -H "Authorization: Bearer $TOKEN" "$API/v1/models"
curl -s -H "Authorization: Bearer $TOKEN" "$API/v1/models/tiny-chat"
curl -s -H "Authorization: Bearer $TOKEN" "$API/v1/images/models"
curl -s -H "Authorization: Bearer $TOKEN" "$API/v1/audio/speech/models"
curl -s -H "Authorization: Bearer $TOKEN" "$API/v1/audio/transcriptions/models"

curl -s "$API/v1/chat/completions" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-chat","messages":[{"role":"user","content":"Hello"}],"max_tokens":8}'

curl -N -s "$API/v1/chat/completions" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-chat","messages":[{"role":"user","content":"Hello"}],"max_tokens":3,
       "stream":true,"stream_options":{"include_usage":true}}'

# The Responses API is off until an operator turns it on (service-deck extensions enable responses);
# while off, these two answer 404 like an unknown route.
curl -s "$API/v1/responses" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-chat","instructions":"Be brief.","input":"Hello","max_output_tokens":8}'

curl -N -s "$API/v1/responses" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"model":"tiny-chat","input":"Hello","max_output_tokens":2,"stream":true}'

curl -s "$API/v1/audio/speech" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"model":"speaker","input":"Guten Morgen!","voice":"nova"}' -o morgen.wav
echo "speech: $PWD/morgen.wav ($(wc -c < morgen.wav) bytes)"
