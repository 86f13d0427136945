"""Ctrl-C in the commands: exit code 130 and one line at any moment, never a traceback.

Imported first by :mod:`shardkit.cli`, before its slow imports: in a process started as one of
the commands (``shardkit``, ``pack-shards``), SIGINT from then on ends it at once with
"interrupted" and exit code 130. Outside a library call there is nothing to clean up (it is
loading modules, reading the options, printing a summary), and Python's KeyboardInterrupt would
print a traceback there, or click would turn it into "Aborted!" and exit code 1. During a
library call (:func:`interrupt_raises`, around each in ``cli._run``) SIGINT raises
KeyboardInterrupt as usual, so partial files are removed as it passes. A process that merely
imports ``shardkit.cli`` (a test, a program of its own) keeps its own handler.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

#: The console scripts (pyproject.toml's [project.scripts]).
COMMANDS = ("shardkit", "pack-shards")


def quit_interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler outside library calls: nothing to clean up, so leave now."""
    os.write(2, b"interrupted\n")
    os._exit(130)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupt_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the block (the library cleans up as it passes), whatever
    the handler outside it."""
    if not _in_main_thread():  # (only the main thread may set handlers; it alone takes signals)
        yield
        return
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _started_as_command() -> bool:
    name = os.path.basename(sys.argv[0] if sys.argv else "").removesuffix(".exe")
    return name in COMMANDS and _in_main_thread()


if _started_as_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, quit_interrupted)
