# Every install step of the project lives here: a fresh machine needs only python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

demo: $(VENV)/.installed-demo
	$(BIN)/agentguard demo

test: $(VENV)/.installed-test
	@bash scripts/install-prometheus.sh || echo "promtool/prometheus unavailable (needs root for apt-get): their tests will skip"
	@bash scripts/install-js-tests.sh || echo "npm ci failed: the Node.js client tests will skip"
	$(BIN)/python -m pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$*]'
	touch $@

# Benchmarks against the instrumentations users already run (bench/README.md). The anchors
# (openai-v2, OpenLLMetry) are installed only in this venv, never as package dependencies.
BENCH_VENV ?= .venv-bench
BENCH_ARGS ?=

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m bench $(BENCH_ARGS)

$(BENCH_VENV)/.installed: pyproject.toml bench/requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --quiet --disable-pip-version-check -e '.[serve]' -r bench/requirements.txt
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
