"""Turn a finished span into a :class:`Step`, for our own spans and foreign ones.

One adapter serves the live processor and the offline replay: both hand it
the span's attributes as a mapping, so a span judged live and the same span
read back from an OTLP file become the same step.

A span is a step when ``gen_ai.operation.name`` is ``execute_tool`` (a tool
step) or an inference operation such as ``chat`` (a model step). Spans of
OpenLLMetry and OpenInference that lack that attribute are recognised by
their own span-kind attributes. Where a value comes from (first match wins)
is part of the public contract and mirrored in each helper below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from otel_agentguard import attributes as A
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.claims import Grounds, classifier_may_wait
from otel_agentguard.judge.claims.reads import reads_in_messages
from otel_agentguard.judge.fingerprints._json_text import decode_payload
from otel_agentguard.judge.fingerprints.payloads import NO_MEMORY, PayloadFingerprints
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.repetition import RepetitionSummary, summarize
from otel_agentguard.judge.span_events import hidden
from otel_agentguard.judge.tool_calls import requested_call_count
from otel_agentguard.live.resolution import named_session

TOOL = "tool"
MODEL = "model"

_STR_ONLY = frozenset({str})
FINAL_FINISH_REASONS = frozenset({"stop", "end_turn", "completed"})
# The last: Vercel AI SDK.
TOOL_FINISH_REASONS = frozenset({"tool_calls", "tool_call", "tool_use", "function_call", "tool-calls"})
# The Vercel AI SDK (``ai``) names its spans' operation in ``ai.operationId``, not in gen_ai.operation.name.
_AI_SDK_TOOL_CALL = "ai.toolCall"
_AI_SDK_MODEL_CALLS = frozenset({
    "ai.generateText.doGenerate", "ai.streamText.doStream", "ai.generateObject.doGenerate", "ai.streamObject.doStream",
})


@dataclass(slots=True)  # treated as immutable; not frozen, whose __init__ is twice as slow
class Step:
    """One tool call or model call of a session, in the judge's terms."""

    session_id: str
    sequence: int
    kind: str  # TOOL or MODEL
    name: str  # tool name, or model name for model steps
    start_ns: int = 0
    end_ns: int = 0
    args_fingerprint: str | None = None
    result_fingerprint: str | None = None
    failed: bool = False
    empty: bool | None = None  # None: the result is not known
    effect: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    tool_calls: int | None = None
    final: bool = False
    claims: tuple[str, ...] = ()
    claim_rule: str | None = None  # the rule and clause position that made the answer a claim
    claim_clause: int | None = None
    cost_usd: float | None = None  # set when a source states the cost; else priced from tokens
    label: str | None = None  # a human step id from a trajectory file ("s03")
    output_repetition: RepetitionSummary | None = None  # model steps: how the answer repeats itself
    claims_checked: bool = True  # a final answer: False when no rule could read it (its language)
    agent: str | None = None  # the agent whose step it is (gen_ai.agent.name, its own or its agent span's)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


# The session a span names itself (kept here too: replay reads steps and sessions together).
explicit_session = named_session


#: Every attribute :func:`step_kind` reads: a span with none of them is no step.
STEP_KIND_ATTRIBUTES = (
    A.GEN_AI_OPERATION_NAME, "traceloop.span.kind", "openinference.span.kind", "llm.request.type", "ai.operationId",
)


#: The step kind a span's ``gen_ai.operation.name`` makes it (absent here: no step).
KIND_OF_OPERATION: dict[str, str] = {A.OP_EXECUTE_TOOL: TOOL, **dict.fromkeys(A.INFERENCE_OPERATIONS, MODEL)}


def step_kind(attrs: Mapping[str, Any]) -> str | None:
    """TOOL, MODEL or None, from the attributes alone (cheap: called per span)."""
    operation = attrs.get(A.GEN_AI_OPERATION_NAME)
    if operation is not None:
        if type(operation) is str:  # the usual case
            return KIND_OF_OPERATION.get(operation)
        if operation == A.OP_EXECUTE_TOOL:
            return TOOL
        if operation in A.INFERENCE_OPERATIONS:
            return MODEL
        return None
    # Foreign instrumentations that predate gen_ai.operation.name.
    kind = attrs.get("traceloop.span.kind") or attrs.get("openinference.span.kind")
    if kind in ("tool", "TOOL"):
        return TOOL
    if kind == "LLM" or attrs.get("llm.request.type") in ("chat", "completion"):
        return MODEL
    ai_sdk = attrs.get("ai.operationId")
    if ai_sdk == _AI_SDK_TOOL_CALL:
        return TOOL
    if ai_sdk in _AI_SDK_MODEL_CALLS:
        return MODEL
    return None


