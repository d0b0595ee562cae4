"""Module-level locks that a forked child gets afresh.

A process forked while another of its threads holds a lock (a gunicorn worker, multiprocessing's
fork start method) inherits the lock held, by a thread that does not exist in the child: the
child's first use of it would wait forever. Each module-level lock of the package is therefore
replaced by a new one in a forked child. The lock stays a plain module global, read where it is
used: the hot paths that take one pay nothing for this. (A fork made by the very thread that
holds a lock leaves the child's code releasing the old lock when it leaves its block; the module
global is the new one from the fork on.)

:data:`RENEWED` names every lock so kept, for the test that no module lock is left out.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

RENEWED: set[tuple[str, str]] = set()  # (module, global name)


def renew_in_forked_children(namespace: dict[str, Any], name: str,
                             new_lock: Callable[[], Any] = threading.Lock) -> None:
    """In a forked child, replace ``namespace[name]`` (a module's ``globals()``) with ``new_lock()``."""
    RENEWED.add((namespace["__name__"], name))
    if not hasattr(os, "register_at_fork"):  # no fork on this platform
        return

    def renew() -> None:
        namespace[name] = new_lock()

    os.register_at_fork(after_in_child=renew)
