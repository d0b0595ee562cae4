from typing import Any

def check(
    value: Any,
    depth: int,
    entries_left: int,
    text_left: int,
    special: frozenset[str],
    orjson_ok: bool,
    numbers: bool = False,
    /,
) -> int | tuple[int, int, bool]: ...
def write(value: Any, numbers: bool = False, /) -> str | None: ...
def fingerprint_of_text(
    loads: Any, entries_left: int, text: str, special: frozenset[str], state: Any, result: bool, /
) -> tuple[str, bool] | None: ...
def text_form(text: str, special: frozenset[str], entries_left: int, /) -> tuple[bytes, bool] | None: ...
def keyed_digest(seed: bytes, message: bytes, /) -> str: ...
