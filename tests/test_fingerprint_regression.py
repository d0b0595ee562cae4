"""Regression tests for the fast paths added by the benchmark work.

* The canonical form changed encoding (JSON-shaped, faster to write) but must make
  exactly the same values equal as before: checked pairwise against the previous
  implementation (kept in ``fingerprint_v1_reference.py``) on generated corpora.
* The inline fast path for dicts and lists writes what the general path writes.
* The replay reader's optional orjson path reads every line as the stdlib does.
* The processor's cheap attribute access sees what the public API shows.
"""

from __future__ import annotations

import json
import random
from typing import Any

import fingerprint_v1_reference as v1
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard.judge.fingerprints.canonical import DEFAULT_NOISE_KEYS, Fingerprinter, _Canonicalizer, _Walk

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numberish = st.sampled_from(["1", "1.0", "1e0", "1.50", "1.5", "-0", "0", "007", "7", "1e16", "1E3", "1000", "-42",
                             "NaN", "Infinity", "1٢", " 7", "+7", "0x10", "2026-01-01", "1.", ".5"])
scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | numberish | st.sampled_from([1.0, -0.0, 1e16, 1e-7, 0.00001, 10**20, -(10**19), 2.5])
)
keys = st.text(max_size=5) | st.sampled_from(sorted(DEFAULT_NOISE_KEYS) + ["urls", "1", "a", "b"])
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(keys | st.integers(min_value=-3, max_value=3), children, max_size=4)
    | st.frozensets(st.integers(max_value=5) | st.text(max_size=2), max_size=3),
    max_leaves=16,
)


