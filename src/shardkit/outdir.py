"""An output folder (a dataset repo root): its working folder, its lock, and checks of its shards.

Shared by ``pack`` (which writes it), ``push`` (which uploads it) and ``verify``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import threading
from collections.abc import Container, Iterable, Iterator

from .card import LOADER_SUFFIX, is_shardkit_card
from .errors import UsageError, listed, naming_errors
from .hashing import sha256_file
from .location import MAX_SMALL_FILE_BYTES, Location, OutsideDataset, check_in_dataset, read_upto, readable_root
from .manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    ManifestShard,
    lines_file_of,
    own_metadata_file,
    read_published_rows,
    rows_written_to,
    write_atomic,
)
from .manifest import WORK_DIR as WORK_DIR  # the working folder is outdir's concept; defined beside write_atomic
from .table import TABLE_NAME
from .workstate import read_hash_cache

#: The top-level files of a repo that shardkit writes (with the ``*_loader.py`` loading script):
#: what pack edits, what moves between an OUT_DIR URL and its work folder, what push publishes.
SMALL_FILES = frozenset({"README.md", ".gitattributes", ".gitignore", MANIFEST_NAME, "preview.jpg", TABLE_NAME})
#: Files a template puts in data/ and metadata/ so that git keeps the folders; never shards.
PLACEHOLDERS = frozenset({".gitkeep"})
#: What may be at the root of a shardkit repo: its files and folders, and ``.git`` (a clone),
#: which shardkit never touches. Anything else in OUT_DIR is the user's.
SHARDKIT_ROOT_ENTRIES = SMALL_FILES | {WORK_DIR, ".git", "data", "metadata"}
#: Names whose files are never published, whatever ``.gitignore`` or ``--include`` say:
#: shardkit's working folder (OUT_DIR's, or a dataset's in a folder included) and git's.
NEVER_PUBLISHED = frozenset({WORK_DIR, ".git"})
#: The folders that hold a dataset's shards and their metadata files, and nothing else.
SHARD_FOLDERS = ("data/", "metadata/")


def unnamed_files(paths: Iterable[str], named: Container[str]) -> list[str]:
    """The files among ``paths`` (repo-relative, with "/") in data/ or metadata/ that ``named``
    does not hold, a template's placeholders aside; in the order given.

    What is in those folders is the dataset (the card's ``data/...`` patterns read it), so pack
    refuses to write beside such a file, push refuses to publish one (and leaves one it finds on
    the Hub), and verify reports it. One definition, here beside the layout it is about, keeps
    them agreeing on what counts.
    """
    return [
        rel
        for rel in paths
        if rel.startswith(SHARD_FOLDERS) and rel.rsplit("/", 1)[-1] not in PLACEHOLDERS and rel not in named
    ]


def never_published(rel: str) -> bool:
    """Whether a repo path (with "/") is, or is in, a folder of :data:`NEVER_PUBLISHED`."""
    return not NEVER_PUBLISHED.isdisjoint(rel.split("/"))


def is_small_file(name: str) -> bool:
    """Whether a top-level file name is one shardkit writes."""
    return name in SMALL_FILES or name.endswith(LOADER_SUFFIX)


#: OUT_DIR's folders that hold only shardkit's files, checked whole by :func:`check_own_entries`.
OWN_FOLDERS = ("data", "metadata", WORK_DIR)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    return "socket" if stat.S_ISSOCK(mode) else "device or other special file"


def check_entry(path: str, root: str, private: Iterable[str], *, folder: bool | None = None) -> None:
    """Refuse one entry of OUT_DIR that shardkit would read, write or publish through, unless it
    is a regular file (a real folder if ``folder``; either if None) whose real path is inside
    ``root`` (:func:`~shardkit.location.readable_root`) and in none of the real folders
    ``private`` (``.git``, the working folder: never published, never written by a link).

    Checked with ``stat`` before anything opens it: opening a FIFO waits for a writer forever,
    and huggingface_hub refuses a special file only after the shards are uploaded. A link that
    points nowhere is refused when it points out (writing would create the file there)."""
    if not os.path.lexists(path):
        return
    check_in_dataset(path, root)
    real = os.path.realpath(path)
    for hidden in private:
        if real == hidden or real.startswith(os.path.join(hidden, "")):
            raise OutsideDataset(
                f"{path}: a link to {real!r}, inside {os.path.basename(hidden)}/, which shardkit never"
                " reads, writes or publishes as a dataset file; replace the link with the file itself"
            )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return  # a link to nothing, inside OUT_DIR: writing it makes a file there
    if stat.S_ISDIR(mode):
        if folder is False:
            raise OutsideDataset(f"{path}: a folder, where shardkit keeps a file; move it away")
    elif not stat.S_ISREG(mode):
        raise OutsideDataset(f"{path}: a {_kind(mode)}, not a regular file; shardkit reads and writes only files")
    elif folder:
        raise OutsideDataset(f"{path}: a file, where shardkit keeps a folder; move it away")


def check_own_entries(out_dir: str) -> None:
    """Refuse, before anything opens, writes or sends one, an OUT_DIR whose own entries (its
    top-level files shardkit writes, ``data/``, ``metadata/`` and ``.shardkit/`` with all they
    hold) are not :func:`check_entry`'s regular files and folders inside OUT_DIR: one rule for
    every pack mode, push and remux. The user's other files (beside an ``--adopt``ed repo) are
    not looked at."""
    if not os.path.isdir(out_dir):
        return
    root, hidden = _own_roots(out_dir)
    # The working folder's own files may be where they are; nothing may point into .git.
    private = {name: [p for n, p in hidden.items() if n != name] for name in OWN_FOLDERS}
    names = sorted(n for n in os.listdir(out_dir) if n in OWN_FOLDERS or is_small_file(n))
    for name in names:
        path = os.path.join(out_dir, name)
        check_entry(path, root, private.get(name, hidden.values()), folder=name in OWN_FOLDERS)
        if name in OWN_FOLDERS and os.path.isdir(path):
            # Under a folder that is no link, the walk (which follows none) reaches only entries
            # whose real path is OUT_DIR's own folder and the names walked: inside root and in no
            # other private folder. So there only a link or a special file needs check_entry's
            # real path (a remux stages a file per batch in .shardkit/). A linked folder may lead
            # anywhere, an ancestor of .git too: everything in it is checked.
            linked = os.path.islink(path)
            for folder, dirs, found in os.walk(path):
                for entry in sorted(dirs + found):
                    entry_path = os.path.join(folder, entry)
                    if linked or not _plain_entry(entry_path):
                        check_entry(entry_path, root, private[name])


def _plain_entry(path: str) -> bool:
    """Whether ``path`` is a regular file or a folder itself, not a link (False if it cannot be
    looked at: then :func:`check_entry` says why, or passes it over if it is gone)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def check_published_files(out_dir: str, files: Iterable[str]) -> None:
    """Refuse a file a push would publish (``--include``'d ones too) unless it is a regular file
    of OUT_DIR whose real path is in neither ``.git`` nor ``.shardkit`` (:func:`check_entry`):
    huggingface_hub opens each by path. OUT_DIR's own folders were walked by
    :func:`check_own_entries` already."""
    root, hidden = _own_roots(out_dir)
    for path in files:
        check_entry(path, root, hidden.values())


def _own_roots(out_dir: str) -> tuple[str, dict[str, str]]:
    """Where OUT_DIR's files may lead (:func:`~.location.readable_root`), and the real paths of
    the folders that are never published, by name."""
    real = os.path.realpath(out_dir)
    return readable_root(out_dir), {name: os.path.join(real, name) for name in sorted(NEVER_PUBLISHED)}


def foreign_entries(out_dir: str) -> list[str]:
    """What in an existing OUT_DIR shows it is not a shardkit repo: empty when the folder is empty,
    or holds shardkit's earlier output (a manifest or work folder), or a card made by ``shardkit
    new``; else its top-level entries that shardkit does not write, or ``README.md`` itself."""
    try:
        names = sorted(os.listdir(out_dir))
    except FileNotFoundError:
        return []
    if not names or MANIFEST_NAME in names or WORK_DIR in names:
        return []
    try:
        with open(os.path.join(out_dir, "README.md"), encoding="utf-8", errors="replace") as f:
            if is_shardkit_card(f.read()):
                return []
    except FileNotFoundError:
        pass
    others = [name for name in names if name not in SHARDKIT_ROOT_ENTRIES and not is_small_file(name)]
    return others or [name for name in names if name != ".git"]


def check_out_dir(out_dir: str, *, adopt: bool) -> None:
    """Refuse, before anything is written, an OUT_DIR that holds someone else's files, unless
    ``adopt`` says to add a dataset to that repo (shardkit then edits only its own keys and
    section of README.md, adds lines to .gitattributes, and writes its own files)."""
    foreign = foreign_entries(out_dir)
    if adopt:
        in_the_way = [n for n in ("preview.jpg", TABLE_NAME) if foreign and os.path.exists(os.path.join(out_dir, n))]
        if in_the_way:
            raise UsageError(
                f"{out_dir} holds {', '.join(in_the_way)}, which shardkit writes itself; with --adopt it"
                " replaces no file of yours: move it away, then pack again"
            )
        return
    if foreign:
        shown = listed(foreign, 8)
        raise UsageError(
            f"{out_dir} is not empty and not a shardkit dataset repo (it holds {shown}). Pack into an empty"
            " folder or one made by `shardkit new`, or pass --adopt to add the dataset to this repo"
            " (shardkit then changes only its own keys and section of README.md and adds LFS lines to"
            " .gitattributes; your other files stay as they are)."
        )


#: What shardkit writes into an OUT_DIR, and into a ``--work-dir``, as :func:`check_apart` says.
OUT_DIR_FILES = "the dataset's shards, card and preview.jpg"
WORK_DIR_FILES = f"its working files ({WORK_DIR}/) and a copy of the card"


def _identity(path: str) -> tuple[int, int] | None:
    """A folder's (device, inode), or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def is_within(path: str, folder: str) -> bool:
    """Whether ``path`` (which need not exist yet) is ``folder`` or inside it: its real path's
    existing ancestors are compared with ``folder`` by device and inode, so a symlink, ``..``, a
    trailing slash or another spelling of a name on a case-insensitive filesystem leads to the
    same answer the filesystem would give."""
    target = _identity(folder)
    current = os.path.realpath(path)
    while target is not None:
        if _identity(current) == target:
            return True
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return False


def _shown(path: str) -> str:
    """A path as given, and where a link takes it (which is what the message is about)."""
    real = os.path.realpath(path)
    return repr(path) + (f" (really {real!r})" if real != os.path.abspath(path) else "")


def check_apart(location: Location, local_dir: str, inputs: Iterable[tuple[str, str]]) -> None:
    """Refuse, before anything is written, the local folder a pack or remux writes in (OUT_DIR,
    or for an OUT_DIR URL its ``--work-dir``) when it is an input folder (``inputs``: pairs such as
    ``("IMAGES_DIR", path)``), lies inside one, or holds one: shardkit's files would become input
    rows of the next pack (README's ``find`` one-liner finds preview.jpg), or the input part of
    the repo."""
    what = "OUT_DIR" if location.is_local else "--work-dir"
    writes = OUT_DIR_FILES if location.is_local else WORK_DIR_FILES
    shown = _shown(local_dir)
    for name, folder in inputs:
        given = f"{name} {_shown(folder)}"
        if is_within(local_dir, folder) and is_within(folder, local_dir):
            raise UsageError(
                f"{what} {shown} is {given} itself, the input folder; {what} is where shardkit writes {writes}:"
                f" choose a new folder outside {name}"
            )
        if is_within(local_dir, folder):
            raise UsageError(
                f"{what} {shown} is inside {given}: {writes} would lie among the input files, and the next"
                f" pack of {name} would read them as rows; choose a folder outside {name}"
            )
        # (remux packs the files it staged in OUT_DIR's own working folder, which is never published)
        if is_within(folder, local_dir) and not is_within(folder, os.path.join(local_dir, WORK_DIR)):
            raise UsageError(
                f"{given} is inside {what} {shown}, where shardkit writes {writes}: the input would become part"
                f" of it; keep {name} and {what} apart"
            )


def check_parent_exists(path: str, what: str) -> None:
    """Refuse a file or folder to be made at ``path`` whose parent folder does not exist: a command
    makes the folder it is given, not a chain of folders from a typo (``-o /nonexistent/dir/out``).
    The command line checks each folder it is given (the library makes what it is asked to)."""
    real_parent = os.path.dirname(os.path.realpath(path))
    if os.path.isdir(real_parent):
        return
    # Named as the filesystem sees it: a link (dangling, or through a linked folder) leads elsewhere.
    parent = real_parent
    leads = f" (a link to {os.path.realpath(path)!r})" if os.path.islink(path) else ""
    if os.path.exists(real_parent):
        raise UsageError(f"{what} {path!r}{leads}: {parent!r} is not a folder; choose another {what}")
    import shlex

    raise UsageError(
        f"{what} {path!r}{leads}: its folder {parent!r} does not exist; create it first"
        f" (mkdir -p {shlex.quote(parent)}) or choose another {what}"
    )


class CreatedHere:
    """What of OUT_DIR a run made, to take away again when the run is refused or only a dry run:
    a run that writes nothing leaves no trace.

    Only what is certainly this run's goes: its staging, the work folder if it held nothing but
    the lock when this run took it, and then OUT_DIR and its parents that did not exist before,
    each removed only if empty (``os.rmdir``), so a file anyone else put there stops the undo.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = os.path.abspath(out_dir)
        self.missing: list[str] = []  # OUT_DIR and the parents that do not exist yet, deepest first
        path = self.out_dir
        while not os.path.exists(path) and os.path.dirname(path) != path:
            self.missing.append(path)
            path = os.path.dirname(path)
        self.work_dir_ours = False
        self.kept = False  # the run has begun to change OUT_DIR: nothing is undone
        self.finished = False  # the run ended without an error

    def locked(self) -> None:
        """Call once the lock is held: is the work folder this run's alone?"""
        work = os.path.join(self.out_dir, WORK_DIR)
        self.work_dir_ours = set(os.listdir(work)) <= {"lock", ".gitignore"}

    def keep(self) -> None:
        """The run has started to change OUT_DIR: keep what it made from now on."""
        self.kept = True

    def undo(self) -> None:
        import shutil

        if self.kept:
            return
        work = os.path.join(self.out_dir, WORK_DIR)
        if self.work_dir_ours:
            shutil.rmtree(work, ignore_errors=True)
        else:  # an earlier run's work folder: only what this run staged goes
            for name in ("staging", "tmp"):
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        for folder in self.missing:
            try:
                os.rmdir(folder)
            except OSError:  # not empty (someone else's files), or gone: stop here
                break


@contextlib.contextmanager
def locked(out_dir: str) -> Iterator[str]:
    """Hold OUT_DIR's lock (``.shardkit/lock``) for the block; yield the working folder.

    One shardkit run per OUT_DIR at a time: a second pack or push is refused, not queued.
    """
    work_dir = os.path.join(out_dir, WORK_DIR)
    os.makedirs(work_dir, exist_ok=True)
    ignore = os.path.join(work_dir, ".gitignore")
    if not os.path.exists(ignore):  # keeps the working files out of git, whatever the repo's rules
        with naming_errors(ignore), open(ignore, "w") as f:
            f.write("# shardkit's working files: not part of the dataset\n*\n")
    with open(os.path.join(work_dir, "lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"another shardkit run is working on {out_dir} (lock: {lock.name}); wait for it to finish"
            ) from None
        yield work_dir


class HashCache:
    """The sha256 of OUT_DIR's files, remembered with the (size, mtime, inode) they had.

    Packing records each shard as it writes it, so the first push does not read the dataset
    again to check it, and a resumed pack or push does not re-read terabytes: a file is hashed
    again only when its size, modification time or inode changed (what git's index and rsync
    trust too). ``shardkit verify`` never uses it: it reads everything.
    Kept in ``.shardkit/hashes.json``; safe to delete.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.path = os.path.join(out_dir, WORK_DIR, "hashes.json")
        self._lock = threading.Lock()
        self.entries: dict[str, list[str]] = read_hash_cache(self.path)

    @staticmethod
    def _stamp(st: os.stat_result) -> str:
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

    def record(self, rel: str, sha256: str) -> None:
        """Remember a file's sha256, known without reading it (the writer computed it)."""
        st = os.stat(os.path.join(self.out_dir, rel))
        with self._lock:
            self.entries[rel] = [self._stamp(st), sha256]

    def sha256(self, rel: str) -> str:
        path = os.path.join(self.out_dir, rel)
        stamp = self._stamp(os.stat(path))
        with self._lock:
            entry = self.entries.get(rel)
        if entry is not None and entry[0] == stamp:
            return entry[1]
        digest = sha256_file(path)
        with self._lock:
            self.entries[rel] = [stamp, digest]
        return digest

    def save(self) -> None:
        with self._lock:
            data = json.dumps(self.entries, sort_keys=True).encode()
        write_atomic(self.path, data)


def shard_problem(
    out_dir: str, shard: ManifestShard, hashes: HashCache | None = None, *, published: bool = False
) -> str | None:
    """Why the shard and its rows on disk differ from what the manifest records; None if intact.

    Sizes are compared first, so a truncated file is caught without reading it. With
    ``hashes``, a file unchanged since it was last hashed is not read again. A nested shard's
    rows are its part of its folder's metadata file, or, before the pack's finish has placed
    them there (a done record), the work folder's lines file. ``published``: what a push would
    publish, the folder's file only (a pack also takes the rows kept in a lines file).
    """
    for rel, size, sha in ((shard.file, shard.bytes, shard.sha256), (shard.metadata, None, shard.metadata_sha256)):
        if rel == shard.metadata and shard.metadata_range is not None:
            problem = _part_problem(out_dir, shard)
            # (a run killed while it wrote the folder's file keeps the rows in the lines file)
            return None if problem is None or (not published and _lines_kept(out_dir, shard)) else problem
        if rel == shard.metadata:
            rel = rows_written_to(shard.file, shard.metadata)
        path = os.path.join(out_dir, rel)
        try:
            actual = os.path.getsize(path)
            if size is not None and actual != size:
                return f"{rel} is {actual} bytes, the manifest says {size}"
            digest = hashes.sha256(rel) if hashes is not None else sha256_file(path)
        except FileNotFoundError:
            return f"{rel} is missing"
        if digest != sha:
            return f"{rel} does not match the sha256 the manifest records"
    return None


def _lines_kept(out_dir: str, shard: ManifestShard) -> bool:
    """Whether a nested shard's rows are in its lines file (see :func:`.packfinish.write_folder_metadata`)."""
    try:
        return sha256_file(os.path.join(out_dir, lines_file_of(shard.file))) == shard.metadata_sha256
    except FileNotFoundError:
        return False


def _part_problem(out_dir: str, shard: ManifestShard) -> str | None:
    """Why a nested shard's part of its folder's metadata file is not its rows; None if it is."""
    assert shard.metadata_range is not None
    start, end = shard.metadata_range
    try:
        part = read_published_rows(Location.parse(out_dir), shard)
    except FileNotFoundError:
        return f"{shard.metadata} is missing"
    if not shard.has_rows(part):
        return f"{shard.metadata}, bytes {start} to {end}, do not match the sha256 the manifest records"
    return None


# --- the repo's small files travel between OUT_DIR and the local folder a run edits them in -------


def _small_files(folder: str) -> list[str]:
    """shardkit's top-level files in a local folder (card, manifest, .gitattributes, preview, script)."""
    return sorted(
        name for name in os.listdir(folder) if is_small_file(name) and os.path.isfile(os.path.join(folder, name))
    )


def pull_small_files(location: Location, local_dir: str) -> list[str]:
    """Make the local work folder's top-level files those at the URL (a card or loading script
    made by ``shardkit new``, an earlier run's manifest), which a run then edits; the URL is the
    truth, so a file gone from it goes from the work folder too. Return their names."""
    if location.is_local:  # a local OUT_DIR is the folder a run edits its files in: nothing to copy
        return [name for name in _small_files(local_dir) if name != TABLE_NAME]
    # Not the metadata table: every pack writes it anew, and it can be GBs.
    names = [name for name in location.list("") if is_small_file(name) and name != TABLE_NAME]
    for name in names:
        data = location.read_bytes(name, MAX_MANIFEST_BYTES if name == MANIFEST_NAME else MAX_SMALL_FILE_BYTES)
        if data is not None:
            write_atomic(os.path.join(local_dir, name), data)
    for name in set(_small_files(local_dir)) - set(names):
        os.unlink(os.path.join(local_dir, name))
    return names


def push_small_files(location: Location, local_dir: str) -> list[str]:
    """Put the top-level files a run wrote in ``local_dir`` at OUT_DIR, the manifest last (it says
    the shards are complete); return their names. Not the metadata table: a pack puts it there
    itself (it can be GBs). For a local OUT_DIR, ``local_dir`` is OUT_DIR: they are in place."""
    names = [name for name in _small_files(local_dir) if name != TABLE_NAME]
    names.sort(key=lambda name: name == MANIFEST_NAME)
    for name in names:
        location.upload(os.path.join(local_dir, name), name)
    return names


def url_shard_problem(
    sizes: dict[str, int], shard: ManifestShard, location: Location | None = None, *, published: bool = False
) -> str | None:
    """Why a shard at the URL is not the one recorded as written; None if it is there at its size.

    ``sizes`` is one listing of the URL (:meth:`Location.find`), not a request per shard. Sizes
    only: objects are uploaded whole, so a shard that is there at its size is the one written
    (``shardkit verify URL`` reads and hashes everything). A nested shard's part of its folder's
    file is read and hashed (``location``): the file is rewritten whole when a shard of the
    folder changes, so its size says nothing of where a part is. ``published`` as for
    :func:`shard_problem`.
    """
    size = sizes.get(shard.file)
    if size is None:
        return f"{shard.file} is missing"
    if size != shard.bytes:
        return f"{shard.file} is {size} bytes, the record says {shard.bytes}"
    if shard.metadata_range is None and shard.metadata != own_metadata_file(shard.file):
        rows = lines_file_of(shard.file)  # a nested shard's rows, not placed in its folder's file yet
        return None if rows in sizes else f"{rows} is missing"
    if sizes.get(shard.metadata, -1) < (shard.metadata_range[1] if shard.metadata_range else 0):
        return f"{shard.metadata} is missing or shorter than the manifest records"
    if shard.metadata_range is not None and location is not None and not _part_holds(location, shard):
        rows = lines_file_of(shard.file)
        if published or rows not in sizes or not shard.has_rows(_listed_bytes(location, rows, sizes[rows])):
            start, end = shard.metadata_range
            return f"{shard.metadata}, bytes {start} to {end}, do not match the sha256 the manifest records"
    return None


def _part_holds(location: Location, shard: ManifestShard) -> bool:
    return shard.has_rows(read_published_rows(location, shard))


def _listed_bytes(location: Location, rel: str, size: int) -> bytes:
    """The first ``size`` bytes of a file at the URL (its size in the listing: a longer file is
    another's, which the caller's hash tells)."""
    with location.open_range(rel, 0, size) as f:
        return read_upto(f, size)
