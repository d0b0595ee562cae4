"""Attach the guard under ``opentelemetry-instrument``.

There is no entry point for span processors, so the guard rides on the
launcher's ``opentelemetry_post_instrument`` hook: it runs after the
configurator has set the global SDK TracerProvider (with the user's exporters)
and after every instrumentor loaded. Add ``agentguard`` to
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` to keep the processor out.

The launcher does not catch exceptions from this hook, so nothing may escape:
a bad policy file is logged as one clear error and the application runs
unguarded.
"""

from __future__ import annotations

import logging
import os

from otel_agentguard import _internal_errors

logger = logging.getLogger(__name__)

DISABLE_NAME = "agentguard"


def attach() -> None:
    disabled = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    if DISABLE_NAME in {name.strip() for name in disabled.split(",")}:
        return
    try:
        from otel_agentguard.guard import install

        install()
    except ValueError as exc:  # PolicyError, a bad mode, no SDK provider: the message says which
        logger.error("otel_agentguard is not active: %s", exc)
    except Exception as exc:  # deliberate: never take the application down
        _internal_errors.report("auto.attach", exc)
