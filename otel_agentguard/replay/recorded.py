"""A session read back from a file, ready for the judge."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_agentguard.judge.steps import Step


@dataclass(frozen=True)
class Expectation:
    """A regression label: the session must stop with these probes, or must pass."""

    must_stop: tuple[str, ...] = ()  # empty: must pass

    @property
    def must_pass(self) -> bool:
        return not self.must_stop


@dataclass
class RecordedSession:
    session_id: str
    source: str
    steps: list[Step] = field(default_factory=list)
    profile: str | None = None
    task_type: str | None = None
    title: str | None = None
    expect: Expectation | None = None
    error: bool = False
    interrupt: str | None = None
    start_ns: int = 0
    end_ns: int = 0
