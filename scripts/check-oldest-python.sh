#!/usr/bin/env bash
# The package on the oldest Python it supports (3.10): every module imports, a fingerprint is
# taken and a recorded trace replays. Skipped (exit 0, with a note) when that Python or its
# packages cannot be had here; a failure of the check itself fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${2:-.venv-oldest}"

is_310() { "$1" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; }
python=""
# The one given, else python3.10 on PATH, else one pyenv installed (not necessarily active).
for candidate in ${1:+"$1"} python3.10 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.*/bin/python; do
  if is_310 "$candidate"; then python="$candidate"; break; fi
done
if [ -z "$python" ]; then
  echo "check-oldest-python.sh: no Python 3.10 found: skipped"
  exit 0
fi
modules=(otel_agentguard/_plain_check otel_agentguard/replay/_typed_attributes otel_agentguard/_step_reader otel_agentguard/_judge_pass otel_agentguard/_span_paths)
stale=""
for module in "${modules[@]}"; do
  if [ "$module.c" -nt "$venv/.installed" ]; then stale=1; fi
done
if [ ! -f "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ] || [ setup.py -nt "$venv/.installed" ] \
    || [ -n "$stale" ]; then
  rm -rf "$venv"
  # The compiled modules are built in place; a failed (optional) build would leave the one before.
  suffix="$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  for module in "${modules[@]}"; do rm -f "$module$suffix"; done
  if ! { "$python" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e .; }; then
    echo "check-oldest-python.sh: could not install the package for $python: skipped"
    exit 0
  fi
  touch "$venv/.installed"
fi
OTEL_AGENTGUARD_FINGERPRINT_KEY=oldest-python-smoke "$venv/bin/python" scripts/oldest_python_smoke.py
