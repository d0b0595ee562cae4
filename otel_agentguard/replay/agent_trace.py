"""Sessions from ``agent-trace.jsonl``: the event log of a minimal guard
(one JSON object per line with ``session_id``, ``sequence`` and ``event``).

``tool_call_planned`` events become tool steps; the log keeps only argument
fingerprints and spend, never results, so results are unknown to the judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_agentguard.judge import _ranges
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import TOOL, Step
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import RecordedSession

# Seconds since 1970 whose nanoseconds still fit OTLP's timestamps.
_TIMESTAMP = _ranges.Range(_ranges.MAX_UNIX_NANO / 1e9, False, "seconds since 1970 from 0 to 1.8e10")


def is_agent_trace_record(record: Any) -> bool:
    return isinstance(record, Mapping) and "session_id" in record and "event" in record


class AgentTraceCollector:
    def __init__(self, policy: Policy):
        self._policy = policy
        self._sessions: dict[str, RecordedSession] = {}
        self._spend: dict[str, float] = {}

    def add_record(self, record: Mapping[str, Any], path: str, line: int) -> None:
        if not is_agent_trace_record(record):
            raise InputError(path, "expected an agent-trace event with 'session_id' and 'event'", line)
        session_id = str(record["session_id"])
        try:
            at_ns = int(_ranges.check(record.get("timestamp", 0), "timestamp", _TIMESTAMP) * 1e9)
            sequence = int(_ranges.check(record.get("sequence", 0), "sequence", _ranges.COUNT))
            projected = record.get("projected_spend_usd")
            if projected is not None:
                _ranges.check(projected, "projected_spend_usd", _ranges.USD)
        except _ranges.OutOfRange as exc:
            raise InputError(path, str(exc), line) from None
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = RecordedSession(session_id, path, start_ns=at_ns)
        session.end_ns = max(session.end_ns, at_ns)
        if record["event"] != "tool_call_planned":
            return
        tool = str(record.get("tool") or "unknown")
        fingerprint = record.get("argument_fingerprint")
        cost = None
        if projected is not None:
            cost = max(float(projected) - self._spend.get(session_id, 0.0), 0.0)
            self._spend[session_id] = float(projected)
        session.steps.append(Step(
            session_id=session_id,
            sequence=sequence,
            kind=TOOL,
            name=tool,
            start_ns=at_ns,
            end_ns=at_ns,
            args_fingerprint=str(fingerprint) if fingerprint else None,
            effect=self._policy.effect(tool),
            cost_usd=cost,
        ))

    def sessions(self) -> list[RecordedSession]:
        for session in self._sessions.values():
            session.steps.sort(key=lambda step: step.sequence)
        return list(self._sessions.values())
