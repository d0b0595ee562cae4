"""This package's own trajectory files: hand-writable YAML or JSON sessions.

::

    policy: policy.toml            # optional, relative to this file
    sessions:
      - id: A
        title: logistics claim spins
        profile: default           # or task_type: refund
        expect: {stop: [tool_loop, fake_completion]}   # or: pass
        steps:
          - {id: s01, tool: search_kb, args: {q: rules}, result: "kb:hit-1", tokens: 180}
          - {id: s02, tool: refund, args: {order: A1}, error: TimeoutError}
          - {id: s03, model: gpt-4o, input_tokens: 900, output_tokens: 40, tool_calls: 1}
          - {id: s08, answer: "Your refund has been submitted.", tokens: 260}

A step is a tool step (``tool``), a final answer (``answer``) or a model
call (``model`` without ``answer``). Sequence numbers are the step positions
(1-based) unless a step gives ``seq``. YAML is read with ``safe_load`` only:
nothing in a file is ever executed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from otel_agentguard import attributes as A
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.fingerprints.canonical import is_empty
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import MODEL, TOOL, Step
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import Expectation, RecordedSession

_SESSION_KEYS = ("id", "title", "profile", "task_type", "expect", "steps", "error", "interrupt")
_STEP_KEYS = (
    "id", "seq", "tool", "args", "result", "error", "effect", "tokens", "input_tokens", "output_tokens",
    "model", "answer", "claims", "tool_calls", "cost_usd", "duration_s", "agent",
)
_BASE_NS = 1_000_000_000  # synthetic clock: a session starts at t=1s


def is_trajectory_document(document: Any) -> bool:
    return isinstance(document, Mapping) and ("sessions" in document or "steps" in document)


def sessions_from_document(document: Mapping[str, Any], path: str, policy: Policy) -> list[RecordedSession]:
    if "steps" in document and "sessions" not in document:
        # One session at the top level; its 'policy' key is the file's, read by the CLI.
        raw_sessions: Any = [{key: value for key, value in document.items() if key != "policy"}]
    else:
        raw_sessions = document.get("sessions")
    if not isinstance(raw_sessions, list):
        raise InputError(path, "'sessions' must be a list of sessions")
    result = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_sessions, start=1):
        where = f"sessions[{index}]"
        if not isinstance(raw, Mapping):
            raise InputError(path, f"{where}: expected a mapping with 'id' and 'steps'")
        _check_keys(raw, _SESSION_KEYS, path, where)
        session_id = str(raw.get("id") or f"{path}#{index}")
        if session_id in seen:
            raise _error(path, raw, f"{where}: duplicate session id {session_id!r}")
        seen.add(session_id)
        result.append(_session(raw, session_id, path, where, policy))
    return result


def _session(raw: Mapping[str, Any], session_id: str, path: str, where: str, policy: Policy) -> RecordedSession:
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, list):
        raise _error(path, raw, f"{where}: 'steps' must be a list")
    interrupt = raw.get("interrupt")
    if interrupt is not None and interrupt not in A.INTERRUPTS:
        raise _error(path, raw, f"{where}.interrupt: expected one of {', '.join(A.INTERRUPTS)}, got {interrupt!r}")
    session = RecordedSession(
        session_id=session_id,
        source=path,
        profile=_optional_text(raw, "profile", path, where),
        task_type=_optional_text(raw, "task_type", path, where),
        title=_optional_text(raw, "title", path, where),
        expect=_expectation(raw.get("expect"), path, f"{where}.expect") if "expect" in raw else None,
        error=bool(raw.get("error", False)),
        interrupt=interrupt,
        start_ns=_BASE_NS,
    )
    clock = _BASE_NS
    for position, step_raw in enumerate(steps_raw, start=1):
        step_where = f"{where}.steps[{position}]"
        if not isinstance(step_raw, Mapping):
            raise _error(path, raw, f"{step_where}: expected a mapping")
        _check_keys(step_raw, _STEP_KEYS, path, step_where)
        start = clock
        clock += int(_number(step_raw, "duration_s", path, step_where, 0.0, _ranges.SECONDS) * 1e9)
        session.steps.append(_step(step_raw, session_id, position, start, clock, path, step_where, policy))
    session.end_ns = clock
    return session


def _step(
    raw: Mapping[str, Any], session_id: str, position: int, start: int, end: int, path: str, where: str, policy: Policy
) -> Step:
    sequence = int(_number(raw, "seq", path, where, position, _ranges.COUNT))
    label = str(raw["id"]) if "id" in raw else None
    tokens = int(_number(raw, "tokens", path, where, 0, _ranges.COUNT))
    input_tokens = int(_number(raw, "input_tokens", path, where, 0, _ranges.COUNT))
    output_tokens = int(_number(raw, "output_tokens", path, where, tokens, _ranges.COUNT))
    cost = raw.get("cost_usd")
    agent = raw.get("agent")
    if agent is not None and not (isinstance(agent, str) and agent):
        raise _error(path, raw, f"{where}.agent: expected the agent's name, got {agent!r}")
    common: dict[str, Any] = dict(
        session_id=session_id, sequence=sequence, start_ns=start, end_ns=end, label=label, agent=agent,
        input_tokens=input_tokens, output_tokens=output_tokens,
        cost_usd=float(_number(raw, "cost_usd", path, where, 0.0, _ranges.USD)) if cost is not None else None,
    )
    if "tool" in raw:
        if "answer" in raw:
            raise _error(path, raw, f"{where}: a step is a tool call or an answer, not both")
        name = str(raw["tool"])
        fingerprinter = policy.fingerprinter(name)
        error = raw.get("error")
        has_result = "result" in raw
        effect = raw.get("effect")
        if effect is not None and effect not in ("read", "write"):
            raise _error(path, raw, f"{where}.effect: expected 'read' or 'write', got {effect!r}")
        return Step(
            kind=TOOL,
            name=name,
            args_fingerprint=fingerprinter.arguments(raw.get("args", {})).fingerprint,
            result_fingerprint=fingerprinter.result(raw["result"]) if has_result else None,
            failed=bool(error),
            empty=is_empty(raw["result"]) if has_result else None,
            effect=policy.effect(name, effect),
            **common,
        )
    model = raw.get("model")
    model = str(model) if model is not None else None
    if "answer" in raw:
        claims = raw.get("claims")
        rule = clause = None
        checked = True
        if claims is None:
            verdict = policy.claims.verdict(str(raw["answer"] or ""))
            found, rule, clause, checked = verdict.categories, verdict.rule, verdict.clause, verdict.checked
        elif isinstance(claims, list):
            found = tuple(sorted(str(c) for c in claims))
        else:
            raise _error(path, raw, f"{where}.claims: expected a list of claim categories")
        return Step(kind=MODEL, name=model or "", model=model, finish_reasons=("stop",), tool_calls=0,
                    final=True, claims=found, claim_rule=rule if found else None,
                    claim_clause=clause if found else None, claims_checked=checked, **common)
    if model is None:
        raise _error(path, raw, f"{where}: a step needs 'tool', 'answer' or 'model'")
    tool_calls = int(_number(raw, "tool_calls", path, where, 0, _ranges.COUNT))
    return Step(kind=MODEL, name=model, model=model, finish_reasons=("tool_calls",) if tool_calls else (),
                tool_calls=tool_calls, **common)


def _expectation(value: Any, path: str, where: str) -> Expectation:
    if value in ("pass", "must_pass"):
        return Expectation()
    if isinstance(value, Mapping) and set(value) == {"stop"}:
        probes = value["stop"]
        probes = [probes] if isinstance(probes, str) else probes
        if isinstance(probes, list) and probes and all(p in A.PROBE_NAMES for p in probes):
            return Expectation(tuple(probes))
    raise _error(
        path, value, f"{where}: expected 'pass' or {{stop: [probe, ...]}} with probes from {', '.join(A.PROBE_NAMES)}"
    )


def _error(path: str, raw: Any, message: str) -> InputError:
    """An error at ``raw``'s line when the YAML loader recorded one."""
    return InputError(path, message, getattr(raw, "line", None))


def _check_keys(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str, where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise _error(path, raw, f"{where}: unknown key {key!r} (expected one of: {', '.join(allowed)})")


def _number(raw: Mapping[str, Any], key: str, path: str, where: str, default: float, allowed: _ranges.Range) -> float:
    value = raw.get(key, default)
    if not _ranges.within(value, allowed):
        raise _error(path, raw, f"{where}.{key}: expected {allowed.expected}, got {_ranges.describe(value)}")
    return cast(float, value)  # a number, as within() checked


def _optional_text(raw: Mapping[str, Any], key: str, path: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, int)):
        raise _error(path, raw, f"{where}.{key}: expected text, got {value!r}")
    return str(value)
