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

# With a C compiler and Python's headers here, the optional compiled modules must have been built:
# their tests then fail, not skip, when one is missing.
CAN_BUILD_C := $(shell command -v $${CC:-cc} >/dev/null 2>&1 && $(PYTHON) -c "import os, sysconfig; \
	raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
	>/dev/null 2>&1 && echo 1)
# An editable install builds the compiled modules in place: rebuilt when their sources change. Their
# build is optional, and a failed one leaves the module built before: those are removed first.
COMPILED_MODULES := otel_agentguard/_plain_check otel_agentguard/replay/_typed_attributes otel_agentguard/_step_reader \
	otel_agentguard/_judge_pass otel_agentguard/_span_paths otel_agentguard/_payload_memory
COMPILED_SOURCES := setup.py $(addsuffix .c,$(COMPILED_MODULES)) otel_agentguard/_slots.h
remove_built_module = suffix=$$($(1) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))") && \
	for module in $(COMPILED_MODULES); do rm -f "$$module$$suffix"; done

# Lint (ruff) and strict types (mypy, configured in pyproject.toml) run first: either fails the build.
# So does the package failing on the oldest Python it supports (3.10), when one is installed here.
test: $(VENV)/.installed-test $(FOREIGN_VENV)/.installed
	$(BIN)/ruff check otel_agentguard tests bench
	$(BIN)/mypy
	bash scripts/check-oldest-python.sh
	@bash scripts/install-prometheus.sh || echo "promtool/prometheus unavailable (needs root for apt-get): their tests will skip"
	@bash scripts/install-js-tests.sh || echo "npm ci failed: the Node.js client tests will skip"
	AGENTGUARD_TEST_FOREIGN_PYTHON=$(FOREIGN_VENV)/bin/python AGENTGUARD_TEST_REQUIRE_COMPILED=$(CAN_BUILD_C) $(BIN)/python -m pytest

$(FOREIGN_VENV)/.installed: pyproject.toml $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(FOREIGN_VENV)
	$(call remove_built_module,$(FOREIGN_VENV)/bin/python)
	$(FOREIGN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test-foreign]'
	touch $@

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-%: pyproject.toml $(COMPILED_SOURCES) | $(BIN)/python
	$(call remove_built_module,$(BIN)/python)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$*]'
	touch $@

# Benchmarks against the instrumentations users already run (bench/README.md). The anchors
# (openai-v2, OpenLLMetry) are installed only in this venv, never as package dependencies.
BENCH_VENV ?= .venv-bench
BENCH_ARGS ?=

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m bench $(BENCH_ARGS)

$(BENCH_VENV)/.installed: pyproject.toml bench/requirements.txt $(COMPILED_SOURCES)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(call remove_built_module,$(BENCH_VENV)/bin/python)
	$(BENCH_VENV)/bin/python -m pip install --quiet --quiet --disable-pip-version-check -e '.[serve]' -r bench/requirements.txt
	touch $@

clean:
	rm -rf $(VENV) $(FOREIGN_VENV) $(BENCH_VENV) .venv-oldest build *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache otel_agentguard/*.so \
		otel_agentguard/replay/*.so
