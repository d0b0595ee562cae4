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
from opentelemetry.instrumentation.utils import unwrap

from otel_agentguard import _internal_errors
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
    """Built once in ``_instrument`` and bound into every wrapper."""

    tracer: trace.Tracer
    options: dict[str, Any]


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
        self._patched: list[PatchTarget] = []
        self._active = False
        self._context: InstrumentationContext | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.instruments

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer(
            f"otel_agentguard.instrumentation.{self.name}", __version__, kwargs.get("tracer_provider")
        )
        self._context = InstrumentationContext(tracer, dict(kwargs))
        self._active = True
        for module in sorted({target.module for target in self.targets}):
            wrapt.register_post_import_hook(self._patch_module, module)
        self._instrument_extra(self._context)

    def _instrument_extra(self, context: InstrumentationContext) -> None:
        """For instrumentors that also register with a framework's own hooks."""

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._active = False
            patched, self._patched = self._patched, []
        for target in patched:
            owner, attribute = _resolve_owner(target)
            if owner is not None:
                unwrap(owner, attribute)
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
                    wrapt.wrap_function_wrapper(module, target.name, target.wrapper(self._context))
                except Exception as exc:  # deliberate: never break the user's import
                    _internal_errors.report(f"instrument.{self.name}", exc)
                    continue
                self._patched.append(target)


def _resolve_owner(target: PatchTarget) -> tuple[Any, str]:
    """The object holding the patched attribute, e.g. the class of ``Class.method``."""
    try:
        owner: Any = importlib.import_module(target.module)
    except ImportError:
        return None, ""
    *path, attribute = target.name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, ""
    return owner, attribute