def nested_step(kind: str, attrs: Mapping[str, Any], parent_kind: str | None, parent_attrs: Mapping[str, Any]) -> bool:
    """Whether a step span directly inside ``parent`` is the same step seen twice."""
    if kind != parent_kind:
        return False
    if kind == MODEL:
        return True
    return tool_name(attrs, "") == tool_name(parent_attrs, "")


def step_from_attributes(
    attrs: Mapping[str, Any],
    kind: str,
    session_id: str,
    sequence: int,
    policy: Policy,
    span_name: str = "",
    start_ns: int = 0,
    end_ns: int = 0,
    status_error: bool = False,
    payloads: PayloadFingerprints = NO_MEMORY,
) -> Step:
    """The step a span's attributes describe. ``payloads``: where raw tool arguments and
    results are fingerprinted (a live guard remembers the texts it saw)."""
    if kind == TOOL:
        step = _tool_step(attrs, session_id, sequence, policy, span_name, start_ns, end_ns, status_error, payloads)
    else:
        step = _model_step(attrs, session_id, sequence, policy, start_ns, end_ns)
    agent = attrs.get(A.GEN_AI_AGENT_NAME)
    if type(agent) is str and agent:
        step.agent = agent
    return step


def _tool_step(
    attrs: Mapping[str, Any],
    session_id: str,
    sequence: int,
    policy: Policy,
    span_name: str,
    start_ns: int,
    end_ns: int,
    status_error: bool,
    payloads: PayloadFingerprints,
) -> Step:
    name = tool_name(attrs, span_name)
    if name in ANSWER_TOOLS:
        return _answer_tool_step(attrs, name, session_id, sequence, policy, start_ns, end_ns, status_error)
    fingerprinter = None
    args_fp = attrs.get(A.TOOL_ARGS_FINGERPRINT)
    if args_fp is None:
        raw_args = _payload(attrs, _RAW_ARGUMENTS)
        if raw_args is not None:
            fingerprinter = policy.fingerprinter(name)
            args_fp = payloads.arguments(fingerprinter, raw_args)
    result_fp = attrs.get(A.TOOL_RESULT_FINGERPRINT)
    empty = attrs.get(A.TOOL_RESULT_EMPTY)
    if result_fp is None or empty is None:
        raw_result = _payload(attrs, _RAW_RESULT)
        if raw_result is not None:
            fingerprint, result_empty = payloads.result(fingerprinter or policy.fingerprinter(name), raw_result)
            if result_fp is None:
                result_fp = fingerprint
            if empty is None:
                empty = result_empty
    # (Positional: a call with a dozen keywords costs about twice as much, and every step is made here.)
    return Step(
        session_id, sequence, TOOL, name, start_ns, end_ns,
        str(args_fp) if args_fp is not None else None,  # args_fingerprint
        str(result_fp) if result_fp is not None else None,  # result_fingerprint
        status_error or bool(attrs.get(A.ERROR_TYPE)),  # failed
        bool(empty) if empty is not None else None,  # empty
        policy.effect(name, _effect(attrs.get(A.TOOL_EFFECT))),  # effect
    )