def _variants(value: Any, rnd: random.Random) -> Any:
    """A value that may or may not be canonically equal: shuffled keys, respelled numbers, noise."""
    if isinstance(value, dict):
        items = [(k, _variants(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        if rnd.random() < 0.3:
            items.append((rnd.choice(sorted(DEFAULT_NOISE_KEYS)), rnd.random()))
        return dict(items)
    if isinstance(value, list):
        items = [_variants(v, rnd) for v in value]
        if rnd.random() < 0.2:
            rnd.shuffle(items)
        return items
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int) and rnd.random() < 0.5:
        return rnd.choice([str(value), float(value) if abs(value) < 2**53 else value, value])
    if isinstance(value, str) and rnd.random() < 0.3:
        try:
            return rnd.choice([json.loads(value), value])
        except ValueError:
            return value
    return value


def _same(module_or_fp: Any, a: Any, b: Any, unordered: frozenset[str]) -> bool:
    if module_or_fp is v1:
        f = v1.Fingerprinter("tool", unordered_keys=unordered)
    else:
        f = Fingerprinter("tool", unordered_keys=unordered)
    return f.canonical(a) == f.canonical(b)


@PROPS
@given(a=values, b=values, seed=st.integers(0, 2**16), unordered=st.sampled_from([frozenset(), frozenset({"urls"})]))
def test_the_new_form_makes_exactly_the_same_values_equal_as_before(a: Any, b: Any, seed: int,
                                                                     unordered: frozenset[str]) -> None:
    variant = _variants(a, random.Random(seed))
    for left, right in ((a, b), (a, variant), ({"urls": [a, b]}, {"urls": [b, variant]}), ([a], [variant])):
        assert _same(v1, left, right, unordered) == _same(None, left, right, unordered), (left, right)


@PROPS
@given(value=st.dictionaries(keys, values, max_size=6), unordered=st.sampled_from([frozenset(), frozenset({"urls"})]))
def test_the_inline_dict_path_writes_what_the_general_path_writes(value: dict[str, Any],
                                                                  unordered: frozenset[str]) -> None:
    canonical = _Canonicalizer(DEFAULT_NOISE_KEYS, unordered)
    fast = canonical._dict(value, 0, _Walk(), False)[0]
    general = canonical._mapping(value, 0, _Walk())
    assert fast == general


@PROPS
@given(value=st.dictionaries(st.text(max_size=5), values, max_size=6))
def test_arguments_keys_and_size_are_unchanged_by_the_fast_path(value: dict[str, Any]) -> None:
    result = Fingerprinter("tool").arguments(value)
    assert result.keys == tuple(sorted(str(k) for k in value))
    assert result.size == len(Fingerprinter("tool").canonical(value).encode("utf-8", "surrogatepass"))


def test_the_hash_state_follows_a_key_rotation() -> None:
    from otel_agentguard.judge.fingerprints.canonical import set_fingerprint_key

    f = Fingerprinter("tool")
    set_fingerprint_key("one")
    first = (f.arguments({"a": 1}).fingerprint, f.result("x"))
    set_fingerprint_key("two")
    second = (f.arguments({"a": 1}).fingerprint, f.result("x"))
    set_fingerprint_key("one")
    assert (f.arguments({"a": 1}).fingerprint, f.result("x")) == first != second
    set_fingerprint_key(None)


OTLP_LINES = [
    b'{"resourceSpans":[]}',
    b'{"a":18446744073709551616,"b":[1,2]}',
    b'{"a": 12345678901234567890123}',
    b'{"a":-9223372036854775809}',
    b'{"a":NaN,"b":Infinity}',
    b'{"a":"\\ud800"}',
    b'{"a":1e400}',
    b'\xef\xbb\xbf{"a":1}',
    b'{"a":1.5,"b":-0.0,"c":"x","d":null,"e":true,"f":[{"g":"h"}]}',
    b'{"t":"1700000000000000000","u":1700000000000000000}',
    # Beyond 64 bits as an array item, after whitespace: orjson would read floats.
    b'{"a":[12345678901234567890123]}',
    b'{"a":[1, 18446744073709551616]}',
    b'{"a":\t18446744073709551616}',
    b'{"a":\n  -9223372036854775809}',
]


@pytest.mark.parametrize("line", OTLP_LINES)
def test_the_replay_line_reader_reads_every_line_as_the_stdlib_does(line: bytes) -> None:
    from otel_agentguard.replay.sources import _loads_line

    expected = json.loads(line)
    got = _loads_line(line)
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert [type(v) for v in _leaves(got)] == [type(v) for v in _leaves(expected)]


@pytest.mark.parametrize("line", [b"{bad json", b'{"a":1,}', b"[1,2"])
def test_the_replay_line_reader_fails_with_the_stdlib_error(line: bytes) -> None:
    from otel_agentguard.replay.sources import _loads_line

    with pytest.raises(json.JSONDecodeError) as ours:
        _loads_line(line)
    with pytest.raises(json.JSONDecodeError) as stdlib:
        json.loads(line)
    assert (ours.value.msg, ours.value.colno) == (stdlib.value.msg, stdlib.value.colno)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_processor_reads_the_attributes_the_public_api_shows() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agentguard.live.processor import span_attributes

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s", attributes={"a": 1, "b": ["x", "y"]})
    assert dict(span_attributes(span)) == dict(span.attributes)
    span.set_attribute("c", True)
    span.end()
    finished = exporter.get_finished_spans()[0]
    assert dict(span_attributes(finished)) == dict(finished.attributes) == {"a": 1, "b": ("x", "y"), "c": True}

    class Foreign:  # not an SDK span: the public attributes are used
        attributes = {"k": "v"}

    assert span_attributes(Foreign()) == {"k": "v"}
    assert span_attributes(object()) == {}


def test_replay_progress_bar_only_on_a_terminal_and_only_on_stderr(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import io

    from otel_agentguard.replay import cli

    trace = tmp_path / "big.jsonl"
    trace.write_text('{"resourceSpans": []}\n' * 2000)
    monkeypatch.setattr(cli._ProgressBar, "MIN_BYTES", 1024)
    assert cli._ProgressBar.for_inputs([str(trace)]) is None  # stderr is not a terminal here

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(cli.sys, "stderr", terminal)
    assert cli.run(["replay", "--format", "json", "--compact", "--allow-empty", str(trace)]) == 0
    assert json.loads(capsys.readouterr().out) == {"sessions": []}  # stdout holds only the result
    assert "reading [" in terminal.getvalue() and "100%" in terminal.getvalue()
    monkeypatch.setattr(cli._ProgressBar, "MIN_BYTES", 1 << 40)
    assert cli._ProgressBar.for_inputs([str(trace)]) is None  # small inputs: no bar
