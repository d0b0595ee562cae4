"""(1) Processor cost per span and (6) its scaling with live sessions and window size.

(1) The SDK with a BatchSpanProcessor and a dropping exporter, with and without the
agentguard processor; each repeat builds both providers afresh and drives the same spans,
the two in alternating order. Three span streams: 1,000 concurrent sessions of our own
model and tool spans (a tenth of them looping); a service's ordinary spans (an HTTP server
span and a database span per request, no GenAI attributes); and the same sessions as
another instrumentation writes them (raw tool arguments and results, no attributes of ours).

(6) Live sessions stay open (long-run budgets, new arguments every call, so every probe
keeps working); after an untimed warm-up that fills their windows, each repeat times the
same number of steps spread over 10 / 1,000 / 100,000 sessions, and at windows 6 and 64.
"""

from __future__ import annotations

import random
import time

from opentelemetry import trace

from bench import _harness
from bench._harness import Report, interleave, per_repeat, progress
from bench.workload import Driver, foreign_step, long_run_policy, make_sessions, run_concurrent, session_steps


def processor_cost(report: Report, repeats: int, quick: bool) -> None:
    sessions, steps = (20, 10) if _harness.SMOKE else (200, 10) if quick else (1000, 10)
    progress(f"processor cost: {sessions} concurrent sessions x ~{steps} spans, {repeats} repeats")
    workload = make_sessions(sessions, steps, seed=1)

    def variant(guard: bool):  # noqa: ANN202
        def measure() -> float:
            driver = Driver(guard)
            seconds, spans = run_concurrent(driver, workload, seed=2)
            driver.shutdown()
            return seconds / spans * 1e6

        return measure

    samples = interleave({"sdk": variant(False), "guard": variant(True)}, repeats)
    report.add("1 processor", "SDK + BatchSpanProcessor, per span", samples["sdk"], "us")
    report.add("1 processor", "same + agentguard processor, per span", samples["guard"], "us")
    report.add("1 processor", "agentguard adds, per span", per_repeat(samples["guard"], samples["sdk"],
                                                                      lambda a, b: a - b), "us")
    report.add("1 processor", "agentguard adds / SDK cost", per_repeat(samples["guard"], samples["sdk"],
                                                                     lambda a, b: (a - b) / b * 100), "%")


def _ratio_rows(report: Report, section: str, what: str, samples: dict[str, list[float]], target: float) -> None:
    """Per-span cost without and with the guard, and their ratio within each repeat against ``target``."""
    report.add(section, f"{what}: SDK + BatchSpanProcessor, per span", samples["sdk"], "us")
    report.add(section, f"{what}: same + agentguard, per span", samples["guard"], "us")
    report.add(section, f"{what}: with agentguard / without", per_repeat(samples["guard"], samples["sdk"],
                                                                         lambda a, b: a / b), "x",
               f"<= {target:g} x", lambda m: m <= target)


def ordinary_spans(report: Report, repeats: int, quick: bool) -> None:
    """A service's usual spans, which are no agent's steps: an HTTP server span and a database
    span inside it per request, no GenAI attributes. The guard sits on the global provider, so
    every such span passes through it.

    The difference sought is a few percent, smaller than a shared machine's drift over a
    second: so many short interleaved blocks (each variant on its own provider, kept warm),
    whose per-block ratios compare moments a few milliseconds apart."""
    requests = 50 if _harness.SMOKE else 500 if quick else 1000
    blocks = repeats if _harness.SMOKE else 10 * repeats
    progress(f"ordinary spans: {blocks} blocks of {requests:,} requests (HTTP server + DB span) per variant")
    http = {"http.request.method": "GET", "http.route": "/orders/{id}", "url.scheme": "https",
            "server.address": "shop.example", "http.response.status_code": 200, "network.protocol.version": "1.1"}
    db = {"db.system.name": "postgresql", "db.namespace": "shop", "db.operation.name": "SELECT",
          "db.collection.name": "orders", "db.query.text": "SELECT * FROM orders WHERE id = $1",
          "server.address": "db.internal", "server.port": 5432}
    drivers = {guard: Driver(guard) for guard in (False, True)}

    def variant(guard: bool):  # noqa: ANN202
        tracer = drivers[guard].tracer

        def measure() -> float:
            start = time.perf_counter()
            for _ in range(requests):
                with tracer.start_as_current_span("GET /orders/{id}", kind=trace.SpanKind.SERVER, attributes=http):
                    with tracer.start_as_current_span("SELECT shop.orders", kind=trace.SpanKind.CLIENT,
                                                      attributes=db):
                        pass
            return (time.perf_counter() - start) / (2 * requests) * 1e6

        return measure

    for driver in drivers.values():
        variant(driver.processor is not None)()  # warm: first spans build the tracer's caches
    try:
        samples = interleave({"sdk": variant(False), "guard": variant(True)}, blocks)
    finally:
        for driver in drivers.values():
            driver.shutdown()
    _ratio_rows(report, "1 processor", "ordinary spans (HTTP + DB, no GenAI)", samples, 1.05)
    report.note(f"ordinary spans: {blocks} interleaved block{'s' * (blocks != 1)} of {requests:,} requests per variant "
                "(a few percent is sought: short blocks keep each ratio's two halves moments apart).")


