"""What every agentguard instrumentor shares: lazy patching from one table of targets.

Each instrumentor lists its patch targets once (module, ``Class.method``,
wrapper factory); the same table drives patching and unpatching. Patching is
lazy: a post-import hook patches a module when the application imports it (at
once if it already has), so the ``opentelemetry-instrument`` launcher can load
every agentguard instrumentor without importing a framework the application
never uses. A hook never raises into the user's import: a failure is logged
once and that target stays unpatched.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry import trace

# The module opts out of type checking (a file-level ignore), so mypy sees none of its names.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel_agentguard import _internal_errors
from otel_agentguard.instrumentation._innermost import unwrap_ours, wrap_innermost
from otel_agentguard.live.guard_ref import PROCESS_GUARD, GuardRef
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

WrapperFactory = Callable[["InstrumentationContext"], Callable[..., Any]]


@dataclass(frozen=True)
class PatchTarget:
    module: str
    name: str  # "Class.method" inside the module
    wrapper: WrapperFactory


@dataclass(frozen=True)
class InstrumentationContext:
    """Built once in ``_instrument`` and bound into every wrapper: the tracer, the guard the
    wrappers report to, and the options ``instrument()`` was given."""

    tracer: trace.Tracer
    options: dict[str, Any]
    guard: GuardRef = PROCESS_GUARD


class GuardInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Base of the agentguard instrumentors. Subclasses set ``targets`` and ``instruments``."""

    targets: tuple[PatchTarget, ...] = ()
    instruments: tuple[str, ...] = ()

    def __init__(self) -> None:
        # BaseInstrumentor is a singleton: every XInstrumentor() returns the same object and
        # runs __init__ again, which must not forget what is patched.
        if hasattr(self, "_lock"):
            return
        super().__init__()
        self._lock = threading.Lock()
        self._patched: dict[PatchTarget, Callable[..., Any]] = {}  # target -> the wrapper put on it
        self._active = False
        self._context: InstrumentationContext | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.instruments

    def _instrument(self, **kwargs: Any) -> None:
        provider = kwargs.get("tracer_provider")
        tracer = trace.get_tracer(f"otel_agentguard.instrumentation.{self.name}", __version__, provider)
        self._context = InstrumentationContext(tracer, dict(kwargs), GuardRef(_given_guard(kwargs), provider))
        self._active = True
        for module in sorted({target.module for target in self.targets}):
            wrapt.register_post_import_hook(self._patch_module, module)
        self._instrument_extra(self._context)

    def _instrument_extra(self, context: InstrumentationContext) -> None:
        """For instrumentors that also register with a framework's own hooks."""

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._active = False
            patched, self._patched = self._patched, {}
        for target, wrapper in patched.items():
            owner, attribute = _resolve_owner(target)
            if owner is None:
                continue
            try:
                unwrap_ours(owner, attribute, wrapper)
            except Exception as exc:  # deliberate: uninstrument the other targets anyway
                _internal_errors.report(f"uninstrument.{self.name}", exc)
        self._uninstrument_extra()

    def _uninstrument_extra(self) -> None:
        """Undo ``_instrument_extra``."""

    @property
    def name(self) -> str:
        return type(self).__name__.removesuffix("Instrumentor").lower()

    def _patch_module(self, module: Any) -> None:
        # Post-import hooks cannot be removed: a hook of an uninstrumented
        # instrumentor just does nothing.
        with self._lock:
            if not self._active or self._context is None:
                return
            for target in self.targets:
                if target.module != module.__name__ or target in self._patched:
                    continue
                try:
                    owner, attribute = _resolve_owner(target, module)
                    if owner is None:
                        raise AttributeError(f"{target.module} has no {target.name}")
                    wrapper = target.wrapper(self._context)
                    # Inside any other instrumentation of the same method: its model span is
                    # then open when ours runs, and one call stays one span (see _innermost).
                    wrap_innermost(owner, attribute, wrapper)
                except Exception as exc:  # deliberate: never break the user's import
                    _internal_errors.report(f"instrument.{self.name}", exc)
                    continue
                self._patched[target] = wrapper


def _given_guard(kwargs: dict[str, Any]) -> Any:
    """``instrument(guard=...)``: the processor ``otel_agentguard.install()`` returned."""
    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    guard = kwargs.get("guard")
    if guard is not None and not isinstance(guard, AgentGuardSpanProcessor):
        raise TypeError(f"instrument(guard=...): expected the AgentGuardSpanProcessor that otel_agentguard.install() "
                        f"returns, got {type(guard).__name__}")
    return guard


def _resolve_owner(target: PatchTarget, module: Any = None) -> tuple[Any, str]:
    """The object holding the patched attribute, e.g. the class of ``Class.method``."""
    owner: Any = module
    if owner is None:
        try:
            owner = importlib.import_module(target.module)
        except ImportError:
            return None, ""
    *path, attribute = target.name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, ""
    return owner, attribute
