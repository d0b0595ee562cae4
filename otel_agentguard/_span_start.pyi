from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context

def configure(
    processor_type: type, sessions_type: type, store_type: type, session_type: type, counter_type: type,
    context_type: type, session_context_type: type, attributes_type: type, non_recording_type: type,
    names: tuple[str, ...], session_attributes: tuple[str, ...], session_baggage: tuple[str, ...],
    kind_of_operation: dict[str, str], context_keys: tuple[str, str, str], current_context: Callable[[], Context],
    enclosing_step: Callable[..., Any], reads_as_the_sdk: Callable[[type], bool], numbering_globals: dict[str, Any],
    numbering_name: str, /,
) -> None: ...
def start_marked(processor: Any, span: Any, attrs: dict[str, Any], parent_context: Context | None, /) -> bool: ...
