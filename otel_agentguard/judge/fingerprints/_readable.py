"""What the guard may read of an application's Python value without running its code.

Fingerprinting looks inside tool arguments and results, and those are the
application's objects: a mock records every call, a proxy sends an RPC, a
lazy mapping never ends, a shelf unpickles. So nothing here calls a method,
property, ``__getattr__``, ``__eq__``, ``__hash__``, ``__iter__``, ``__len__``
or ``__repr__`` that an application class could define. Types are found with
``type()`` and their MRO read through ``type``'s own descriptors (no
``isinstance``, which consults ``__class__``; no ABC, which consults hooks);
attributes are read from the instance ``__dict__`` or from C slot descriptors
only.

The readable kinds are builtins and their subclasses (read through the
builtin's own methods), enums, datetimes with standard time zones, UUID,
Decimal, paths, buffers (bytes-like objects, numpy arrays), dataclasses,
pydantic v2 models and classes and functions by name. Everything else is
opaque.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

_type_mro: Callable[[type], tuple[type, ...]] = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__
_type_qualname = type.__dict__["__qualname__"].__get__
_object_getattribute = object.__getattribute__
_function_qualname = types.FunctionType.__dict__["__qualname__"].__get__
_builtin_qualname = types.BuiltinFunctionType.__dict__["__qualname__"].__get__
_SLOT = types.MemberDescriptorType
_GETSET = types.GetSetDescriptorType

_NO_VALUE = object()


def mro(kind: type) -> tuple[type, ...]:
    """``kind.__mro__`` without asking the class (or its metaclass) for it."""
    return _type_mro(kind)


def static_lookup(kind: type, name: str) -> Any:
    """The class attribute ``name`` as stored along the MRO (descriptors are not invoked)."""
    for klass in mro(kind):
        found = _type_dict(klass).get(name, _NO_VALUE)
        if found is not _NO_VALUE:
            return found
    return _NO_VALUE


def type_name(kind: type) -> str:
    try:
        return str(_type_qualname(kind))
    except Exception:  # deliberate: a name is a courtesy
        return "?"


def qualified_name(value: Any) -> str | None:
    """``module.qualname`` of a class or a function, read from C descriptors; None otherwise."""
    kind = type(value)
    if type in mro(kind):
        module = _type_dict(value).get("__module__")
        return f"{module if type(module) is str else '?'}.{_type_qualname(value)}"
    if kind is types.FunctionType:
        module = _object_getattribute(value, "__module__")
        return f"{module if type(module) is str else '?'}.{_function_qualname(value)}"
    if kind is types.BuiltinFunctionType:
        module = _object_getattribute(value, "__module__")
        return f"{module if type(module) is str else '?'}.{_builtin_qualname(value)}"
    return None


def _instance_dict(value: Any) -> dict[str, Any] | None:
    # Only the standard __dict__ descriptor: a class may define __dict__ as a property.
    if type(static_lookup(type(value), "__dict__")) is not _GETSET:
        return None
    state = _object_getattribute(value, "__dict__")
    return state if type(state) is dict else None


def _stored_fields(value: Any, names: Iterator[str]) -> list[tuple[str, Any]] | None:
    """Field values from the instance dict or slots; None when one is computed (a property)."""
    kind = type(value)
    state = _instance_dict(value)
    fields = []
    for name in names:
        if state is not None and name in state:
            fields.append((name, state[name]))
            continue
        slot = static_lookup(kind, name)
        if type(slot) is not _SLOT:
            return None
        try:
            fields.append((name, slot.__get__(value, kind)))
        except AttributeError:  # an unset slot
            fields.append((name, None))
    return fields


def dataclass_fields(value: Any) -> list[tuple[str, Any]] | None:
    """A dataclass instance's fields; None for anything else (or one whose fields are computed)."""
    declared = static_lookup(type(value), "__dataclass_fields__")
    if type(declared) is not dict:
        return None
    # _field_type and _FIELD are private to dataclasses, so typeshed does not declare them.
    names = (name for name, field in declared.items()
             if type(field) is dataclasses.Field and field._field_type is dataclasses._FIELD)  # type: ignore[attr-defined]
    return _stored_fields(value, names)


def pydantic_fields(value: Any) -> list[tuple[str, Any]] | None:
    """A genuine pydantic v2 model's fields (and extras); None for anything else.

    Identified by class (``pydantic.BaseModel`` in the MRO), never by looking
    for ``model_dump``: a mock has every attribute. ``model_dump`` itself is not
    called either (it may run the application's serializers).
    """
    main = sys.modules.get("pydantic.main")
    base = getattr(main, "__dict__", {}).get("BaseModel") if main is not None else None
    kind = type(value)
    if base is None or base not in mro(kind):
        return None
    declared = static_lookup(kind, "__pydantic_fields__")
    if type(declared) is not dict:
        return None
    fields = _stored_fields(value, iter(list(declared)))
    if fields is None:
        return None
    extra_slot = static_lookup(kind, "__pydantic_extra__")
    if type(extra_slot) is _SLOT:
        try:
            extra = extra_slot.__get__(value, kind)
        except AttributeError:
            extra = None
        if type(extra) is dict:
            fields.extend(extra.items())
    return fields


def defines_python_buffer(kind: type) -> bool:
    """True when the class implements the buffer protocol in Python (``__buffer__``, 3.12+)."""
    return type(static_lookup(kind, "__buffer__")) is types.FunctionType


_STANDARD_ZONES: tuple[type, ...] = (datetime.timezone,)
try:  # pragma: no branch
    import zoneinfo

    _STANDARD_ZONES += (zoneinfo.ZoneInfo,)
except ImportError:  # pragma: no cover - Python without zoneinfo data support
    pass


def standard_zone(value: Any) -> bool:
    """A datetime or time whose tzinfo (if any) is the standard library's: isoformat runs no app code."""
    zone = value.tzinfo
    return zone is None or type(zone) in _STANDARD_ZONES
