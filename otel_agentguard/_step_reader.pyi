from collections.abc import Callable
from typing import Any

from otel_agentguard.payload_fingerprints import PayloadFingerprints
from otel_agentguard.policy import Policy
from otel_agentguard.repetition import RepetitionSummary
from otel_agentguard.steps import Step

def configure(
    step_type: type[Step], field_names: tuple[str, ...], defaults: tuple[Any, ...],
    keys: dict[str, str | tuple[str, ...]], tool: str, model: str, final_reasons: frozenset[str],
    tool_reasons: frozenset[str], read: str, write: str, max_count: int,
    tool_name: Callable[[dict[str, Any], str], str], summary_of: Callable[[Any], RepetitionSummary | None], /,
) -> None: ...
def policy_reads(policy_type: type[Policy], pins: tuple[tuple[Any, str, Any], ...], /) -> None: ...
def tool_step(
    attrs: dict[str, Any], session_id: str, sequence: int, policy: Policy, span_name: str, start_ns: int,
    end_ns: int, status_error: bool, payloads: PayloadFingerprints, /,
) -> Step | None: ...
def model_step(attrs: dict[str, Any], session_id: str, sequence: int, start_ns: int, end_ns: int, /) -> Step | None: ...
