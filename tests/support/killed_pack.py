"""pack-shards SIGKILLed at one fixed point: ``python killed_pack.py POINT NEST_FROM ARGS...``.

POINT is one of :data:`POINTS` (or ``none``: run to the end); NEST_FROM, when not 0, is the
number of shards from which a split nests (``hubplan.NEST_FROM_SHARDS``; the Hub's 10,000 is
too many for a test); ARGS are pack-shards' arguments. Each point is a hook on the real code,
so a run that reaches it dies there whatever the timing (exit -9).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import shardkit.hubplan
import shardkit.location
import shardkit.packfinish
import shardkit.packresume
import shardkit.packwrite
from shardkit.cli import pack_shards

Folder = shardkit.location.Folder


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after_removing() -> None:
    remove = Folder.remove

    def removing(self: Any, rel: str) -> None:
        remove(self, rel)
        die()

    Folder.remove = removing  # type: ignore[method-assign]


def _after_state() -> None:
    write_atomic = shardkit.packresume.write_atomic

    def writing(path: str, content: bytes) -> None:
        write_atomic(path, content)
        if path.endswith("state.json"):
            die()

    shardkit.packresume.write_atomic = writing


def _after_one_shard() -> None:
    run_tasks = shardkit.packwrite.run_tasks

    def running(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for n, result in enumerate(run_tasks(*args, **kwargs)):
            if n == 1:
                die()
            yield result

    shardkit.packwrite.run_tasks = running  # type: ignore[assignment]


def _after_lines_file() -> None:
    write_bytes = Folder.write_bytes

    def writing(self: Any, rel: str, data: bytes) -> None:
        write_bytes(self, rel, data)
        if rel.startswith(".shardkit/lines/"):
            die()

    Folder.write_bytes = writing  # type: ignore[method-assign]


def _after_folder_file() -> None:
    put = Folder.put

    def putting(self: Any, local_file: str, rel: str, **kwargs: Any) -> None:
        put(self, local_file, rel, **kwargs)
        if rel.startswith("metadata/"):
            die()

    Folder.put = putting  # type: ignore[method-assign]


def _before_manifest() -> None:
    shardkit.packfinish.write_manifest = lambda *args, **kwargs: die()  # type: ignore[assignment]


POINTS: dict[str, Callable[[], None]] = {
    "a shard whose rows all went removed": _after_removing,
    "the new state recorded": _after_state,
    "one shard written": _after_one_shard,
    "a kept shard's rows saved to its lines file": _after_lines_file,
    "a folder's metadata file written": _after_folder_file,
    "the manifest about to be written": _before_manifest,
}

if __name__ == "__main__":
    point, nest_from = sys.argv[1], int(sys.argv[2])
    if point != "none":
        POINTS[point]()
    if nest_from:
        shardkit.hubplan.NEST_FROM_SHARDS = nest_from
    sys.argv = ["pack-shards", *sys.argv[3:]]
    pack_shards()
