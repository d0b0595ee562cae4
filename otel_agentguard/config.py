"""Runtime settings shared by the processor, the session API and instrumentations."""

from __future__ import annotations

from opentelemetry import context

from otel_agentguard._environ import reader
from otel_agentguard.environment_variables import (
    OTEL_AGENTGUARD_REPAIR_HISTORY,
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT,
)
from otel_agentguard.live.resolution import current_context

# Values of the GenAI capture variable that put content on spans (the GenAI
# utilities also accept the SPAN_ONLY / SPAN_AND_EVENT spellings).
_CAPTURE_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})
_capture_setting = reader(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)
_repair_history_setting = reader(OTEL_AGENTGUARD_REPAIR_HISTORY)


def capture_content() -> bool:
    """Whether raw arguments, results, prompts and answers may go on spans (off by default)."""
    value = _capture_setting()
    return bool(value) and value.strip().lower() in _CAPTURE_ON


def instrumentation_suppressed(ctx: context.Context | None = None) -> bool:
    """True inside ``suppress_instrumentation()`` (and during export); ``ctx``: the current
    context when the caller has read it already."""
    if ctx is None:
        ctx = current_context()
    return bool(ctx.get(context._SUPPRESS_INSTRUMENTATION_KEY))  # noqa: SLF001 - the shared key


def repair_history_enabled(options: dict[str, object]) -> bool:
    """The opt-in history middleware: ``instrument(repair_history=True)`` or the environment."""
    if "repair_history" in options:
        return bool(options["repair_history"])
    value = _repair_history_setting()
    return bool(value) and value.strip().lower() in ("true", "1", "yes")
