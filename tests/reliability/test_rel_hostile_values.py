"""Whatever an application passes as tool arguments, the guard runs none of its code.

Mocks record every call, proxies send RPCs, lazy mappings never end, shelves
unpickle: each is passed to a guarded tool here, and the guard must neither
call into it nor take unbounded time, while values it can read (numpy arrays,
dataclasses, pydantic models) still tell calls apart.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import shelve
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock
from xmlrpc.client import ServerProxy
from xmlrpc.server import SimpleXMLRPCRequestHandler, SimpleXMLRPCServer

import numpy as np
import pydantic
import pytest

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.judge.fingerprints import canonical as fingerprint
from otel_agentguard.judge.fingerprints.canonical import Fingerprinter, is_empty
from otel_agentguard.judge.policy import Policy, parse_policy
from otel_agentguard.testing import GuardedTracing


def fp(value: Any) -> Any:
    return Fingerprinter("tool").arguments(value)


class Recorder:
    """Records every special method and attribute the guard might reach for."""

    calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        Recorder.calls.append(f"getattribute:{name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        Recorder.calls.append(f"getattr:{name}")
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        Recorder.calls.append("eq")
        return False

    def __hash__(self) -> int:
        Recorder.calls.append("hash")
        return 1

    def __iter__(self) -> Iterator[Any]:
        Recorder.calls.append("iter")
        return iter(())

    def __len__(self) -> int:
        Recorder.calls.append("len")
        return 0

    def __repr__(self) -> str:
        Recorder.calls.append("repr")
        return "Recorder()"

    def __str__(self) -> str:
        Recorder.calls.append("str")
        return "Recorder"

    def __lt__(self, other: object) -> bool:
        Recorder.calls.append("lt")
        return False


class RecordingStr(str):
    def __str__(self) -> str:
        Recorder.calls.append("str.__str__")
        return "x"

    def __lt__(self, other: object) -> bool:
        Recorder.calls.append("str.__lt__")
        return True

    def __eq__(self, other: object) -> bool:
        Recorder.calls.append("str.__eq__")
        return False

    __hash__ = str.__hash__

    def strip(self, *args: Any) -> str:
        Recorder.calls.append("str.strip")
        return ""


class RecordingDict(dict):
    def items(self) -> Any:
        Recorder.calls.append("dict.items")
        return super().items()

    def __iter__(self) -> Iterator[Any]:
        Recorder.calls.append("dict.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        Recorder.calls.append("dict.__len__")
        return super().__len__()


class RecordingList(list):
    def __iter__(self) -> Iterator[Any]:
        Recorder.calls.append("list.__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        Recorder.calls.append("list.__len__")
        return 5


@pytest.fixture(autouse=True)
def _clear_recorder():
    Recorder.calls = []
    yield


def test_no_special_method_of_an_application_object_is_called():
    values = (
        Recorder(),
        {"a": Recorder(), Recorder(): 1},
        [Recorder(), {"k": Recorder()}],
        {RecordingStr("k"): RecordingStr("v"), "plain": RecordingStr("w")},
        RecordingDict(a=1, b=RecordingList([1, 2])),
        {"order": RecordingStr("A1")},
    )
    Recorder.calls = []  # building the values above hashed some of them
    for value in values:
        f = Fingerprinter("tool")
        f.arguments(value)
        f.result(value)
        is_empty(value)
    assert Recorder.calls == []


def test_a_mock_records_nothing():
    for argument in (mock.MagicMock(), mock.MagicMock(spec=pydantic.BaseModel), mock.NonCallableMagicMock(),
                     mock.Mock(), mock.create_autospec(dict, instance=True)):
        children = dict(argument._mock_children)
        result = fp({"model": argument})
        assert result.opaque
        assert argument.mock_calls == []
        assert argument._mock_children == children  # no attribute was even looked up


def test_a_mock_passed_to_a_guarded_tool_records_nothing_and_the_step_says_opaque():
    with GuardedTracing() as tracing:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        def summarise(document: Any) -> str:
            return "ok"

        document = mock.MagicMock()
        with tracing.session("mock"):
            summarise(document)
        assert document.mock_calls == [] and not document._mock_children
        (span,) = [s for s in tracing.spans() if s.name == "execute_tool summarise"]
        assert span.attributes[A.TOOL_ARGS_OPAQUE] is True


class _Counting(SimpleXMLRPCRequestHandler):
    requests = 0

    def do_POST(self) -> None:  # noqa: N802 - the base class's naming
        type(self).requests += 1
        super().do_POST()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_xmlrpc_proxy_sends_no_request():
    server = SimpleXMLRPCServer(("127.0.0.1", 0), requestHandler=_Counting, logRequests=False, allow_none=True)
    server.register_function(lambda: {"state": "dict"}, "model_dump")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proxy = ServerProxy(f"http://127.0.0.1:{server.server_address[1]}", allow_none=True)
        assert proxy.model_dump() == {"state": "dict"}  # the proxy works, and counts
        before = _Counting.requests
        result = fp({"backend": proxy})
        Fingerprinter("tool").result(proxy)
        is_empty(proxy)
        assert _Counting.requests == before
        assert result.opaque
    finally:
        server.shutdown()
        server.server_close()


class _Unpickled:
    loads = 0

    def __init__(self) -> None:
        self.state = "row"

    def __setstate__(self, state: Any) -> None:
        _Unpickled.loads += 1


def test_a_shelf_is_not_read():
    backend: dict[bytes, bytes] = {}
    with shelve.Shelf(backend) as shelf:
        shelf["row"] = _Unpickled()
        assert pickle.loads(backend[b"row"]) is not None and _Unpickled.loads == 1
        _Unpickled.loads = 0
        result = fp({"table": shelf})
        is_empty(shelf)
        assert _Unpickled.loads == 0
        assert result.opaque


class Endless(Mapping):
    """A lazy mapping with no end: reading it would never return."""

    def __getitem__(self, key: Any) -> int:
        return 1

    def __iter__(self) -> Iterator[int]:
        return itertools.count()

    def __len__(self) -> int:
        return 2**62


def test_a_lazy_endless_mapping_returns_at_once():
    result = fp({"rows": Endless(), "n": 1})
    assert result.opaque


def test_every_container_kind_shares_one_element_budget():
    huge_dict = {f"k{i}": i for i in range(200_000)}
    for value in (huge_dict, list(range(200_000)), set(range(200_000)), {"a": [huge_dict]},
                  RecordingDict(huge_dict), tuple(range(200_000))):
        result = fp(value)
        assert result.truncated, type(value)
        assert not result.opaque
        assert result.size < 2_000_000  # the canonical form stops when the budget is spent
    assert not fp({"k": list(range(100))}).truncated


def test_a_huge_string_is_bounded_and_still_told_apart():
    big = "x" * (40 << 20)
    assert fp({"doc": big}).truncated
    assert fp({"doc": big}).size < 1000
    assert fp({"doc": big, "n": 1}) != fp({"doc": big, "n": 2})


def test_numpy_arrays_are_read_by_content_dtype_and_shape():
    a = np.arange(12, dtype=np.float64)
    assert fp(a) == fp(np.arange(12, dtype=np.float64))
    assert fp(a) != fp(a + 1)
    assert fp(a) != fp(a.reshape(3, 4))
    assert fp(a) != fp(a.astype(np.float32))
    assert fp(a[::2]) == fp(np.ascontiguousarray(a[::2]))  # a strided view reads as its values
    assert not fp(a).opaque
    assert fp(np.array([object(), 1], dtype=object)).opaque  # object arrays hold application objects
    huge = np.zeros(40 << 20, dtype=np.uint8)
    assert fp(huge).truncated


class Slotted:
    __slots__ = ("a",)

    def __init__(self, a: int) -> None:
        self.a = a


class Private:
    def __init__(self, secret: int) -> None:
        self._secret = secret


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: int
    y: list[int]


@dataclasses.dataclass
class SlottedData:
    __slots__ = ("x",)
    x: int


class Model(pydantic.BaseModel):
    order: str
    lines: list[int]


def test_values_that_used_to_collapse_into_one_fingerprint_now_differ():
    assert fp(Slotted(1)) != fp(Slotted(1))  # opaque: never a repeat
    assert fp(Private(1)).opaque
    assert fp(x for x in range(3)).opaque
    assert fp({1: "a", "1": "b"}) != fp({1: "b", "1": "a"})
    assert fp({None: "a", "null": "b"}) != fp({None: "b", "null": "a"})
    assert fp(Frozen(1, [2])) == fp(Frozen(1, [2])) != fp(Frozen(1, [3]))
    assert fp(SlottedData(1)) == fp(SlottedData(1)) != fp(SlottedData(2))
    assert fp(Model(order="A", lines=[1])).fingerprint == fp({"order": "A", "lines": [1]}).fingerprint
    assert fp(Model(order="A", lines=[1])) != fp(Model(order="B", lines=[1]))


def test_a_changing_numpy_result_is_no_loop_and_every_call_runs_in_enforce_mode():
    policy = parse_policy("version = 't'\n[profiles.default]\nmax_steps = 50\n")
    with GuardedTracing(policy, mode="enforce") as tracing:
        ran: list[int] = []

        @ag.tool(tracer_provider=tracing.tracer_provider)
        def poll(sensor: str) -> Any:
            ran.append(len(ran))
            return np.full(4, len(ran), dtype=np.int32)  # a new reading every time

        with tracing.session("poll"):
            results = [poll(sensor="s1") for _ in range(6)]
        assert ran == list(range(6))
        assert all(isinstance(result, np.ndarray) for result in results)
    assert tracing.verdict("poll").stop_reason != "tool_loop"


def test_kwargs_names_are_counted_not_exported():
    with GuardedTracing() as tracing:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        def notify(channel: str, **recipients: Any) -> str:
            return "sent"

        with tracing.session("kw"):
            notify(channel="mail", **{"alice@example.com": 1, "sk_live_51Hsecret": 2})
        (span,) = [s for s in tracing.spans() if s.name == "execute_tool notify"]
        assert list(span.attributes[A.TOOL_ARGS_KEYS]) == ["channel"]
        assert span.attributes[A.TOOL_ARGS_UNDECLARED_KEYS] == 2
        exported = repr(dict(span.attributes))
        assert "alice@example.com" not in exported and "sk_live" not in exported


def test_caches_stay_bounded_across_many_tools_and_unique_keys():
    policy = Policy.builtin()
    for tool in range(1_500):
        fingerprinter = policy.fingerprinter(f"tool_{tool}")
        fingerprinter.arguments({f"key_{tool}_{n}": n for n in range(20)})
    assert len(policy._fingerprinters) <= 1024
    assert len(fingerprint._labels) <= fingerprint._MAX_LABELS


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "-5", "0", "abc", "1e400"])
def test_bad_numbers_in_the_environment_are_refused_with_a_warning(raw, monkeypatch, caplog):
    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    monkeypatch.setenv("OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S", raw)
    monkeypatch.setenv("OTEL_AGENTGUARD_MAX_SESSIONS", raw)
    with caplog.at_level("WARNING"):
        processor = AgentGuardSpanProcessor()
    try:
        assert processor._store_options == (10_000, 900.0)
        assert "OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S" in caplog.text
        assert "OTEL_AGENTGUARD_MAX_SESSIONS" in caplog.text
    finally:
        processor.shutdown()
