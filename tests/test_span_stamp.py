"""The guard's stamps land on spans exactly as the SDK's own set_attributes would put them,
and every span the fast path cannot vouch for goes through the SDK's public API.

Every test runs twice: with the compiled writers (where the package was built with them) and
with the Python functions alone, the reference."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, skip_unless_built
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard import span_stamp
from otel_agentguard.span_stamp import stamp, stamp_starting

COMPILED = span_stamp._compiled_stamp, span_stamp._compiled_stamp_starting


@pytest.fixture(autouse=True, params=["compiled", "python"])
def writers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled":
        skip_unless_built(COMPILED[0] is not None, "otel_agentguard._span_paths", "stamps are written in Python")
    else:
        monkeypatch.setattr(span_stamp, "_compiled_stamp", None)
        monkeypatch.setattr(span_stamp, "_compiled_stamp_starting", None)
    return str(request.param)


def _tracing(limits: SpanLimits | None = None) -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=limits) if limits is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def _through_the_sdk(span: Any, attributes: dict[str, Any]) -> None:
    span.set_attributes(attributes)


def _exported(at_start: Any, later: Any, limits: SpanLimits | None = None) -> dict[str, Any]:
    tracer, exporter = _tracing(limits)
    span = tracer.start_span("step", attributes={"gen_ai.operation.name": "execute_tool"})
    at_start(span, {"agentguard.session.id": "s-1", "agentguard.sequence": 7})
    later(span, {"agentguard.stop_reason": "completed", "agentguard.cost_usd": 0.25, "agentguard.flag": True,
                 "gen_ai.response.finish_reasons": ("tool_calls", "stop"), "agentguard.final.claims": ()})
    span.end()
    (finished,) = exporter.get_finished_spans()
    return dict(finished.attributes or {})


def test_stamps_are_exported_as_set_attributes_writes_them() -> None:
    assert span_stamp._DIRECT  # this SDK's layout is the one the fast path knows
    assert _exported(stamp_starting, stamp) == _exported(_through_the_sdk, _through_the_sdk) == {
        "gen_ai.operation.name": "execute_tool", "agentguard.session.id": "s-1", "agentguard.sequence": 7,
        "agentguard.stop_reason": "completed", "agentguard.cost_usd": 0.25, "agentguard.flag": True,
        "gen_ai.response.finish_reasons": ("tool_calls", "stop"), "agentguard.final.claims": (),
    }


@pytest.mark.parametrize("limits", [SpanLimits(max_span_attributes=2), SpanLimits(max_attribute_length=3)])
def test_attribute_limits_are_the_sdks_to_apply(limits: SpanLimits) -> None:
    assert _exported(stamp_starting, stamp, limits) == _exported(_through_the_sdk, _through_the_sdk, limits)


def test_values_that_are_not_plain_scalars_and_ended_spans_take_the_public_api(caplog: pytest.LogCaptureFixture) -> None:
    odd: dict[str, Any] = {"agentguard.claims": ["write"], "agentguard.none": None, "agentguard.mixed": ("a", 1),
                           "agentguard.numbers": (1, 2), "agentguard.nested": (("a",),)}
    ours, theirs = _stamped_beside_set(odd, late={"agentguard.stop_reason": "late"})
    assert ours == theirs  # the SDK's conversions, as it makes them
    assert ours["agentguard.claims"] == ("write",)
    assert "agentguard.stop_reason" not in ours
    assert "ended span" in caplog.text


def _stamped_beside_set(stamps: dict[str, Any], late: dict[str, Any] | None = None) -> tuple[dict, dict]:
    """The exported attributes of a span given ``stamps`` by stamp() and of one given them by the
    SDK's set_attributes (``late``: stamped on ours after it ended)."""
    tracer, exporter = _tracing()
    ours, theirs = tracer.start_span("ours"), tracer.start_span("theirs")
    stamp(ours, dict(stamps))
    theirs.set_attributes(dict(stamps))
    ours.end()
    theirs.end()
    if late is not None:
        stamp(ours, late)
    first, second = exporter.get_finished_spans()
    return dict(first.attributes or {}), dict(second.attributes or {})


def test_a_span_of_another_kind_is_written_through_its_own_api() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.written: dict[str, Any] = {}
            self._attributes = None
            self._lock = threading.Lock()

        def set_attributes(self, attributes: dict[str, Any]) -> None:
            self.written.update(attributes)

    span = Recorder()
    stamp_starting(span, {"agentguard.sequence": 1})
    stamp(span, {"agentguard.steps": 2})
    assert span.written == {"agentguard.sequence": 1, "agentguard.steps": 2}


def _ordered(writer: Any) -> list[tuple[str, Any]]:
    tracer, exporter = _tracing(SpanLimits(max_span_attributes=5))
    span = tracer.start_span("model", attributes={"gen_ai.response.model": "m-1", "gen_ai.operation.name": "chat"})
    writer(span, {"gen_ai.response.model": "m-2", "agentguard.sequence": 3})  # rewrites a key
    span.set_attributes({"late.one": 1, "late.two": 2})  # the span is full: the oldest goes
    span.end()
    (finished,) = exporter.get_finished_spans()
    return list((finished.attributes or {}).items())