def foreign_spans(report: Report, repeats: int, quick: bool) -> None:
    """Model and tool spans of another instrumentation: raw ``gen_ai.tool.call.arguments`` and
    results instead of our fingerprints, sessions named by ``gen_ai.conversation.id`` only."""
    sessions = 20 if _harness.SMOKE else 200 if quick else 1000
    progress(f"foreign spans: {sessions} concurrent sessions x ~10 spans with raw arguments, {repeats} repeats")
    workload = [(session_id, [foreign_step(spec) for spec in steps])
                for session_id, steps in make_sessions(sessions, 10, seed=4)]

    def variant(guard: bool):  # noqa: ANN202
        def measure() -> float:
            driver = Driver(guard)
            seconds, spans = run_concurrent(driver, workload, seed=5, foreign=True)
            driver.shutdown()
            return seconds / spans * 1e6

        return measure

    samples = interleave({"sdk": variant(False), "guard": variant(True)}, repeats)
    _ratio_rows(report, "1 processor", "foreign GenAI spans, raw tool arguments", samples, 2.0)


class _LiveSessions:
    """A provider with ``count`` open sessions whose windows are full, stepped at random."""

    def __init__(self, count: int, window: int, guard: bool, warmup_steps: int, seed: int):
        self.driver = Driver(guard, policy=long_run_policy(window), max_sessions=max(count * 2, 10_000))
        self.rnd = random.Random(seed)
        self.contexts = []
        for index in range(count):
            span, context = self.driver.open(f"live-{seed}-{index}")
            self.contexts.append(context)
        self.step_rnd = random.Random(seed + 1)
        for context in self.contexts:
            for spec in session_steps(self.step_rnd, warmup_steps, looping=False, unique=True):
                self.driver.step(context, spec)
        self.pool = [spec for spec in session_steps(self.step_rnd, 4000, looping=False, unique=True) if spec]

    def measure(self, steps: int) -> float:
        rnd, contexts, pool, step = self.rnd, self.contexts, self.pool, self.driver.step
        picks = [(contexts[rnd.randrange(len(contexts))], pool[rnd.randrange(len(pool))]) for _ in range(steps)]
        start = time.perf_counter()
        for context, spec in picks:
            step(context, spec)
        return (time.perf_counter() - start) / steps * 1e6


def scaling(report: Report, repeats: int, quick: bool) -> None:
    steps = 200 if _harness.SMOKE else 4000 if quick else 20_000
    big = 300 if _harness.SMOKE else 10_000 if quick else 100_000
    usual = 100 if _harness.SMOKE else 1000  # the smoke run's counts are too small to mean anything
    few, middle = "10 sessions, window 6", f"{usual:,} sessions, window 6"
    configs = {
        "sdk only": (usual, 6, False, 12),
        few: (10, 6, True, 12),
        middle: (usual, 6, True, 12),
        f"{big:,} sessions, window 6": (big, 6, True, 2),
        f"{usual:,} sessions, window 64": (usual, 64, True, 130),
    }
    live = {}
    for name, (count, window, guard, warmup) in configs.items():
        progress(f"scaling: warming up {name}")
        live[name] = _LiveSessions(count, window, guard, warmup, seed=len(live) + 10)
    progress(f"scaling: {steps} steps per figure, {repeats} repeats")
    samples = interleave({name: (lambda s=state: s.measure(steps)) for name, state in live.items()}, repeats)
    for state in live.values():
        state.driver.shutdown()
    base = samples.pop("sdk only")
    report.add("6 scaling", "SDK only, per span", base, "us")
    for name, values in samples.items():
        report.add("6 scaling", f"{name}: agentguard adds", per_repeat(values, base, lambda a, b: a - b), "us")
    # Against 10 sessions (whose state stays in the CPU caches) and against 1,000 (the usual case):
    # an O(1) probe stays flat from 1,000 to 100,000 sessions and from window 6 to window 64.
    for reference in (few, middle):
        first = samples[reference]
        for name, values in samples.items():
            if name == reference or (reference == middle and name == few):
                continue
            label = reference.split(" sessions")[0] + " sessions"
            report.add("6 scaling", f"{name} / {label}, total per span",
                       per_repeat(values, first, lambda a, b: a / b), "x", "flat (<= 1.25 x)", lambda m: m <= 1.25)
