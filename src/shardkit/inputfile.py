"""Opening an input file: the file that was checked, inside IMAGES_DIR, or an error.

Between the check (stage 1) and the write (stage 4) a file can be rewritten, or its path
swapped for a symlink to a file outside IMAGES_DIR. So every read of an input file, the
check's hash and decode as well as the writer's copy, goes through :func:`open_inside`: one
descriptor, opened without blocking (a FIFO swapped in cannot hang the run), that must be a
regular file whose real location is inside IMAGES_DIR. The writer then compares the open
file with what the check saw (:func:`stamp`: size, modification and change times) and, for a
row whose key is the hash of its file, compares the CRC-32 of the bytes it writes with that of the
bytes the check hashed: what is published is always the file as checked.

Symlinks that stay inside IMAGES_DIR are allowed, as the check allows them (collections use
them to share files); the location test is on the opened descriptor, so no swap after the
test can redirect the read.
"""

from __future__ import annotations

import os
import stat
import sys

from .errors import ShardkitError

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
#: Linux names an open descriptor's file here; elsewhere the path is resolved and compared.
_PROC_FD = "/proc/self/fd/" if os.path.isdir("/proc/self/fd") else None


class SourceChanged(ShardkitError):
    """A file is not what the check saw, or not where it may be read from."""


class OutsideImagesDir(OSError):
    """The opened file is not a regular file inside IMAGES_DIR."""


def open_inside(path: str, inside: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading: a descriptor and its ``fstat``.

    ``inside`` is IMAGES_DIR's real path ending in a separator. Raises :class:`OutsideImagesDir`
    when the opened file is not a regular file there, ``OSError`` when it cannot be opened.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutsideImagesDir(f"not a regular file: {path}")
        real = _real_path(fd, path, st)
        if not real.startswith(inside):
            raise OutsideImagesDir(f"{path} resolves outside IMAGES_DIR (to {real!r}: a symlink?)")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _real_path(fd: int, path: str, st: os.stat_result) -> str:
    """Where the open file is: the kernel's answer where it gives one, else the resolved path
    (if that is still the same file: a swap after the open shows as a different file)."""
    if _PROC_FD is not None:
        try:
            return os.readlink(f"{_PROC_FD}{fd}")
        except OSError:
            pass
    if sys.platform == "darwin":  # pragma: no cover - macOS only
        import fcntl

        try:
            raw = fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024))
            return os.fsdecode(raw.split(b"\0", 1)[0])
        except OSError:
            pass
    real = os.path.realpath(path)
    now = os.stat(real)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise OutsideImagesDir(f"{path} changed while it was opened")
    return real


def stamp(st: os.stat_result) -> str:
    """What the check records of a file, for the writer to compare: size, modification and
    change times. Rewriting a file changes its times; a swapped-in file is another file with
    its own (the change time cannot be set back by the user)."""
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
