# Every install step of the project lives here: a fresh machine needs only python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench clean

demo: $(VENV)/.installed-demo
	$(BIN)/agentguard demo

# The foreign-trace tests run their agents in a second environment that has the other
# instrumentations (OpenLLMetry, OpenInference, Pydantic AI), kept out of the main one.
FOREIGN_VENV ?= .venv-foreign

# The agent frameworks tests/frameworks/ runs live (Strands, ADK, LlamaIndex, smolagents, the
# Agent Framework, CrewAI), pinned in their own environment: they pull in hundreds of packages.
FRAMEWORKS_VENV ?= .venv-frameworks

# Lint (ruff) and strict types (mypy, configured in pyproject.toml) run first: either fails the build.
test: $(VENV)/.installed-test $(FOREIGN_VENV)/.installed $(FRAMEWORKS_VENV)/.installed
	$(BIN)/ruff check otel_agentguard tests bench
	$(BIN)/mypy
	@bash scripts/apt-install.sh prometheus promtool prometheus || echo "promtool/prometheus unavailable (needs root for apt-get): their tests will skip"
	@bash scripts/install-js-tests.sh || echo "npm ci failed: the Node.js client tests will skip"
	@bash scripts/apt-install.sh chromium chromium || echo "chromium unavailable (needs root for apt-get): the browser test of the HTML page will skip"
	AGENTGUARD_TEST_FOREIGN_PYTHON=$(FOREIGN_VENV)/bin/python \
	AGENTGUARD_TEST_FRAMEWORKS_PYTHON=$(FRAMEWORKS_VENV)/bin/python $(BIN)/python -m pytest -n auto

$(FOREIGN_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(FOREIGN_VENV)
	$(FOREIGN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test-foreign]'
	touch $@

$(FRAMEWORKS_VENV)/.installed: pyproject.toml tests/frameworks/requirements.txt
	$(PYTHON) -m venv $(FRAMEWORKS_VENV)
	$(FRAMEWORKS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e . -r tests/frameworks/requirements.txt
	touch $@

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
	rm -rf $(VENV) $(FOREIGN_VENV) $(FRAMEWORKS_VENV) $(BENCH_VENV) build *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
