from typing import Any

def check(
    value: Any, depth: int, entries_left: int, text_left: int, special: frozenset[str], orjson_ok: bool, /
) -> int | tuple[int, int, bool]: ...
