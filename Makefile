# Every install step of the project lives here: a fresh machine needs only python3 and make.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test clean

demo: $(VENV)/.installed-demo
	$(BIN)/agentguard demo

test: $(VENV)/.installed-test
	@bash scripts/install-prometheus.sh || echo "promtool/prometheus unavailable (needs root for apt-get): their tests will skip"
	$(BIN)/python -m pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$*]'
	touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
