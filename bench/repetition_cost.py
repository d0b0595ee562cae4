"""(7) Output repetition: the cost of the live check per streamed chunk, and that it stays flat.

Streams the labelled answers (``tests/data/output_repetition/answers.jsonl``) in
12-character deltas, the size the scripted server and most providers send,
through :class:`RepetitionMonitor` (what every streamed model call runs), beside
the baseline of only accumulating the text and the openai SDK's own work to decode
one chat-completions chunk (JSON and model construction, as its stream does). Then a 1 MB stream of each shape
(prose, CJK without punctuation, a chant) against a 100 KB one: the cost per chunk
must not grow with the length of the answer, nor the monitor's memory.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

from bench import _harness
from bench._harness import Report, interleave, per_repeat, progress
from otel_agentguard.judge.repetition import RepetitionMonitor

ANSWERS = Path(__file__).resolve().parent.parent / "tests" / "data" / "output_repetition" / "answers.jsonl"
DELTA_CHARS = 12
SHARE = 0.10  # of what the openai SDK itself spends decoding each chunk
FLAT = 1.5  # cost per chunk on a 1 MB answer over a 10 KB one


def _deltas(text: str) -> list[str]:
    return [text[i:i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)]


def _checked(deltas: list[str]) -> float:
    """Microseconds per chunk through the monitor."""
    start = time.perf_counter()
    monitor = RepetitionMonitor()
    for delta in deltas:
        monitor.feed(delta)
    monitor.summary()
    return (time.perf_counter() - start) / len(deltas) * 1e6


def _accumulated(deltas: list[str]) -> float:
    """Microseconds per chunk to only keep the text (the baseline every instrumentation pays)."""
    start = time.perf_counter()
    parts = []
    for delta in deltas:
        parts.append(delta)
    "".join(parts)
    return (time.perf_counter() - start) / len(deltas) * 1e6


def _sdk_decode(calls: int) -> float:
    """Microseconds the openai SDK spends turning one SSE chat chunk into its model object."""
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk

    payload = json.dumps({"id": "chatcmpl_1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                          "choices": [{"index": 0, "delta": {"content": "twelve chars"}, "logprobs": None,
                                       "finish_reason": None}]})
    start = time.perf_counter()
    for _ in range(calls):
        construct_type(type_=ChatCompletionChunk, value=json.loads(payload))
    return (time.perf_counter() - start) / calls * 1e6


def _shapes(total: int) -> dict[str, str]:
    rows = [json.loads(line) for line in ANSWERS.read_text(encoding="utf-8").splitlines()]
    honest = "\n\n".join(r["text"] for r in rows if r["label"] == "honest")
    cjk = "".join(f"第{n}行的内容没有任何标点符号只是一直写下去直到结束" for n in range(total // 20 + 1))
    chant = next(r["text"] for r in rows if r["id"] == "chanting-sentence-0")
    return {name: (text * (total // len(text) + 1))[:total]
            for name, text in (("prose", honest), ("CJK, no punctuation", cjk), ("chant", chant))}


def run(report: Report, repeats: int, quick: bool) -> None:
    rows = [json.loads(line) for line in ANSWERS.read_text(encoding="utf-8").splitlines()]
    streams = {label: [_deltas(r["text"]) for r in rows if r["label"] == label] for label in ("honest", "chanting")}
    for label, answers in streams.items():
        chunks = sum(len(d) for d in answers)
        progress(f"repetition: {len(answers)} {label} answers, {chunks} chunks of {DELTA_CHARS} chars")

        def checked(answers=answers, chunks=chunks) -> float:
            return sum(_checked(d) * len(d) for d in answers) / chunks

        def accumulated(answers=answers, chunks=chunks) -> float:
            return sum(_accumulated(d) * len(d) for d in answers) / chunks

        samples = interleave({"checked": checked, "accumulated": accumulated,
                              "sdk": lambda: _sdk_decode(50 if _harness.SMOKE else 500 if quick else 2000)}, repeats)
        report.add("repetition", f"{label} answers: check per chunk", samples["checked"], "us")
        report.add("repetition", f"{label} answers: only accumulating", samples["accumulated"], "us")
        report.add("repetition", f"openai SDK: decode one chat chunk (beside {label})", samples["sdk"], "us")
        report.add("repetition", f"{label} answers: check / SDK decode",
                   per_repeat(samples["checked"], samples["sdk"], lambda a, b: a / b), "x",
                   f"<= {SHARE:g}", lambda m: m <= SHARE)

    small, large = (2_000, 20_000) if _harness.SMOKE else (20_000, 200_000) if quick else (100_000, 1_000_000)
    for name, text in _shapes(large).items():
        progress(f"repetition: {name}, {small} vs {large} chars")
        short, long = _deltas(text[:small]), _deltas(text)
        samples = interleave({"short": lambda d=short: _checked(d), "long": lambda d=long: _checked(d)},
                             max(repeats, 3))
        report.add("repetition", f"{name}: per chunk, {large // 1000} KB / {small // 1000} KB",
                   per_repeat(samples["long"], samples["short"], lambda a, b: a / b), "x",
                   f"<= {FLAT:g} (flat)", lambda m: m <= FLAT)
        tracemalloc.start()
        monitor = RepetitionMonitor()
        for delta in long:
            monitor.feed(delta)
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        report.add("repetition", f"{name}: memory held after {large // 1000} KB", [held / 1024], "KiB",
                   "<= 8 KiB", lambda m: m <= 8)
