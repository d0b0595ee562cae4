#!/usr/bin/env bash
# Installs the pinned Node.js packages of tests/js (the OpenTelemetry JS SDK, the Vercel AI SDK)
# for the tests that drive `agentguard serve` from another language. Without node and npm those
# tests skip, saying so; nothing else needs them.
set -euo pipefail
cd "$(dirname "$0")/../tests/js"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "node/npm not found: the Node.js client tests (tests/serve/test_js_clients.py) will skip"
    exit 0
fi
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
    exit 0  # already installed from this lock file
fi
npm ci --no-audit --no-fund --loglevel=error
