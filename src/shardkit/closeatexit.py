"""Readers' generators left open, closed when the interpreter exits.

A generator a script leaves suspended (``next(iter(ds))`` at its end, a ``break``) is closed when
it is collected; at exit that happens during the interpreter's teardown, when the modules its
``finally`` blocks use (logging, httpx, asyncio) are already gone, and Python prints "Exception
ignored in ..." for each. An ``atexit`` handler runs before that teardown: it closes them while
everything still works (closing a closed generator does nothing).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Generator
from typing import Any, TypeVar

log = logging.getLogger(__name__)

G = TypeVar("G", bound=Generator[Any, Any, Any])

#: Each generator still open, with the thread that made it (the one that iterates it).
_left_open: weakref.WeakKeyDictionary[Generator[Any, Any, Any], threading.Thread] = weakref.WeakKeyDictionary()


def close_at_exit(generator: G) -> G:
    """``generator``, closed at exit if it is open then."""
    _left_open[generator] = threading.current_thread()
    return generator


@atexit.register
def _close_left_open() -> None:
    main = threading.main_thread()
    for generator, thread in list(_left_open.items()):  # the oldest first: a stream before its reads
        # A daemon thread still running may be inside it: closing it under that thread raises
        # "generator already executing" there. Its generators end with the process, unprinted.
        if (thread is not main and thread.is_alive()) or getattr(generator, "gi_running", False):
            continue
        try:
            generator.close()
        except Exception as exc:  # a stream that fails to close: at exit, let it be
            log.debug("at exit, a reader did not close: %s", exc)