def test_a_rewritten_key_moves_to_the_end_as_the_sdk_moves_it() -> None:
    # The SDK deletes and re-inserts a key it rewrites, which decides what a full span drops later.
    assert _ordered(stamp) == _ordered(_through_the_sdk)
    assert _ordered(stamp)[0][0] == "gen_ai.operation.name"


def test_a_span_class_that_overrides_the_writers_is_written_through_them() -> None:
    from opentelemetry.sdk.trace import Span as SDKSpan
    from opentelemetry.trace import SpanContext

    class Redacting(SDKSpan):
        def set_attributes(self, attributes: Any) -> None:
            super().set_attributes({key: "<redacted>" for key in attributes})

    span = Redacting("tool", SpanContext(trace_id=1, span_id=2, is_remote=False))
    span.start()
    stamp(span, {"gen_ai.tool.call.result": "secret", "agentguard.tool.result_empty": False})
    assert dict(span.attributes or {}) == {"gen_ai.tool.call.result": "<redacted>",
                                          "agentguard.tool.result_empty": "<redacted>"}


@pytest.mark.parametrize("value", [("a", 1), (1, 2), (("a",),), ("a", ["b"]), ("a", None), ["write"], None, b"x"])
def test_each_value_the_sdk_would_convert_takes_the_public_api_alone(value: Any) -> None:
    # Beside plain scalars and a tuple of strings, so the one odd value decides on its own.
    ours, theirs = _stamped_beside_set({"agentguard.count": 1, "agentguard.reasons": ("stop",), "agentguard.odd": value})
    assert ours == theirs


def test_the_compiled_writers_write_what_they_can_and_hand_back_the_rest(writers: str) -> None:
    if writers != "compiled":
        pytest.skip("the compiled writers' own test")
    compiled_stamp, compiled_starting = COMPILED
    tracer, _ = _tracing()
    span = tracer.start_span("step")
    assert compiled_starting(span, {"agentguard.sequence": 1})
    assert compiled_stamp(span, {"agentguard.steps": 2, "agentguard.reasons": ("stop",)})
    assert not compiled_stamp(span, {"agentguard.claims": ["write"]})  # the SDK converts a list: Python's
    assert not compiled_stamp(span, {f"agentguard.k{index}": index for index in range(17)})  # too many for one write
    assert compiled_stamp(span, {f"agentguard.n{index}": index for index in range(16)})  # as many as one takes
    span.end()
    assert compiled_stamp(span, {"agentguard.late": 1})  # an ended span: through the SDK, which refuses it
    assert dict(span.attributes or {}) == {"agentguard.sequence": 1, "agentguard.steps": 2,
                                          "agentguard.reasons": ("stop",),
                                          **{f"agentguard.n{index}": index for index in range(16)}}
    with pytest.raises(TypeError):
        compiled_stamp(span)


def test_the_compiled_writers_free_what_they_take(writers: str) -> None:
    if writers != "compiled":
        pytest.skip("the compiled writers' own test")
    compiled_stamp, compiled_starting = COMPILED
    tracer, _ = _tracing(SpanLimits(max_span_attributes=64))
    spans = [tracer.start_span("first"), tracer.start_span("second")]

    class FailingLock:
        def acquire(self) -> None:
            raise OSError("no lock")

    failing = tracer.start_span("failing")
    failing._lock = FailingLock()
    raised = [0]
    runs = [0]

    def calls() -> None:
        runs[0] += 1
        for _ in range(200):
            for span in spans:
                span._attributes._dict.pop("agentguard.sequence", None)
                span._attributes._dict.pop("agentguard.reasons", None)
                compiled_starting(span, {"agentguard.sequence": 1})
                compiled_stamp(span, {"agentguard.reasons": ("a", "b")})
                compiled_stamp(span, {"agentguard.sequence": 2})  # a rewritten key: through set_attributes
            try:  # (pytest.raises keeps what each raise made until the collector runs)
                compiled_stamp(failing, {"agentguard.sequence": 3})
            except OSError:
                raised[0] += 1

    assert_frees_what_it_takes(calls)
    assert raised == [200 * runs[0]]  # the lock's failure reached the caller every time


KEYS = st.sampled_from(["agentguard.a", "agentguard.b", "gen_ai.c", "d"])
VALUES = st.one_of(st.text(max_size=5), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                   st.tuples(st.text(max_size=3)), st.tuples(st.text(max_size=3), st.integers()),
                   st.lists(st.text(max_size=3), max_size=2), st.binary(max_size=2))
STAMPS = st.dictionaries(KEYS, VALUES, max_size=4)
# stamp_starting takes the guard's own stamps only: a session id, a number, a flag.
STARTING = st.dictionaries(KEYS, st.one_of(st.text(max_size=5), st.integers(), st.booleans()), max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=STAMPS, starting=STARTING, later=st.lists(STAMPS, max_size=3), limit=st.sampled_from([None, 3, 6]),
       ended=st.booleans())
