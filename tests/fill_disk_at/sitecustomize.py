"""Loaded by the Python processes of a test that puts this folder on PYTHONPATH: fills a disk just
before one function of shardkit runs, so that a real filesystem is full at that one point.

``SHARDKIT_TEST_FILL_AT`` names the function as ``module:name`` (a module-level name, looked up
when called: ``shardkit.preview:write_atomic``); ``SHARDKIT_TEST_FILL_DISK`` the folder (on the
small filesystem) where ``filler`` is written until no byte more fits. Once: later calls run as
they are.
"""

from __future__ import annotations

import errno
import importlib
import os
from typing import Any

_AT = os.environ.get("SHARDKIT_TEST_FILL_AT")
_DISK = os.environ.get("SHARDKIT_TEST_FILL_DISK", "")


def _fill() -> None:
    fd = os.open(os.path.join(_DISK, "filler"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        chunk = 1 << 20
        while chunk:
            try:
                os.write(fd, bytes(chunk))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk //= 2
    finally:
        os.close(fd)


if _AT:
    _module_name, _name = _AT.split(":")
    _module = importlib.import_module(_module_name)
    _real = getattr(_module, _name)
    _filled = False

    def _filling_first(*args: Any, **kwargs: Any) -> Any:
        global _filled
        if not _filled:
            _filled = True
            _fill()
        return _real(*args, **kwargs)

    setattr(_module, _name, _filling_first)
