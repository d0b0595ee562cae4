"""One model call as a GenAI ``chat`` span: shared by every provider instrumentation.

An adapter extracts a :class:`ModelResult` from the provider's response (or
its stream) and hands it to :meth:`ModelCall.finish`; this module turns it
into the span attributes the judge reads: usage, finish reasons, the number of
tool calls asked for and, for a final answer, its claim categories (found in
process, so the answer text itself need not leave it).

When another instrumentation already has a model span open for this very call
(the official openai-v2, OpenLLMetry, or our own LangChain span around a
provider SDK call), no second span is made: the open span is enriched instead,
and the judge still sees exactly one model step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.errors import AgentStopped
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.claims import Grounds
from otel_agentguard.judge.claims.model_judge import ModelJudge
from otel_agentguard.judge.claims.reads import reads_in_messages
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.repetition import RepetitionMonitor
from otel_agentguard.judge.steps import FINAL_FINISH_REASONS, MODEL, Step
from otel_agentguard.live import registry as _registry
from otel_agentguard.live.guard_ref import PROCESS_GUARD, GuardRef
from otel_agentguard.live.resolution import current_context, enclosing_session

_MAX_TEXT_CHARS = 64 * 1024  # enough for any answer's claims; bounded for huge outputs


@dataclass
class ModelResult:
    """What the judge needs from a provider response; text stays in process unless capture is on."""

    response_model: str | None = None
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reasons: list[str] = field(default_factory=list)
    tool_calls: int = 0
    tool_call_ids: list[str] = field(default_factory=list)  # as far as the response names them
    text: str = ""
    # The answer's repetition check, fed with every piece of text as it arrives (unbounded
    # text, bounded memory); None until the first text, or when the probe is disabled.
    repetition: RepetitionMonitor | None = field(default=None, repr=False, compare=False)
    _feeds_repetition: bool = field(default=True, repr=False, compare=False)

    def add_text(self, piece: str | None) -> None:
        if not piece:
            return
        if len(self.text) < _MAX_TEXT_CHARS:
            self.text += piece[: _MAX_TEXT_CHARS - len(self.text)]
        if not self._feeds_repetition:
            return
        try:
            monitor = self.repetition
            if monitor is None:
                monitor = self.repetition = _new_monitor()
                if monitor is None:
                    self._feeds_repetition = False
                    return
            monitor.feed(piece)
        except Exception as exc:  # deliberate: the check is lost for this answer, the call goes on
            _internal_errors.report("model_call.repetition", exc)
            self.repetition, self._feeds_repetition = None, False

    def adopt_repetition(self, other: ModelResult) -> None:
        """Keep the check that saw the streamed text when a stream's last event rebuilds the result."""
        self.repetition = other.repetition
        self._feeds_repetition = False

    @property
    def final(self) -> bool:
        return self.tool_calls == 0 and any(r.lower() in FINAL_FINISH_REASONS for r in self.finish_reasons)


def _new_monitor() -> RepetitionMonitor | None:
    """A repetition check with the thresholds of the session in context (its profile).

    Results are built by each provider's extractor before the call that owns them is known,
    so the thresholds come from the process's guard (the registry's choice), not the call's."""
    session = enclosing_session()
    profile = PROCESS_GUARD.policy.resolve_profile(
        session.profile if session else None, session.task_type if session else None
    )
    if A.OUTPUT_REPETITION_PROBE in profile.disabled_probes:
        return None
    return RepetitionMonitor(profile.output_max_repeats, profile.output_max_repeated_chars)


def is_model_span(span: Any) -> bool:
    if not span.is_recording():  # first: the usual current span is none at all (no attributes to look for)
        return False
    attrs = getattr(span, "attributes", None)
    return bool(attrs and attrs.get(A.GEN_AI_OPERATION_NAME) in A.INFERENCE_OPERATIONS)


