"""Environment variables read by otel_agentguard. Each constant's name equals its value."""

OTEL_AGENTGUARD_MODE = "OTEL_AGENTGUARD_MODE"
"""``observe`` (default) or ``enforce``."""

OTEL_AGENTGUARD_POLICY = "OTEL_AGENTGUARD_POLICY"
"""Path of the TOML policy file. Unset: the built-in defaults."""

OTEL_AGENTGUARD_PROFILE = "OTEL_AGENTGUARD_PROFILE"
"""Profile for sessions that do not name one. Unset: the policy's default profile."""

OTEL_AGENTGUARD_FINGERPRINT_KEY = "OTEL_AGENTGUARD_FINGERPRINT_KEY"
"""Secret key of the fingerprint hash. Unset: a random key per process."""

OTEL_AGENTGUARD_MAX_SESSIONS = "OTEL_AGENTGUARD_MAX_SESSIONS"
"""Most sessions judged at once (default 10000); the least recently used beyond it end as ``abandoned``."""

OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S = "OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S"
"""Seconds without a step after which a session ends as ``abandoned`` (default 900)."""

OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""``true`` puts raw arguments, results, prompts and answers on spans. Off by default."""

OTEL_AGENTGUARD_JSONL_PATH = "OTEL_AGENTGUARD_JSONL_PATH"
"""File of the ``agentguard_jsonl`` traces exporter (default ``agentguard-traces.jsonl``)."""

OTEL_AGENTGUARD_REPAIR_HISTORY = "OTEL_AGENTGUARD_REPAIR_HISTORY"
"""``true``: repair unpaired tool calls in each request's history before it is sent (off by default)."""

OTEL_AGENTGUARD_DRAIN_DEADLINE_S = "OTEL_AGENTGUARD_DRAIN_DEADLINE_S"
"""Seconds after SIGTERM (with ``drain_on_sigterm``) a session still without a safe cut point stops
at its next call anyway (default 20: inside Kubernetes' 30-second grace period)."""

OTEL_AGENTGUARD_SERVE_TOKEN = "OTEL_AGENTGUARD_SERVE_TOKEN"
"""``agentguard serve`` answers 401 to requests without ``Authorization: Bearer <token>`` (unset: no check)."""

OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY = "OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY"
"""The bearer key of the policy's claims judge endpoint (``[claims] judge_url``), if it needs one."""
