"""A stronger judge of claims, plugged in by the policy: ``[claims] classifier = "module:function"``.

The function is called as ``function(text)``, or ``function(text, found)`` when it takes a
second parameter: ``text`` is the final answer, ``found`` the claim categories the built-in
rules found (empty when the classifier is used ``instead`` of them). With ``confirm`` it is asked
only about answers the rules call a claim, so it can veto an alarm but costs nothing on other
answers. It returns the answer's claim categories (``["write"]`` or ``[]``), ``True``/``False`` as
shorthand for those, or ``None`` to keep the rules' verdict.

It runs on a worker thread with instrumentation suppressed (an LLM call made by the
classifier is neither a step of the session nor judged itself), never inside the span
processor, and is given a time
budget (``classifier_timeout_ms``): a classifier that is late, raises or returns something
unusable is ignored for that answer (the rules' verdict stands) and reported once in the log.
A small local model or a call to an LLM fits here; see docs/fake-completion.md.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import context

from otel_agentguard import _internal_errors

logger = logging.getLogger(__name__)

AFTER = "after"  # the rules run first; the classifier sees their verdict and has the last word
CONFIRM = "confirm"  # as "after", but only for answers the rules call a claim: a second opinion before an alarm
INSTEAD = "instead"  # the classifier decides alone; the rules only stand in when it fails
MODES = (AFTER, CONFIRM, INSTEAD)
DEFAULT_TIMEOUT_MS = 2000
_MAX_RUNNING = 4  # calls outstanding at once (a slow judge must not pile up threads)


class ClassifierLoadError(ValueError):
    """The ``module:function`` cannot be imported or is not callable."""


def load_callable(target: str) -> Callable[..., Any]:
    """Import ``module:function`` (``module:object.attribute`` works too)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ClassifierLoadError(f"expected 'module:function', got {target!r}")
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # deliberate: any import failure is the user's to see, in one line
        raise ClassifierLoadError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ClassifierLoadError(f"{module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ClassifierLoadError(f"{target!r} is not callable")
    function: Callable[..., Any] = found
    return function


class ClaimClassifier:
    """A user's callable, called with a time budget on a worker thread; fails open.

    Each call runs on a daemon thread of its own: a classifier that hangs never holds up the
    answer beyond its budget, nor the application's exit. At most ``_MAX_RUNNING`` calls may
    be outstanding; beyond that the rules decide at once.
    """

    def __init__(self, function: Callable[..., Any], *, mode: str = AFTER,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, name: str = ""):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.function = function
        self.takes_found = _takes_two_arguments(function)
        self.mode = mode
        self.timeout_s = timeout_ms / 1000.0
        self.name = name or getattr(function, "__qualname__", repr(function))
        self._lock = threading.Lock()
        self._running = 0
        self._pid = os.getpid()

    def classify(self, text: str, found: tuple[str, ...]) -> tuple[str, ...] | None:
        """The classifier's categories, or None when it has no (usable, timely) answer."""
        if not self._reserve():
            _internal_errors.report("claims.classifier.busy")
            return None
        arguments = (text, found) if self.takes_found else (text,)
        outcome: dict[str, Any] = {}
        finished = threading.Event()

        def work() -> None:
            try:
                outcome["answer"] = _suppressed(self.function, *arguments)
            except BaseException as exc:  # deliberate: the user's code failing must not reach the agent
                outcome["error"] = exc
            finally:
                with self._lock:
                    self._running -= 1
                finished.set()

        try:
            threading.Thread(target=work, name="agentguard-claims", daemon=True).start()
        except Exception as exc:  # deliberate: no thread to be had (interpreter shutting down)
            with self._lock:
                self._running -= 1
            _internal_errors.report("claims.classifier", exc)
            return None
        if not finished.wait(self.timeout_s):
            _internal_errors.report("claims.classifier.timeout")
            return None
        if "error" in outcome:
            _internal_errors.report("claims.classifier", outcome["error"])
            return None
        return _categories(outcome.get("answer"))

    def _reserve(self) -> bool:
        pid = os.getpid()
        if pid != self._pid:  # a forked child: the parent's threads (and its lock's holder) are gone
            self._lock, self._running, self._pid = threading.Lock(), 0, pid
        with self._lock:
            if self._running >= _MAX_RUNNING:
                return False
            self._running += 1
            return True


def _takes_two_arguments(function: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: give it what the rules found too
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _suppressed(function: Callable[..., Any], *arguments: Any) -> Any:
    # The shared OpenTelemetry key: every instrumentation, ours included, calls straight through.
    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))  # noqa: SLF001
    try:
        return function(*arguments)
    finally:
        context.detach(token)


def _categories(answer: Any) -> tuple[str, ...] | None:
    from otel_agentguard.judge.claims import WRITE

    if answer is None:
        return None
    if isinstance(answer, bool):
        return (WRITE,) if answer else ()
    if isinstance(answer, str):
        return (answer,) if answer else ()
    if isinstance(answer, Iterable):
        values = [value for value in answer if isinstance(value, str) and value]
        return tuple(sorted(set(values)))
    _internal_errors.report("claims.classifier.answer")
    return None
