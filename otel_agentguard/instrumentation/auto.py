"""Attach the guard under ``opentelemetry-instrument``.

There is no entry point for span processors, so the guard rides on the
launcher's ``opentelemetry_post_instrument`` hook: it runs after the
configurator has set the global SDK TracerProvider (with the user's exporters)
and after every instrumentor loaded. Add ``agentguard`` to
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` to keep the processor out.

The launcher does not catch exceptions from this hook, so nothing may escape:
a bad policy file is logged as one clear error and the application runs
unguarded. Without a configurator (``opentelemetry-distro``) the launcher sets
up no SDK provider at all: one warning says so and names the package.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points

from opentelemetry import trace

from otel_agentguard import _internal_errors
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_POLICY

logger = logging.getLogger(__name__)

DISABLE_NAME = "agentguard"


def attach() -> None:
    disabled = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    if DISABLE_NAME in {name.strip() for name in disabled.split(",")}:
        return
    try:
        from otel_agentguard.guard import install
        from otel_agentguard.live.providers import sdk_provider

        if sdk_provider(trace.get_tracer_provider()) is None:
            logger.warning("otel_agentguard is not active: %s", _no_provider_cause())
            return
        install()
    except ValueError as exc:  # PolicyError, a bad mode, no SDK provider: the message says which
        hint = (f" (fix {OTEL_AGENTGUARD_POLICY}, or unset it for the built-in defaults)"
                if os.environ.get(OTEL_AGENTGUARD_POLICY) else "")
        logger.error("otel_agentguard is not active: %s%s", exc, hint)
    except Exception as exc:  # deliberate: never take the application down
        _internal_errors.report("auto.attach", exc)


def _no_provider_cause() -> str:
    """Why the launcher left no SDK TracerProvider, and what to do about it."""
    configurators = sorted(ep.name for ep in entry_points(group="opentelemetry_configurator"))
    if not configurators:
        return ("opentelemetry-instrument configured no SDK TracerProvider because no configurator is "
                "installed: pip install opentelemetry-distro (or 'otel-agentguard[instrument]'), or set the "
                "SDK up in code and call otel_agentguard.install()")
    return (f"the configurator {', '.join(configurators)} set up no SDK TracerProvider (is OTEL_SDK_DISABLED "
            "set?): set the SDK up in code and call otel_agentguard.install()")
