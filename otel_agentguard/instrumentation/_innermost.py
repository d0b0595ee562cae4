"""Patch a method under any wrapt wrappers already on it, and take the patch out again.

Two instrumentations of one SDK method stack as wrapt wrappers, and the one
patched last runs outside. When the other one (openai-v2, OpenLLMetry) runs
outside, its model span is already open when ours runs: we enrich that span
instead of making a second one. Patching innermost, right around the library's
own function, makes that the case whichever instrumentor the application (or
``opentelemetry-instrument``, which loads entry points in no fixed order)
happens to call first. An instrumentation patched after us wraps outside us
anyway.

Each wrapper in the chain keeps working: the other instrumentation's
``unwrap`` puts our wrapper back as the attribute, and removing ours splices
it out of the chain without touching the others. Anything unexpected falls
back to wrapping outside, which costs a nested span, never the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wrapt

_MAX_CHAIN = 32  # a longer chain of proxies is not a chain of method wrappers
# wrapt 2 derives its function wrappers from BaseObjectProxy; in wrapt 1 that is ObjectProxy.
_Proxy: Any = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def wrap_innermost(owner: Any, attribute: str, wrapper: Callable[..., Any]) -> None:
    """Wrap ``owner.attribute`` with ``wrapper``, inside every wrapt wrapper already there."""
    holder = vars(owner).get(attribute) if isinstance(owner, type) else None
    if not isinstance(holder, _Proxy):
        wrapt.wrap_function_wrapper(owner, attribute, wrapper)
        return
    for _ in range(_MAX_CHAIN):
        inner = holder.__wrapped__
        if not isinstance(inner, _Proxy):
            holder.__wrapped__ = wrapt.FunctionWrapper(inner, wrapper)
            return
        holder = inner
    wrapt.wrap_function_wrapper(owner, attribute, wrapper)


def unwrap_ours(owner: Any, attribute: str, wrapper: Callable[..., Any]) -> bool:
    """Take the wrapper made with ``wrapper`` out of ``owner.attribute``'s chain; True if found."""
    current = vars(owner).get(attribute) if isinstance(owner, type) else getattr(owner, attribute, None)
    if current is not None and _is_made_with(current, wrapper):
        setattr(owner, attribute, current.__wrapped__)
        return True
    holder = current
    for _ in range(_MAX_CHAIN):
        if not isinstance(holder, _Proxy):
            return False
        inner = holder.__wrapped__
        if _is_made_with(inner, wrapper):
            holder.__wrapped__ = inner.__wrapped__
            return True
        holder = inner
    return False


def _is_made_with(candidate: Any, wrapper: Callable[..., Any]) -> bool:
    # Function wrappers and their bound forms keep the wrapper function they were made with.
    return isinstance(candidate, _Proxy) and getattr(candidate, "_self_wrapper", None) is wrapper
