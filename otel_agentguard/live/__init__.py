"""The live guard: a span processor that judges agent sessions as their spans start and end.

- :mod:`~otel_agentguard.live.processor`: the SDK span processor, a thin adapter
- :mod:`~otel_agentguard.live.resolution`: which session a span or a call belongs to
- :mod:`~otel_agentguard.live.sessions`, :mod:`~otel_agentguard.live.session`, :mod:`~otel_agentguard.live.store`:
  the live sessions, judged in sequence order, bounded in number and idle time
- :mod:`~otel_agentguard.live.duplicates`: one call traced twice is one step
- :mod:`~otel_agentguard.live.verdicts`, :mod:`~otel_agentguard.live.metrics`: alerts and verdicts onto spans and
  into metrics
- :mod:`~otel_agentguard.live.enforcement`, :mod:`~otel_agentguard.live.enforcer`, :mod:`~otel_agentguard.live.hooks`:
  enforce mode (cut points, interventions, stops)
- :mod:`~otel_agentguard.live.guard_ref`, :mod:`~otel_agentguard.live.registry`,
  :mod:`~otel_agentguard.live.providers`: which guard and which tracer provider a wrapper reports to
"""
