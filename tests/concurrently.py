"""Run a test's work on many threads at once, with every thread's exception failing the test
(an exception raised in a thread is otherwise printed and lost)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def run_concurrently(work: Callable[[T], object], items: Iterable[T]) -> None:
    """``work(item)`` for each item, each on its own thread; returns when all are done."""
    failures: list[BaseException] = []

    def run(item: T) -> None:
        try:
            work(item)
        except BaseException as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
