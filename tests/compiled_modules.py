"""What a test of an optional compiled module does when that module is missing (tests helper).

The package builds its C modules only where a C compiler is at hand. Without one, their tests
skip; where ``make test`` found one (``AGENTGUARD_TEST_REQUIRE_COMPILED=1``), a missing module
means the build went wrong, and its tests fail instead.
"""

from __future__ import annotations

import os
import sys
import tracemalloc
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def skip_unless_built(built: bool, module: str, without_it: str) -> None:
    """Skip (or fail, see above) unless ``module`` was built; ``without_it``: what runs instead."""
    if built:
        return
    if os.environ.get("AGENTGUARD_TEST_REQUIRE_COMPILED") == "1":
        pytest.fail(f"a C compiler is at hand but {module} was not built")
    pytest.skip(f"the package was built without a C compiler: {without_it}")


def assert_frees_what_it_takes(run: Callable[[], None]) -> None:
    """``run`` (a few hundred calls into a compiled module, errors included) leaves no memory
    behind: run once to fill whatever it caches, then twice more under tracemalloc, which must
    see the second leave what the first left."""
    tracemalloc.start()
    try:
        run()
        before = tracemalloc.get_traced_memory()[0]
        run()
        assert tracemalloc.get_traced_memory()[0] - before < 1024
    finally:
        tracemalloc.stop()


def python_code_run(run: Callable[[], T]) -> tuple[T, list[CodeType]]:
    """What ``run`` returns, and the code of every Python function it calls, in order (seen with
    ``sys.setprofile``): how a test shows that a compiled path ran no Python code, or which Python
    code it handed to."""
    ran: list[CodeType] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            ran.append(frame.f_code)

    previous = sys.getprofile()  # a profiler's of the user's, say: put back afterwards
    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(previous)
    return result, ran
