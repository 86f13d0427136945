"""Writing a local file so that readers see the old or the new content, never a mix.

The one "temporary file + fsync + rename" of shardkit (:func:`replace_file`): the manifest, the
card, the preview, the rejects file, the working state (:func:`write_atomic`), the metadata table
(:mod:`.table`) and a local folder's writes and copies (:class:`.location.Folder`) all go
through it. A failed or interrupted write (a full disk, Ctrl-C) leaves the old file as it was and
no temporary file behind, and its error names the file: a write's or a flush's error names none.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from typing import BinaryIO

from .errors import naming

#: A repo's working folder (:mod:`.outdir`); the temporary files of its root go in its ``tmp``.
WORK_DIR = ".shardkit"


def fsync_path(path: str) -> None:
    """Make what is written to ``path`` (a file, or a folder's entries: a rename) survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(
    path: str,
    write: Callable[[BinaryIO], object],
    *,
    tmp_dir: str | None = None,
    fsync: bool = True,
    fsync_folder: bool = False,
) -> None:
    """Replace ``path`` with what ``write`` writes to the open file it is given, atomically.

    The temporary file is ``<name>.<random>.partial`` in ``tmp_dir`` (on the same filesystem;
    by default ``path``'s folder). ``fsync``: its bytes are on the disk before the name points at
    them; ``fsync_folder``: the rename itself survives a power loss too. On any failure (Ctrl-C
    too) the temporary file is removed, and an OSError names ``path`` where it names no file.
    """
    folder, name = os.path.split(path)
    tmp = os.path.join(tmp_dir or folder, f"{name}.{secrets.token_hex(4)}.partial")
    try:
        with open(tmp, "wb") as f:
            write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync_folder:
            fsync_path(folder or ".")
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise naming(exc, path) from None
        raise


def replace_atomic(path: str, write: Callable[[BinaryIO], object]) -> None:
    """Replace a small file of a repo (or any local file) with what ``write`` writes, atomically
    (:func:`replace_file`).

    In a repo root that has a working folder, the temporary file is written there (in
    ``.shardkit/tmp``, never published, on the same filesystem): a run killed part-way must
    not leave ``README.md.partial`` beside the files a push publishes.
    """
    scratch = os.path.join(os.path.dirname(path), WORK_DIR, "tmp")
    replace_file(path, write, tmp_dir=scratch if os.path.isdir(scratch) else None)


def write_atomic(path: str, content: bytes) -> None:
    """Write a small file so that readers see the old or the new content, never a mix."""
    replace_atomic(path, lambda f: f.write(content))
