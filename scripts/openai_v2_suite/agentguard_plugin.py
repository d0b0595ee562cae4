"""A pytest plugin that switches the guard on inside openai-v2's own test suite.

Loaded with ``-p agentguard_plugin``; ``AGENTGUARD_SUITE_ORDER`` says how:

* ``off``: the suite as it is (the baseline);
* ``ours-first``: agentguard_openai and the guard processor are set up before
  openai-v2 instruments, on the same tracer provider;
* ``ours-last``: after it.

Whenever the suite's fixtures instrument openai-v2, ours follows the same
tracer provider and is undone with it, so every test of the suite runs with
both instrumentations and the guard processor active.
"""

from __future__ import annotations

import os

import pytest

ORDER = os.environ.get("AGENTGUARD_SUITE_ORDER", "off")
_setups = 0  # how many times the guard went on with openai-v2: proof that this plugin ran


def pytest_configure(config: pytest.Config) -> None:
    if ORDER == "off":
        return
    if ORDER not in ("ours-first", "ours-last"):
        raise pytest.UsageError(f"AGENTGUARD_SUITE_ORDER: expected off, ours-first or ours-last, got {ORDER!r}")
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2Instrumentor

    import otel_agentguard as ag
    from otel_agentguard.instrumentation.openai import OpenAIInstrumentor

    original_instrument = OpenAIV2Instrumentor._instrument
    original_uninstrument = OpenAIV2Instrumentor._uninstrument

    def ours_on(provider: object) -> None:
        global _setups
        _setups += 1
        ag.install(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)

    def _instrument(self: object, **kwargs: object) -> None:
        provider = kwargs.get("tracer_provider")
        if ORDER == "ours-first":
            ours_on(provider)
        original_instrument(self, **kwargs)
        if ORDER == "ours-last":
            ours_on(provider)

    def _uninstrument(self: object, **kwargs: object) -> None:
        original_uninstrument(self, **kwargs)
        OpenAIInstrumentor().uninstrument()

    OpenAIV2Instrumentor._instrument = _instrument
    OpenAIV2Instrumentor._uninstrument = _uninstrument


def pytest_sessionfinish(session: pytest.Session) -> None:
    count_file = os.environ.get("AGENTGUARD_SUITE_COUNT_FILE")
    if count_file:
        with open(count_file, "w") as file:
            file.write(str(_setups))


def pytest_report_header(config: pytest.Config) -> str:
    return f"agentguard: {ORDER}"
