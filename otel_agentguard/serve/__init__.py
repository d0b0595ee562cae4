"""``agentguard serve``: the judge as an OTLP receiver, for agents in any language.

Agents send their spans (OTLP/HTTP ``/v1/traces``, or OTLP/gRPC where ``grpcio``
is installed) directly or through a Collector; the service reads them with the
same adapter as ``agentguard replay``, judges each session with the same judge as
the in-process processor, and exports one verdict span per session plus the
guard's metrics through the standard OpenTelemetry exporters. Install with
``pip install 'otel-agentguard[serve]'``; see ``docs/service.md``.
"""

from otel_agentguard.serve.main import ServeOptions, serve

__all__ = ["ServeOptions", "serve"]
