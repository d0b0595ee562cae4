#!/usr/bin/env bash
# Installs one Debian package for the tests that need a tool outside Python:
#   apt-install.sh prometheus promtool prometheus   # rule checks, a real Prometheus (tests/observability)
#   apt-install.sh chromium chromium                # the incident page in a real browser (tests/test_html_page.py)
# Usage: apt-install.sh PACKAGE COMMAND...: does nothing when every COMMAND is on PATH already.
# Runs unattended (no stdin, CI=true); as root, or through sudo when there is one.
set -euo pipefail

package="$1"
shift
missing=0
for command in "$@"; do
  command -v "$command" >/dev/null 2>&1 || missing=1
done
[ "$missing" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "apt-install.sh: no apt-get here; install $package another way" >&2
  exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
  else
    echo "apt-install.sh: needs root (or sudo) to apt-get install $package" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} apt-get update -qq </dev/null
${as_root[@]+"${as_root[@]}"} apt-get install -y -qq --no-install-recommends "$package" </dev/null

for command in "$@"; do
  command -v "$command" >/dev/null
done
