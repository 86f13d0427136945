"""Which filesystem a local path is on, and whether that is a local disk (read from ``/proc/self/mounts``).

A local block device's filesystem honours ``O_DIRECT`` (:mod:`.shardfile` writes shards with
it there), and a read there waits for a disk, not for a server: the metadata check
(:mod:`.metadata`) and the read-ahead (:mod:`.readahead`) read on the calling thread there, and
on threads on a network, FUSE or unknown filesystem.
"""

from __future__ import annotations

import os
from functools import lru_cache

#: Filesystems on a local block device: O_DIRECT writes work there, and a read there waits for a disk,
#: not for a server.
LOCAL_DISK_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs"})


def filesystem_type(folder: str, mounts: str) -> str | None:
    """The type of the filesystem holding ``folder``: its longest mount point in ``mounts``
    (the text of ``/proc/self/mounts``: device, mount point, type, ... per line)."""
    best: tuple[int, str] | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ").replace("\\011", "\t")
        inside = folder == point or folder.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):  # a later mount over the same point wins
            best = (len(point), fields[2])
    return best[1] if best else None


@lru_cache(maxsize=64)
def filesystem_type_here(folder: str) -> str | None:
    """The type of the local filesystem holding ``folder`` (a real path); None if unknown (not Linux)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            return filesystem_type(folder, f.read())
    except OSError:  # not Linux
        return None


def on_local_disk(folder: str) -> bool:
    """Whether ``folder`` is on a filesystem of a local block device (:data:`LOCAL_DISK_FILESYSTEMS`)."""
    return filesystem_type_here(os.path.realpath(folder)) in LOCAL_DISK_FILESYSTEMS