def _model_step(
    attrs: Mapping[str, Any],
    session_id: str,
    sequence: int,
    policy: Policy,
    start_ns: int,
    end_ns: int,
) -> Step:
    model = attrs.get(A.GEN_AI_RESPONSE_MODEL) or attrs.get(A.GEN_AI_REQUEST_MODEL) or attrs.get("llm.model_name")
    finish = _finish_reasons(attrs)
    # Parsing the output messages costs: only when our own attributes do not say it all.
    # (An answer recorded unchecked is read again: in replay a model judge may read it; so is one
    # the rules decided by inference, in replay only: live, the judge already has it.)
    read_again = attrs.get(A.FINAL_CLAIMS_CHECKED) is False or (
        attrs.get(A.FINAL_CLAIMS_BORDERLINE) is True and policy.claims.model_judge is not None
        and classifier_may_wait())
    needs_messages = A.FINAL_CLAIMS not in attrs or A.RESPONSE_TOOL_CALLS not in attrs or read_again
    messages = _output_messages(attrs) if needs_messages else None
    tool_calls = _int_or_none(attrs.get(A.RESPONSE_TOOL_CALLS))
    if tool_calls is None and messages is not None:
        tool_calls = _count_tool_calls(messages)
    if tool_calls is None and "ai.response.toolCalls" in attrs:  # Vercel AI SDK: a JSON list
        called = decode_payload(attrs["ai.response.toolCalls"])
        tool_calls = len(called) if isinstance(called, list) else None
    if tool_calls is None and needs_messages:
        tool_calls = requested_call_count(attrs)  # OpenInference's or older OpenLLMetry's flattened calls
    if not finish and messages:
        # No finish reason on the span (Pydantic AI's chat spans): the messages' own, else a
        # response of text alone is an answer.
        finish = tuple(str(m["finish_reason"]) for m in messages if isinstance(m, Mapping) and m.get("finish_reason"))
        if not finish and not tool_calls and _has_text(messages):
            finish = ("stop",)
    final = False
    if finish and not tool_calls:
        reasons = set(map(str.lower, finish))
        final = not FINAL_FINISH_REASONS.isdisjoint(reasons) and TOOL_FINISH_REASONS.isdisjoint(reasons)
    claims: tuple[str, ...] = ()
    claim_rule = claim_clause = None
    checked = True
    # Our recorded summary of how the answer repeats itself, else one computed from captured
    # answer text (a foreign span, or a replay without the summary) with the default profile's thresholds.
    recorded = attrs.get(A.OUTPUT_REPETITION)
    repetition = RepetitionSummary.from_attribute(recorded) if recorded is not None else None
    text = None  # the answer's text, read at most once
    if recorded is None:
        text = _answer_text(attrs, messages if needs_messages else _output_messages(attrs))
        if text:
            profile = policy.resolve_profile()
            repetition = summarize(text, profile.output_max_repeats, profile.output_max_repeated_chars)
    if final:
        stated = attrs.get(A.FINAL_CLAIMS)
        if stated is not None and read_again and (text or _answer_text(attrs, messages)):
            stated = None  # recorded unchecked or borderline, with its text: read again
        if stated is not None:
            claims = tuple(sorted(str(c) for c in _as_sequence(stated)))
            rule = attrs.get(A.FINAL_CLAIM_RULE)
            claim_rule = str(rule) if rule is not None else None
            claim_clause = _int_or_none(attrs.get(A.FINAL_CLAIM_CLAUSE))
            checked = attrs.get(A.FINAL_CLAIMS_CHECKED) is not False
        else:
            if text is None:
                text = _answer_text(attrs, messages)
            if text:
                reads = _reads_recorded(attrs, policy)
                verdict = policy.claims.verdict(text, Grounds(reads) if reads else None)
                claims, claim_rule, claim_clause = verdict.categories, verdict.rule, verdict.clause
                checked = verdict.checked
    # The usual token counts read inline, anything else through _tokens.
    input_tokens = attrs.get(A.GEN_AI_USAGE_INPUT_TOKENS)
    if type(input_tokens) is not int or not 0 <= input_tokens <= _ranges.MAX_COUNT:
        input_tokens = _tokens(attrs, A.GEN_AI_USAGE_INPUT_TOKENS, A.LEGACY_INPUT_TOKENS)
    output_tokens = attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)
    if type(output_tokens) is not int or not 0 <= output_tokens <= _ranges.MAX_COUNT:
        output_tokens = _tokens(attrs, A.GEN_AI_USAGE_OUTPUT_TOKENS, A.LEGACY_OUTPUT_TOKENS)
    return Step(
        session_id, sequence, MODEL, str(model or ""), start_ns, end_ns,
        None, None, False, None, None,  # the tool step's fields
        input_tokens, output_tokens,
        str(model) if model else None,
        finish, tool_calls, final, claims,
        claim_rule if claims else None, claim_clause if claims else None,
        None, None, repetition,  # cost_usd (priced from the tokens), label, output_repetition
        checked,
    )


# --- small readers, each forgiving of what foreign spans put there -------------------


_RAW_ARGUMENTS = (A.GEN_AI_TOOL_CALL_ARGUMENTS, "traceloop.entity.input", "input.value", "ai.toolCall.args")
_RAW_RESULT = (A.GEN_AI_TOOL_CALL_RESULT, "traceloop.entity.output", "output.value", "ai.toolCall.result")


#: Tools through which an agent gives its final answer (smolagents' ``final_answer``): a call of
#: one is the run's answer, judged as a model's final answer is, claims included.
ANSWER_TOOLS = frozenset({"final_answer"})


def _answer_tool_step(attrs: Mapping[str, Any], name: str, session_id: str, sequence: int, policy: Policy,
                      start_ns: int, end_ns: int, status_error: bool) -> Step:
    text = _payload(attrs, _RAW_RESULT)
    if not isinstance(text, str):
        arguments = decode_payload(_payload(attrs, _RAW_ARGUMENTS))
        if isinstance(arguments, Mapping):  # smolagents' {"args": [], "kwargs": {"answer": ...}}
            arguments = arguments.get("kwargs", arguments)
        text = arguments.get("answer") if isinstance(arguments, Mapping) else None
    verdict = policy.claims.verdict(text) if isinstance(text, str) and text else None
    claims = verdict.categories if verdict is not None else ()
    return Step(session_id, sequence, MODEL, name, start_ns, end_ns, failed=status_error,
                finish_reasons=("stop",), tool_calls=0, final=not status_error, claims=claims,
                claim_rule=verdict.rule if claims and verdict else None,
                claim_clause=verdict.clause if claims and verdict else None,
                claims_checked=verdict.checked if verdict is not None else True)


