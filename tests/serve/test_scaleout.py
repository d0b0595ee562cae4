"""Scale-out as collector-config/collector-judge.yaml runs it: N `agentguard serve` replicas behind
the Collector's loadbalancing exporter (routing_key: traceID). No Collector binary runs here, so
a client shards the spans exactly as that exporter does (tests/serve/loadbalancing.py).

Every session must be judged once, by the replica the ring names, and the verdicts must equal
those of a single replica that received everything."""

from __future__ import annotations

import random

import pytest
from loadbalancing import HashRing
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from serve_support import emit_session, keeping_tracer, start_serve_process, summary

pytest.importorskip("aiohttp")

KINDS = ("loop", "clean", "fake")


def _all_spans(count: int) -> list:
    tracer, kept = keeping_tracer()
    for index in range(count):
        emit_session(tracer, f"sess-{index:02d}", KINDS[index % 3], start_ns=1_700_000_000_000_000_000 + index)
    return kept


def _batches(spans: list, size: int, rng: random.Random) -> list[list]:
    """Export batches as an SDK's BatchSpanProcessor makes them: spans of many traces mixed."""
    shuffled = spans[:]
    rng.shuffle(shuffled)
    shuffled.sort(key=lambda span: span.parent is None)  # session spans end last: they come last
    return [shuffled[start:start + size] for start in range(0, len(shuffled), size)]


def test_three_replicas_judge_every_session_once_and_agree_with_one(tmp_path):
    spans = _all_spans(30)
    replicas = [start_serve_process(tmp_path, "--settle", "60", name=f"replica-{i}") for i in range(3)]
    single = start_serve_process(tmp_path, "--settle", "60", name="single")
    by_endpoint = {f"127.0.0.1:{replica.port}": replica for replica in replicas}
    ring = HashRing(list(by_endpoint))
    routed: dict[str, set[str]] = {endpoint: set() for endpoint in by_endpoint}
    try:
        rng = random.Random(7)
        for batch in _batches(spans, 40, rng):
            # The exporter splits each incoming batch per backend by trace id, one request each.
            per_backend: dict[str, list] = {}
            for span in batch:
                endpoint = ring.endpoint_for(span.context.trace_id.to_bytes(16, "big"))
                per_backend.setdefault(endpoint, []).append(span)
                if span.parent is None:
                    routed[endpoint].add(span.attributes["gen_ai.conversation.id"])
            for endpoint, part in per_backend.items():
                assert OTLPSpanExporter(endpoint=by_endpoint[endpoint].url).export(part).name == "SUCCESS"
            assert OTLPSpanExporter(endpoint=single.url).export(batch).name == "SUCCESS"
    finally:
        results = [process.stop() for process in (*replicas, single)]
    assert all(code == 0 for code, _ in results), results
    sharded = [verdict for replica in replicas for verdict in replica.verdicts()]
    judged_by = {endpoint: {v["agentguard.session.id"] for v in replica.verdicts()}
                 for endpoint, replica in by_endpoint.items()}
    assert sorted(v["agentguard.session.id"] for v in sharded) == [f"sess-{i:02d}" for i in range(30)]
    assert judged_by == routed  # each session judged where the ring sent it
    assert all(judged_by.values()), "every replica got a share"
    assert sorted(map(summary, sharded)) == sorted(map(summary, single.verdicts()))
    assert {summary(v)[1] for v in sharded} == {"tool_loop", "completed", "fake_completion"}


def test_the_ring_is_stable_and_spreads_traces():
    endpoints = ["judge-1:4317", "judge-2:4317", "judge-3:4317"]
    ring = HashRing(endpoints)
    assert HashRing(list(reversed(endpoints))).endpoint_for(b"\x01" * 16) == ring.endpoint_for(b"\x01" * 16)
    rng = random.Random(1)
    counts = {endpoint: 0 for endpoint in endpoints}
    for _ in range(3000):
        counts[ring.endpoint_for(rng.randbytes(16))] += 1
    assert min(counts.values()) > 600, counts
    # Adding a fourth replica moves roughly a quarter of the traces, not all of them.
    bigger = HashRing([*endpoints, "judge-4:4317"])
    rng = random.Random(2)
    ids = [rng.randbytes(16) for _ in range(3000)]
    moved = sum(ring.endpoint_for(i) != bigger.endpoint_for(i) for i in ids)
    assert 300 < moved < 1200, moved
