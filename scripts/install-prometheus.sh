#!/usr/bin/env bash
# Installs Debian's `prometheus` package, which brings the `prometheus` server and
# `promtool`, for tests/observability (rule checks, rule unit tests, a real Prometheus
# scraping the guard's metrics). Idempotent: does nothing when both are on PATH.
# Runs unattended (no stdin, CI=true); as root, or through sudo when there is one.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-prometheus.sh: no apt-get here; install Prometheus (server and promtool) another way" >&2
  exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
  else
    echo "install-prometheus.sh: needs root (or sudo) to apt-get install prometheus" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} apt-get update -qq </dev/null
${as_root[@]+"${as_root[@]}"} apt-get install -y -qq --no-install-recommends prometheus </dev/null

# The package's service may or may not start (it does not without systemd); the tests
# start their own server on a free loopback port, so either way is fine.
command -v promtool >/dev/null && command -v prometheus >/dev/null
promtool --version | head -n 1