def test_any_stamps_on_any_span_are_exported_as_set_attributes_exports_them(
        before: dict[str, Any], starting: dict[str, Any], later: list[dict[str, Any]], limit: int | None,
        ended: bool) -> None:
    def exported(at_start: Any, afterwards: Any) -> list[tuple[str, Any]]:
        tracer, exporter = _tracing(SpanLimits(max_span_attributes=limit))
        span = tracer.start_span("step", attributes=before)
        at_start(span, dict(starting))
        if ended:
            span.end()
        for stamps in later:
            afterwards(span, dict(stamps))
        if not ended:
            span.end()
        (finished,) = exporter.get_finished_spans()
        return list((finished.attributes or {}).items())

    assert exported(stamp_starting, stamp) == exported(_through_the_sdk, _through_the_sdk)


def test_a_span_that_has_ended_is_written_through_the_sdk_even_where_its_attributes_are_open() -> None:
    # The SDK closes an ending span's attributes too; a span that only says it has ended is
    # still the SDK's to refuse.
    tracer, exporter = _tracing()
    span = tracer.start_span("step")
    span._end_time = 1
    stamp(span, {"agentguard.stop_reason": "late"})
    span._end_time = None
    span.end()
    (finished,) = exporter.get_finished_spans()
    assert "agentguard.stop_reason" not in (finished.attributes or {})


# --- events ----------------------------------------------------------------------------------------

ALERT_EVENTS = [
    {"agentguard.probe": "tool_loop", "agentguard.evidence": (3, 4, 5), "agentguard.detail": "same call 3 times",
     "agentguard.disposal": "observed", "agentguard.sequence": 5},
    {"agentguard.probe": "budget_exceeded", "agentguard.evidence": (), "agentguard.detail": "steps 12 > 10",
     "agentguard.disposal": "stop", "agentguard.sequence": 12, "agentguard.budget.kind": "steps",
     "agentguard.repetition.offsets": (0, 40), "agentguard.ratio": 0.5, "agentguard.flag": False},
]


def _exported_events(add: Any, limits: SpanLimits | None = None, end_first: bool = False) -> list[Any]:
    tracer, exporter = _tracing(limits)
    span = tracer.start_span("agent")
    if end_first:
        span.end()
    for attributes in ALERT_EVENTS:
        add(span, "agentguard.stall", attributes)
    if not end_first:
        span.end()
    (finished,) = exporter.get_finished_spans()
    return [(event.name, dict(event.attributes or {}), event.dropped_attributes,
             {key: type(value) for key, value in (event.attributes or {}).items()}) for event in finished.events]


def _event_through_the_sdk(span: Any, name: str, attributes: dict[str, Any]) -> None:
    span.add_event(name, attributes)


@pytest.mark.parametrize("limits", [None, SpanLimits(max_event_attributes=3), SpanLimits(max_attribute_length=4)])
def test_events_are_exported_as_add_event_writes_them(limits: SpanLimits | None) -> None:
    assert span_stamp._DIRECT_EVENTS  # this SDK's layout is the one the fast path knows
    direct = _exported_events(span_stamp.add_event, limits)
    assert direct == _exported_events(_event_through_the_sdk, limits)
    assert len(direct) == 2
    if limits is None:
        assert direct[0][1]["agentguard.evidence"] == (3, 4, 5) and direct[0][2] == 0


def test_an_event_on_an_ended_span_is_dropped_with_the_sdks_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert _exported_events(span_stamp.add_event, end_first=True) == []
    assert "ended span" in caplog.text


def test_events_the_sdk_would_convert_or_a_span_of_another_class_take_the_public_api() -> None:
    tracer, _ = _tracing()
    written: list[tuple[str, Any]] = []

    class Redacting(type(tracer.start_span("probe"))):  # type: ignore[misc]
        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            written.append((name, attributes))

    span = tracer.start_span("agent")
    span.__class__ = Redacting
    span_stamp.add_event(span, "agentguard.stall", ALERT_EVENTS[0])
    assert written == [("agentguard.stall", ALERT_EVENTS[0])]
    plain = tracer.start_span("agent")
    span_stamp.add_event(plain, "agentguard.stall", {"agentguard.evidence": [1, 2]})  # a list: the SDK copies it
    assert plain.events[0].attributes["agentguard.evidence"] == (1, 2)


@pytest.mark.parametrize("attributes", [{"": 1, "a": 2}, {"a": (1, "b")}, {"a": (1, True)}, {"a": (1, 2.0)},
                                        {7: "seven"}])
def test_event_keys_and_mixed_tuples_are_the_sdks_to_clean(attributes: dict[Any, Any]) -> None:
    """An empty or non-str key, or a tuple of mixed types (which an older SDK drops): the public API."""
    def exported(add: Any) -> list[Any]:
        tracer, exporter = _tracing()
        span = tracer.start_span("agent")
        add(span, "agentguard.stall", dict(attributes))
        span.end()
        (finished,) = exporter.get_finished_spans()
        return [(dict(event.attributes or {}), event.dropped_attributes) for event in finished.events]

    assert exported(span_stamp.add_event) == exported(_event_through_the_sdk)
