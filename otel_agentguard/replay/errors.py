from __future__ import annotations


class InputError(ValueError):
    """Unusable input. ``str()`` is one line naming the file and, when known, the line."""

    def __init__(self, path: str, message: str, line: int | None = None):
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
