"""Loaded by the Python processes of a test that puts this folder on PYTHONPATH: holds a worker
pool's start at one fixed point until the test lets it go, so a Ctrl-C lands there every time.

``SHARDKIT_TEST_HOLD`` is ``forkserver`` (the forkserver, as it imports the task modules) or
``worker`` (a worker process, before the pool's initializer runs); ``SHARDKIT_TEST_HOLD_DIR`` a
folder holding a FIFO named ``release``. The held process opens the FIFO (read and write: the open
returns at once), then creates ``held`` in that folder, then waits for a byte from the FIFO, which
the test writes to let it go. Opened before ``held`` is seen, the FIFO has a reader whenever the
test writes: a release can come no earlier than the held process listens for it (opened after
``held``, a release that came first found no reader, and the held process then waited forever).
"""

from __future__ import annotations

import os
import sys

_WHERE = os.environ.get("SHARDKIT_TEST_HOLD")
_DIR = os.environ.get("SHARDKIT_TEST_HOLD_DIR", "")


def _hold() -> None:
    release = os.open(os.path.join(_DIR, "release"), os.O_RDWR)
    try:
        with open(os.path.join(_DIR, "held"), "w"):
            pass
        os.read(release, 1)
    finally:
        os.close(release)


def _is_forkserver() -> bool:
    with open("/proc/self/cmdline", "rb") as f:
        return b"multiprocessing.forkserver" in f.read()


class _HoldOnImport:
    """A meta path finder that holds the first import of shardkit.tasks (the forkserver's preload)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "shardkit.tasks":
            sys.meta_path.remove(self)
            _hold()


if _WHERE and _is_forkserver():
    if _WHERE == "forkserver":
        sys.meta_path.insert(0, _HoldOnImport())
    elif _WHERE == "worker":
        import concurrent.futures.process

        _real = concurrent.futures.process._process_worker

        def _held_worker(*args: object, **kwargs: object) -> None:
            _hold()
            _real(*args, **kwargs)  # type: ignore[arg-type]

        # Workers are forked from the forkserver: they find this in place of the pool's own.
        concurrent.futures.process._process_worker = _held_worker
