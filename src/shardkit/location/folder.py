"""A local folder (``/data/out``, ``file:///data/out``): the place a pack writes by default.

Shards are renamed into place and the folder fsynced (a power loss keeps the rename); the
writer's ``O_DIRECT`` shard files (:mod:`..shardfile`) are local too. Its files are read only
where :func:`readable_root` allows: a link out of the folder is refused (a Hub cache snapshot's
links into its repo's ``blobs/`` are followed). Everything here is a plain ``os`` call, not
fsspec's LocalFileSystem: it would add nothing but its import to every command on a local folder.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import shutil
import stat
from typing import BinaryIO

from ..atomicfile import fsync_path, replace_file
from ..errors import ShardkitError, UsageError
from ..inputfile import OutsideImagesDir, open_inside
from .base import LOCAL, Location, local_path, not_a_place, register
from .reading import CHUNK, MAX_SMALL_FILE_BYTES, Window


class OutsideDataset(ShardkitError):
    """A file of a local dataset folder that is a link out of it (or not a regular file)."""


def readable_root(folder: str) -> str:
    """The real folder the files of the local dataset ``folder`` may resolve into, ending in a
    separator: the folder itself (a link inside it, to a file beside, is followed), or for a
    Hugging Face cache snapshot (``<repo>/snapshots/<revision>``, whose files are links to
    ``../../blobs/<hash>``) the repo's cache folder that holds ``snapshots/`` and ``blobs/``.
    A link anywhere else (``data/9.zip -> /home/me/secret``) is refused: a dataset someone else
    made must not make a reader read, or remux and push publish, a file of the reader's."""
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots" and os.path.isdir(os.path.join(os.path.dirname(parent), "blobs")):
        real = os.path.dirname(parent)
    return os.path.join(real, "")


def open_in_dataset(path: str, root: str, buffering: int = -1) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file whose real location is inside
    ``root`` (:func:`readable_root`); the test is on the opened descriptor
    (:func:`.inputfile.open_inside`), so no swap after it redirects the read."""
    try:
        fd, _ = open_inside(path, root)
    except OutsideImagesDir:
        check_in_dataset(path, root)
        raise OutsideDataset(f"{path}: not a regular file") from None
    return os.fdopen(fd, "rb", buffering=buffering)


def check_in_dataset(path: str, root: str) -> None:
    """Refuse ``path`` when its real location is outside ``root`` (:func:`readable_root`): for a
    file another library opens by its path (huggingface_hub's upload), and the message of
    :func:`open_in_dataset`."""
    real = os.path.realpath(path)
    if not real.startswith(root):
        raise OutsideDataset(
            f"{path}: a link to {real!r}, outside the dataset folder {root.rstrip(os.sep)!r};"
            " shardkit reads only the dataset's own files"
        )


class Folder(Location):
    """A folder on this machine; its ``url`` is its absolute path."""

    kind = "folder"
    is_local = True

    def __init__(self, url: str, kind: str | None = None) -> None:
        super().__init__(url, kind)
        self.url = url
        self._readable: str | None = None  # its readable_root, once known

    @classmethod
    def reading(cls, text: str, *, revision: str | None = None) -> Location:
        if text.startswith("file://") or os.path.isdir(text):
            return cls(local_path(text))
        raise not_a_place(text)

    @classmethod
    def as_out_dir(cls, text: str, *, writing: bool) -> Location:
        return cls(local_path(text))

    def local_dir(self, work_dir: str | None) -> str:
        if work_dir:
            raise UsageError("--work-dir is for an OUT_DIR URL; a local OUT_DIR keeps its working files in it")
        return self.url

    def where(self, rel: str) -> str:
        return os.path.join(self.url, rel)

    # -- reading

    def open(self, rel: str) -> BinaryIO:
        return self.open_local(rel, CHUNK)

    def open_local(self, rel: str, buffering: int = -1) -> BinaryIO:
        """A file of the folder, read only where :func:`readable_root` allows (every read of a
        local dataset's files comes here: a link out of the folder is one line, refused)."""
        if self._readable is None:
            self._readable = readable_root(self.url)
        return open_in_dataset(self.where(rel), self._readable, buffering)

    def open_random(self, rel: str, *, exact: bool = False) -> BinaryIO:
        return self.open_local(rel)

    def open_range(self, rel: str, start: int, end: int) -> BinaryIO:
        f = self.open_local(rel, CHUNK)
        f.seek(start)
        return Window(f, end - start)  # type: ignore[return-value]

    def find(self, folder: str = "") -> dict[str, int]:
        # What fsspec's LocalFileSystem finds, which this replaced: everything but a folder (a link,
        # to a folder too, and a FIFO are "files"; a link's size is its target's, 0 if none).
        top = self.where(folder) if folder else self.url
        if not os.path.isdir(top):
            try:
                return {folder: os.stat(top).st_size}
            except (FileNotFoundError, NotADirectoryError):
                return {}
        found: dict[str, int] = {}
        pending = [(top, folder)]
        while pending:
            path, rel = pending.pop()
            for entry in _entries(path):
                name = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, name))
                    continue
                if entry.is_symlink():
                    try:
                        found[name] = entry.stat().st_size
                    except OSError:  # a link to nothing
                        found[name] = 0
                else:
                    with contextlib.suppress(FileNotFoundError):  # removed since the listing
                        found[name] = entry.stat(follow_symlinks=False).st_size
        return found

    def list(self, folder: str) -> builtins.list[str]:
        path = self.where(folder) if folder else self.url
        return sorted(e.name for e in _entries(path) if e.is_file(follow_symlinks=False))

    def size(self, rel: str) -> int | None:
        try:
            info = os.stat(self.where(rel))  # (a link is followed here, as fsspec's info follows it)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def read_bytes(self, rel: str, limit: int = MAX_SMALL_FILE_BYTES) -> bytes | None:
        try:
            with self.open_local(rel) as f:
                return f.read()
        except FileNotFoundError:
            return None

    # -- writing

    def put(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        target = self.where(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(local_file, target)
        if fsync:  # the rename itself survives a power loss
            fsync_path(os.path.dirname(target))

    def upload(self, local_file: str, rel: str, *, fsync: bool = True) -> None:
        target = self.where(rel)
        if os.path.exists(target) and os.path.samefile(local_file, target):
            return  # a local OUT_DIR is the folder its small files were written in
        os.makedirs(os.path.dirname(target), exist_ok=True)

        def copy(out: BinaryIO) -> None:
            with open(local_file, "rb") as f:
                shutil.copyfileobj(f, out, CHUNK)

        replace_file(target, copy, fsync=fsync, fsync_folder=fsync)

    def write_bytes(self, rel: str, data: bytes) -> None:
        target = self.where(rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        replace_file(target, lambda f: f.write(data), fsync_folder=True)

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.where(rel))

    def remove_with_empty_folder(self, rel: str) -> None:
        self.remove(rel)
        if "/" in rel:
            with contextlib.suppress(OSError):  # not empty: another run's file is there
                os.rmdir(self.where(rel.rsplit("/", 1)[0]))


def _entries(path: str) -> list[os.DirEntry[str]]:
    """The entries of the folder at ``path``; none when there is no folder there."""
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


register(Folder, LOCAL)
