"""Loaded by the Python processes of a test that puts this folder on PYTHONPATH: opening the
input file named by ``SHARDKIT_TEST_HANG_ON_READ`` never returns, as a read on a hung network
mount does. (A FIFO used to play that part; shardkit now refuses one without reading it.)"""

from __future__ import annotations

import os
import threading

_NAME = os.environ.get("SHARDKIT_TEST_HANG_ON_READ")
if _NAME:
    import shardkit.inputfile

    _real = shardkit.inputfile.open_inside

    def _open_inside(path: str, inside: str) -> tuple[int, os.stat_result]:
        if os.path.basename(path) == _NAME:
            threading.Event().wait()
        return _real(path, inside)

    # Before shardkit.readahead imports it by name.
    shardkit.inputfile.open_inside = _open_inside
