from array import array
from typing import Any

from otel_agentguard.judge import SessionJudge
from otel_agentguard.policy import Policy
from otel_agentguard.pricing import Price, PriceTable
from otel_agentguard.probes import Alert, SessionTotals
from otel_agentguard.steps import Step

def configure(
    judge_type: type[SessionJudge], totals_type: type[SessionTotals], step_type: type[Step], tool: str, model: str,
    write: str, array_type: type[array[Any]], no_words: array[int],
    probe_types: tuple[type, ...], fired_bits: tuple[int, ...], last_actions: int, longest_cycle: int,
    max_states: int, no_call: int, policy_type: type[Policy], price_table_type: type[PriceTable], /,
) -> None: ...
def price_reads(price_type: type[Price], pins: tuple[tuple[Any, str, Any], ...], /) -> None: ...
def observe(judge: SessionJudge, step: Step, /) -> list[Alert] | None: ...