class ModelCall:
    """The span of one model call: ours, or an enclosing model span we enrich."""

    __slots__ = ("span", "owned", "guard", "result", "request_messages", "_done", "_cut_checked", "_capture")

    def __init__(self, span: Span, owned: bool, guard: GuardRef | None = None, capture: bool | None = None,
                 request_messages: Any = None):
        self.span = span
        self.owned = owned
        self.guard = guard if guard is not None else PROCESS_GUARD
        self.result: ModelResult | None = None
        self._done = False
        self._cut_checked = False
        self._capture = capture  # whether content goes on the span, when read at the start
        # The request's conversation (a reference, never copied or exported): a final answer's
        # claims are grounded in the tool results it holds.
        self.request_messages = request_messages

    def after(self, session_id: str | None = None) -> None:
        """Enforce mode, once the call has finished: raise :class:`AgentStopped` when the
        answer must not be delivered (see :meth:`GuardRef.after_model_call`)."""
        if not _registry.any_enforcing:  # observe mode everywhere: no hook to ask, no call ids to gather
            return
        result = self.result
        if result is None:
            self.guard.after_model_call(session_id)
        else:
            self.guard.after_model_call(session_id, result.tool_calls, tuple(result.tool_call_ids))

    @classmethod
    def start(
        cls,
        tracer: trace.Tracer,
        *,
        guard: GuardRef | None = None,
        provider: str,
        request_model: str | None,
        operation: str = "chat",
        attributes: dict[str, Any] | None = None,
        input_messages: Any = None,
    ) -> ModelCall | None:
        """None when instrumentation is suppressed: call the provider untouched."""
        ctx = current_context()
        if instrumentation_suppressed(ctx):
            return None
        try:
            current = trace.get_current_span(ctx)
            if is_model_span(current):
                return cls(current, owned=False, guard=guard, request_messages=input_messages)
            span_attributes: dict[str, Any] = {
                A.GEN_AI_OPERATION_NAME: operation,
                A.GEN_AI_PROVIDER_NAME: provider,
                **(attributes or {}),
            }
            if request_model:
                span_attributes[A.GEN_AI_REQUEST_MODEL] = request_model
            capture = capture_content()  # read once: the prompt and the answer follow the same setting
            if capture and input_messages is not None:
                span_attributes["gen_ai.input.messages"] = _json(input_messages)
            name = f"{operation} {request_model}" if request_model else operation
            return cls(tracer.start_span(name, kind=SpanKind.CLIENT, attributes=span_attributes), owned=True,
                       guard=guard, capture=capture, request_messages=input_messages)
        except Exception as exc:  # deliberate: no span for this call, the call itself goes on
            _internal_errors.report("model_call.start", exc)
            return None

    def activated(self) -> AbstractContextManager[None]:
        """Make our span current while the provider runs (its HTTP spans nest under it)."""
        return _Current(self.span) if self.owned else _UNCHANGED

    def run(self, wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the provider with our span current; an exception ends the call and propagates."""
        try:
            with self.activated():
                return wrapped(*args, **kwargs)
        except BaseException as exc:
            self.finish(None, exc)
            raise

    async def run_async(self, wrapped: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """:meth:`run` for a coroutine function."""
        try:
            with self.activated():
                return await wrapped(*args, **kwargs)
        except BaseException as exc:
            self.finish(None, exc)
            raise

    def repetition_check(self, result_of: Callable[[], ModelResult]) -> Callable[[], None]:
        """For a stream: a check to run after each chunk, which stops the call at a repetition alert.

        In enforce mode (with ``output_repetition``'s ladder starting at ``stop``) our
        call ends at once, so the judge sees the partial answer and its alert; inside a
        model span another instrumentation owns, the summary goes on that span and the
        guard judges it at once. Either way :class:`~otel_agentguard.AgentStopped` is
        raised with ``partial_text_chars``, the characters of answer text the
        application received before the stop. A partial answer with no tool call is a
        safe cut point. In observe mode nothing happens here: the summary goes on the
        span when the stream ends, and the stream goes on.
        """
        delivered = 0

        def check() -> None:
            nonlocal delivered
            result = result_of()
            monitor = result.repetition
            if monitor is None:
                return
            if monitor.finding is None or self._cut_checked:
                delivered = monitor.chars
                return
            self._cut_checked = True
            if result.tool_calls or not self.guard.cuts_repeating_output():
                return
            attributes = getattr(self.span, "attributes", None) or {}
            session_id = attributes.get(A.SESSION_ID)
            try:
                if self.owned:
                    self.finish(result)  # the step is judged now, with the alert that stops it
                    self.after(session_id)
                else:
                    # The span is another instrumentation's and ends later: record the summary on
                    # it, and have the guard judge the repetition now.
                    summary = monitor.summary()
                    self.span.set_attribute(A.OUTPUT_REPETITION, summary.attribute)
                    sequence = attributes.get(A.SEQUENCE)
                    self.guard.stop_repeating_output(session_id, Step(
                        str(session_id or ""), sequence if type(sequence) is int else 0, MODEL,
                        result.response_model or "", output_repetition=summary,
                    ))
            except AgentStopped as stopped:
                stopped.breakpoint["partial_text_chars"] = delivered
                raise

        return check

    @property
    def done(self) -> bool:
        return self._done

    def finish(self, result: ModelResult | None, error: BaseException | None = None, *,
               collected: bool = False) -> None:
        """Record the outcome and end our span. Idempotent: streams may end several ways.

        ``collected``: the stream's end was noticed when it was garbage-collected. An
        enclosing span we only enriched is ended too if it is still open: the
        instrumentation that made it (openai-v2's stream wrapper) has no finaliser, and an
        unended span is never exported, so the call would vanish from the trace and from
        the judge.
        """
        if self._done:
            return
        self._done = True
        self.result = result
        try:
            if result is not None and self.span.is_recording():
                # The guard's policy only judges a final answer's claims: not looked up otherwise.
                policy = self.guard.policy if result.final else None
                reads = reads_in_messages(self.request_messages, policy.effect) if policy is not None else None
                attributes = response_attributes(result, policy, capture=self._capture, reads=reads)
                self.span.set_attributes(attributes)
                judge = policy.claims.model_judge if policy is not None else None
                if judge is not None and attributes.get(A.FINAL_CLAIMS_CHECKED) is False:
                    self._review(judge, result.text)
                elif judge is not None and attributes.get(A.FINAL_CLAIMS_BORDERLINE):
                    self._review(judge, result.text, held=(attributes[A.FINAL_CLAIMS],
                                                           attributes.get(A.FINAL_CLAIM_RULE)))
            if error is not None and self.owned:
                self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                self.span.set_attribute(A.ERROR_TYPE, type(error).__qualname__)
        except Exception as exc:  # deliberate
            _internal_errors.report("model_call.finish", exc)
        finally:
            if self.owned or (collected and self.span.is_recording()):
                self.span.end()


    def _review(self, judge: ModelJudge, text: str, held: tuple[tuple[str, ...], str | None] | None = None) -> None:
        """Hand an answer the rules could not read, or decided by inference (``held``: their
        categories and rule, which stand if the judge cannot say), to the model judge, which
        answers on its own thread; the session's end, not this call, waits for it."""
        stamped = getattr(self.span, "attributes", None) or {}
        self.guard.review_answer(stamped.get(A.SESSION_ID), stamped.get(A.SEQUENCE), judge.submit(text), held)


class _Current:
    """A span made current for a block: ``trace.use_span`` with nothing recorded and no end, as
    a plain class (a generator-based context manager costs several Python frames per call)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span):
        self._span = span

    def __enter__(self) -> None:
        self._token = context_api.attach(trace.set_span_in_context(self._span))

    def __exit__(self, *exc_info: object) -> None:
        context_api.detach(self._token)


_UNCHANGED: AbstractContextManager[None] = nullcontext()


def response_attributes(result: ModelResult, policy: Policy | None = None, *,
                        capture: bool | None = None, reads: list[str] | None = None) -> dict[str, Any]:
    """What the judge reads from a response; ``policy`` (its claim rules): the call's guard's;
    ``capture``: whether the answer goes on the span (``None``: the environment says); ``reads``:
    the results of the session's read tools the request carried (a final answer restating one of
    them claims nothing)."""
    attributes: dict[str, Any] = {
        A.GEN_AI_RESPONSE_FINISH_REASONS: tuple(result.finish_reasons),
        A.RESPONSE_TOOL_CALLS: result.tool_calls,
    }
    if result.response_model:
        attributes[A.GEN_AI_RESPONSE_MODEL] = result.response_model
    if result.response_id:
        attributes["gen_ai.response.id"] = result.response_id
    # A server's usage figures are range-checked: out of range, they are dropped (and counted).
    input_tokens = _ranges.live_count(result.input_tokens)
    if input_tokens is not None:
        attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    output_tokens = _ranges.live_count(result.output_tokens)
    if output_tokens is not None:
        attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    if result.final:
        # Our own call, not the span processor: the policy's classifier may be asked, in its time budget.
        claims = (policy or PROCESS_GUARD.policy).claims
        verdict = claims.explain(result.text, use_classifier=True, grounds=Grounds(reads) if reads else None)
        attributes[A.FINAL_CLAIMS] = tuple(verdict.categories)
        attributes[A.FINAL_CLAIMS_CHECKED] = verdict.checked
        if verdict.categories and verdict.rule:
            attributes[A.FINAL_CLAIM_RULE] = verdict.rule
            if verdict.clause is not None:
                attributes[A.FINAL_CLAIM_CLAUSE] = verdict.clause
        if verdict.borderline and claims.model_judge is not None:
            attributes[A.FINAL_CLAIMS_BORDERLINE] = True
    if result.repetition is not None:
        attributes[A.OUTPUT_REPETITION] = result.repetition.summary().attribute
    if capture if capture is not None else capture_content():
        attributes[A.GEN_AI_OUTPUT_MESSAGES] = _json([{
            "role": "assistant",
            "parts": [{"type": "text", "content": result.text}] if result.text else [],
            "finish_reason": result.finish_reasons[0] if result.finish_reasons else None,
        }])
    return attributes


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # deliberate: capture is best effort
        return f"<{type(value).__name__}>"
