"""``_internal_errors.report``: every contained failure is counted; the log is rate-limited
(once per kind, at most a few new kinds a minute) and, with content capture off, quotes no
exception message."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rel_support import content_capture, fuzz_settings, metric_sum

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.testing import GuardedTracing

LIMIT = _internal_errors._NEW_KINDS_PER_MINUTE  # noqa: SLF001
SECRET = "sk-live-IN-AN-EXCEPTION-MESSAGE-5521"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """A clean slate for the module's process-wide state, restored afterwards."""
    clock = Clock()
    monkeypatch.setattr(_internal_errors, "_clock", clock)
    monkeypatch.setattr(_internal_errors, "_logged", set())
    monkeypatch.setattr(_internal_errors, "_counts", {})
    monkeypatch.setattr(_internal_errors, "_window_start", None)
    monkeypatch.setattr(_internal_errors, "_window_logged", 0)
    monkeypatch.setattr(_internal_errors, "_window_noted", False)
    yield clock


def warnings_for(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_agentguard" and r.levelno == logging.WARNING]


def kinds_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m.split("(", 1)[1].split(")", 1)[0] for m in warnings_for(caplog) if "an internal error (" in m]


def test_each_kind_is_logged_once_and_counted_every_time(fresh, caplog):
    caplog.set_level(logging.DEBUG)
    for _ in range(5):
        _internal_errors.report("probe.cycle", ValueError("x"))
    assert kinds_logged(caplog) == ["probe.cycle"]
    assert _internal_errors.counts() == {"probe.cycle": 5}


def test_at_most_a_few_new_kinds_are_logged_per_minute_and_the_rest_later(fresh, caplog):
    caplog.set_level(logging.DEBUG)
    kinds = [f"kind.{n}" for n in range(3 * LIMIT)]
    for kind in kinds:
        _internal_errors.report(kind, RuntimeError("x"))
    assert kinds_logged(caplog) == kinds[:LIMIT]
    assert sum("within a minute" in m for m in warnings_for(caplog)) == 1  # one note that the log holds back
    assert _internal_errors.counts() == dict.fromkeys(kinds, 1)  # ...but every failure is counted

    fresh.now += 59
    _internal_errors.report(kinds[LIMIT], RuntimeError("x"))
    assert len(kinds_logged(caplog)) == LIMIT  # still the same minute

    fresh.now += 2
    caplog.clear()
    for kind in kinds:
        _internal_errors.report(kind, RuntimeError("x"))
    assert kinds_logged(caplog) == kinds[LIMIT:2 * LIMIT]  # the next minute: the next few, never a repeat


def test_kinds_beyond_the_bound_count_as_other(fresh, monkeypatch):
    monkeypatch.setattr(_internal_errors, "_MAX_KINDS", 3)
    for n in range(6):
        _internal_errors.report(f"kind.{n}")
    _internal_errors.report("kind.0")
    assert _internal_errors.counts() == {"kind.0": 2, "kind.1": 1, "kind.2": 1, _internal_errors.OTHER: 3}


def _fail_with_secret() -> None:
    try:
        {"card": SECRET}["missing"]
    except KeyError as inner:
        raise ValueError(f"could not fingerprint {SECRET}") from inner


@pytest.mark.parametrize("capture", [False, True])
def test_the_logged_traceback_quotes_no_exception_message_unless_capture_is_on(fresh, caplog, capture):
    caplog.set_level(logging.DEBUG)
    try:
        _fail_with_secret()
    except ValueError as exc:
        with content_capture(capture):
            _internal_errors.report("fingerprint.secret", exc)
    assert "fingerprint.secret" in caplog.text
    assert "_fail_with_secret" in caplog.text  # the frames are there, so it can still be reported
    assert "ValueError" in caplog.text
    assert (SECRET in caplog.text) is capture


def test_the_metric_counts_what_the_log_holds_back(fresh, caplog):
    caplog.set_level(logging.DEBUG)
    with GuardedTracing() as tracing:
        for n in range(2 * LIMIT):
            for _ in range(n % 3 + 1):
                _internal_errors.report(f"kind.{n}")
        counted = {dict(labels)["kind"]: value for labels, value in metric_sum(tracing, A.METRIC_INTERNAL_ERRORS).items()}
    assert counted == _internal_errors.counts()
    assert len(kinds_logged(caplog)) == LIMIT


@fuzz_settings(1000)
@given(events=st.lists(st.tuples(st.sampled_from([f"k{n}" for n in range(40)]), st.floats(0, 30)), max_size=120))
def test_the_log_never_exceeds_its_rate_and_the_counts_are_exact(events):
    records: list[tuple[float, str]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append((clock.now, record.getMessage()))

    clock = Clock()
    saved = (_internal_errors._clock, _internal_errors._logged, _internal_errors._counts,  # noqa: SLF001
             _internal_errors._window_start, _internal_errors._window_logged, _internal_errors._window_noted)  # noqa: SLF001
    handler = Capture()
    logger = logging.getLogger("otel_agentguard")
    logger.addHandler(handler)
    try:
        _internal_errors._clock, _internal_errors._logged, _internal_errors._counts = clock, set(), {}  # noqa: SLF001
        _internal_errors._window_start, _internal_errors._window_logged = None, 0  # noqa: SLF001
        _internal_errors._window_noted = False  # noqa: SLF001
        expected: dict[str, int] = {}
        for kind, advance in events:
            clock.now += advance
            _internal_errors.report(kind)
            expected[kind] = expected.get(kind, 0) + 1
        counts = _internal_errors.counts()
    finally:
        logger.removeHandler(handler)
        (_internal_errors._clock, _internal_errors._logged, _internal_errors._counts,  # noqa: SLF001
         _internal_errors._window_start, _internal_errors._window_logged, _internal_errors._window_noted) = saved  # noqa: SLF001
    assert counts == expected
    logged = [(at, m.split("(", 1)[1].split(")", 1)[0]) for at, m in records if "an internal error (" in m]
    assert len({kind for _, kind in logged}) == len(logged)  # a kind is logged at most once
    for at, _ in logged:  # no 60-second span holds more than two windows' worth
        assert sum(1 for other, _ in logged if at <= other < at + 60) <= 2 * LIMIT
    first_minute = [kind for at, kind in logged if at < (events[0][1] + 1000.0 if events else 0) + 60]
    assert len(first_minute) <= LIMIT
