"""An output folder (a dataset repo root): its working folder, its lock, and checks of its shards.

Shared by ``pack`` (which writes it), ``push`` (which uploads it) and ``verify``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from .errors import UsageError
from .manifest import ManifestShard
from .metadata import sha256_file

WORK_DIR = ".shardkit"


@contextlib.contextmanager
def locked(out_dir: str) -> Iterator[str]:
    """Hold OUT_DIR's lock (``.shardkit/lock``) for the block; yield the working folder.

    One shardkit run per OUT_DIR at a time: a second pack or push is refused, not queued.
    """
    work_dir = os.path.join(out_dir, WORK_DIR)
    os.makedirs(work_dir, exist_ok=True)
    ignore = os.path.join(work_dir, ".gitignore")
    if not os.path.exists(ignore):  # keeps the working files out of git, whatever the repo's rules
        with open(ignore, "w") as f:
            f.write("# shardkit's working files: not part of the dataset\n*\n")
    with open(os.path.join(work_dir, "lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"another shardkit run is working on {out_dir} (lock: {lock.name}); wait for it to finish"
            ) from None
        yield work_dir


def shard_problem(out_dir: str, shard: ManifestShard) -> str | None:
    """Why the shard and its metadata file on disk differ from what the manifest records; None if intact.

    Sizes are compared first, so a truncated file is caught without reading it.
    """
    for rel, size, sha in ((shard.file, shard.bytes, shard.sha256), (shard.metadata, None, shard.metadata_sha256)):
        path = os.path.join(out_dir, rel)
        try:
            actual = os.path.getsize(path)
        except FileNotFoundError:
            return f"{rel} is missing"
        if size is not None and actual != size:
            return f"{rel} is {actual} bytes, the manifest says {size}"
        if sha256_file(path) != sha:
            return f"{rel} does not match the sha256 the manifest records"
    return None