def _first(attrs: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The first value that is not None."""
    for key in keys:
        value = attrs.get(key)
        if value is not None:
            return value
    return None


def _payload(attrs: Mapping[str, Any], keys: Sequence[str]) -> Any:
    """The first raw payload that is content, not a placeholder for content not captured: a
    "[REDACTED]" fingerprinted would make every call look the same."""
    value = _first(attrs, keys)
    return None if hidden(value) else value


def tool_name(attrs: Mapping[str, Any], span_name: str = "") -> str:
    """A tool span's tool name: ``gen_ai.tool.name``, a foreign spelling, else from the span name."""
    return str(
        attrs.get(A.GEN_AI_TOOL_NAME)
        or attrs.get("traceloop.entity.name")
        or attrs.get("tool.name")
        or attrs.get("ai.toolCall.name")
        or _tool_from_span_name(span_name)
    )


def _tool_from_span_name(span_name: str) -> str:
    # GenAI convention: "execute_tool {gen_ai.tool.name}".
    prefix = A.OP_EXECUTE_TOOL + " "
    return span_name[len(prefix):] if span_name.startswith(prefix) else (span_name or "unknown")


_EFFECTS = ("read", "write")


def _effect(value: Any) -> str | None:
    return value if value in _EFFECTS else None


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # foreign spans may hold anything, even inf
        return None


def _tokens(attrs: Mapping[str, Any], key: str, legacy: Sequence[str]) -> int:
    value = attrs.get(key)
    if type(value) is int and 0 <= value <= _ranges.MAX_COUNT:  # what instrumentations record
        return value
    value = _int_or_none(value)
    if value is None:
        value = _int_or_none(_first(attrs, legacy))
    if value is not None and value > _ranges.MAX_COUNT:
        _ranges.drop()  # a count no real call reaches: dropped, counted as an internal error
        return 0
    return max(value or 0, 0)


def _as_sequence(value: Any) -> Sequence[Any]:
    kind = type(value)
    if kind is tuple or kind is list:  # what spans hold; the ABC check below is slow
        return cast(Sequence[Any], value)
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return value
    return ()


def _finish_reasons(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    value = attrs.get(A.GEN_AI_RESPONSE_FINISH_REASONS)
    if value is None:
        value = attrs.get("gen_ai.completion.0.finish_reason")  # older OpenLLMetry
    if value is None:
        value = attrs.get("llm.finish_reason")  # OpenInference
    if type(value) is tuple and _STR_ONLY.issuperset(map(type, value)):
        return value  # what an SDK span and a replay hold: read as it is
    if type(value) is str and value.startswith("["):
        value = decode_payload(value)  # a JSON list in a string (Microsoft Agent Framework writes '["stop"]')
    return tuple(str(v) for v in _as_sequence(value) if v is not None)


def _output_messages(attrs: Mapping[str, Any]) -> list[Any] | None:
    raw = attrs.get(A.GEN_AI_OUTPUT_MESSAGES)
    if raw is None:
        return None
    value = decode_payload(raw)
    return value if isinstance(value, list) else None


def _parts(message: Any) -> list[Any]:
    parts = message.get("parts") if isinstance(message, Mapping) else None
    return parts if isinstance(parts, list) else []


def _count_tool_calls(messages: list[Any]) -> int:
    return sum(
        1 for message in messages for part in _parts(message)
        if isinstance(part, Mapping) and part.get("type") == "tool_call"
    )


def _has_text(messages: list[Any]) -> bool:
    # A text part counts even without its content (recorded with content capture off).
    return any(isinstance(part, Mapping) and part.get("type") == "text" for m in messages for part in _parts(m))


def _reads_recorded(attrs: Mapping[str, Any], policy: Policy) -> list[str]:
    """The results of read tools a recorded request carries (captured input messages), if any."""
    raw = attrs.get(A.GEN_AI_INPUT_MESSAGES)
    if raw is None:
        return []
    return reads_in_messages(decode_payload(raw), lambda name: policy.effect(name))


def _answer_text(attrs: Mapping[str, Any], messages: list[Any] | None) -> str:
    if messages is not None:
        return "\n".join(
            str(part.get("content") or "") for message in messages for part in _parts(message)
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    text = (attrs.get("gen_ai.completion.0.content") or attrs.get("llm.output_messages.0.message.content")
            or attrs.get("output.value") or attrs.get("ai.response.text"))
    # (a placeholder where content capture is off: there is no answer to read)
    return text if isinstance(text, str) and not hidden(text) else ""
