"""Instrumentations of agent frameworks, one sub-package each.

Every instrumentor is a ``BaseInstrumentor`` registered under the entry-point
group ``opentelemetry_instrumentor`` as ``agentguard_<framework>``, so
``opentelemetry-instrument`` loads it and ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``
turns it off. Shared machinery lives here once: lazy patching (``_base``),
model-call spans (``_model_call``), stream proxies (``_stream``) and tool
spans (``otel_agentguard.instrumentation._tool_span``).
"""
