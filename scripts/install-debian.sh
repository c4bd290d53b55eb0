#!/bin/sh
# The Debian packages the speech workers use: espeak-ng (text to speech), pocketsphinx
# with its en-us model (speech to text) and libpocketsphinx-dev (to build the STT engine program,
# scripts/build-pocketsphinx.sh); or the packages named as arguments (the test suite asks for
# chromium, the browser its console tests drive, and nginx with libnginx-mod-http-js for the
# several-nodes test). Installed with apt-get when run as root; otherwise the missing ones are
# named. Never fails: speech profiles then carry `runtime missing: …`, the console tests say that
# chromium is missing, and the several-nodes test is skipped naming the missing package.
set -u

say() { printf 'debian: %s\n' "$*" >&2; }

missing=
packages=${*:-espeak-ng pocketsphinx pocketsphinx-en-us libpocketsphinx-dev}
for pkg in $packages; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  say "not a Debian system: install$missing (or their equivalents) for the speech workers"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  say "needed:$missing. Install them (apt-get install$missing) and run again"
  exit 0
fi
say "installing$missing"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2 || say "warning: apt-get could not install$missing"
}
exit 0
