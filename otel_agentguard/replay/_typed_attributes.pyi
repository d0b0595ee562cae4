from collections.abc import Callable
from typing import Any

def configure(
    key_value_type: type,
    any_value_type: type,
    shared_keys: dict[str, str],
    repeated_keys: frozenset[str],
    is_read_key: Callable[[Any], bool],
    decode_array: Callable[[Any], tuple[Any, ...]],
    decode_value: Callable[[Any], Any],
    unset: object,
    unparsed: type[Exception],
    /,
) -> None: ...
def read(items: list[Any] | None, shared: dict[str, str], kept: dict[str, bool], /) -> dict[str, Any]: ...
# raw: the attributes' JSON text (msgspec.Raw, bytes, any buffer), or None when absent.
def parse(raw: Any, shared: dict[str, str], kept: dict[str, bool], /) -> dict[str, Any]: ...
def configure_spans(
    span_type: type,
    status_type: type,
    step_kind: Callable[[dict[str, Any]], str | None],
    kind_of_operation: dict[str, str],
    operation_key: str,
    count_keys: tuple[str, ...],
    max_count: int,
    session_facts: Callable[..., tuple[Any, Any]],
    session_key: str,
    session_operation: str,
    error_codes: tuple[Any, ...],
    nested_key: str,
    max_unix_nano: int,
    unusual: type[Exception],
    /,
) -> None: ...
def read_span(span: Any, attrs: dict[str, Any], path: str, shared: dict[str, str], /) -> tuple[Any, ...]: ...
