"""One pack run: what every stage of :func:`shardkit.pack.pack` needs, in one object.

The stages (:mod:`.packstage`, :mod:`.packplan`, :mod:`.packresume`, :mod:`.packwrite`,
:mod:`.packfinish`) each take a :class:`PackRun` instead of the same nine values passed by hand.
It names the run's two folders apart: ``local_dir``, the folder the repo's small files are
edited in (OUT_DIR itself, or for an OUT_DIR URL a local work folder), and ``shardkit_dir``, its
``.shardkit/`` folder of working files (state, done records, staging, temporary shards), held
under the lock for the whole run.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

from .errors import UsageError
from .formats import ShardFormat
from .location import Location
from .outdir import WORK_DIR, CreatedHere, check_apart, check_out_dir, check_own_entries, check_parent_exists
from .packconfig import PackConfig
from .problems import rejects_path_problem
from .progress import Progress
from .tasks import Cluster


class PhaseClock:
    """Wall-clock seconds of consecutive phases, each measured from the end of the one before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def start(self) -> None:
        """The first phase starts now."""
        self._last = time.perf_counter()

    def end(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = now - self._last
        self._last = now


@dataclass
class PackRun:
    """What every stage of one pack needs; made once the lock is held."""

    config: PackConfig
    fmt: ShardFormat
    location: Location  # where the repo goes: a folder, a URL
    local_dir: str  # OUT_DIR, or for a URL the local folder its small files (card, manifest...) are edited in
    shardkit_dir: str  # local_dir/.shardkit: the run's working files, under its lock
    progress: Progress
    cluster: Cluster | None  # a Dask cluster the tasks run on (None: this machine)
    created: CreatedHere  # what of OUT_DIR this run made, undone if it is refused
    started: float  # time.perf_counter() when pack was called
    phases: PhaseClock = field(default_factory=PhaseClock)

    @property
    def remote(self) -> bool:
        """Whether OUT_DIR is a URL: workers writing there need no access to this machine (their
        rows travel in the task)."""
        return not self.location.is_local

    @property
    def staging_dir(self) -> str:
        """The rows checked and sorted (``sorted.tsv``), the shards' tables, the rejects' spool."""
        return os.path.join(self.shardkit_dir, "staging")

    @property
    def tmp_dir(self) -> str:
        """Shards being written, renamed into place when complete."""
        return os.path.join(self.shardkit_dir, "tmp")

    @property
    def done_dir(self) -> str:
        """One record per shard written, so a run stopped part-way resumes."""
        return os.path.join(self.shardkit_dir, "done")

    def done_record(self, shard_file: str) -> str:
        return os.path.join(self.done_dir, shard_file.replace("/", "__") + ".json")

    @property
    def default_rejects(self) -> str | None:
        """The rejects file without ``--rejects``; a dry run writes none of its own (it leaves no work folder)."""
        return None if self.config.dry_run else default_rejects(self.local_dir)

    @property
    def rejects_path(self) -> str | None:
        """Where ``--on-error skip`` lists the rows it rejects (None: it is not given)."""
        return (self.config.rejects_path or self.default_rejects) if self.config.on_error == "skip" else None

    def clear_working_folders(self) -> None:
        """Remove what a run that died left in the working folders; make the staging folder."""
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        shutil.rmtree(self.staging_dir, ignore_errors=True)
        os.makedirs(self.staging_dir)


def default_rejects(local_dir: str) -> str:
    """Where ``--on-error skip`` lists bad rows without ``--rejects``: in the work folder."""
    return os.path.join(local_dir, WORK_DIR, "rejects.jsonl")


def check_places(config: PackConfig, location: Location, local_dir: str) -> None:
    """Refuse, before anything is read or written there, an OUT_DIR (or ``--work-dir``) at, in or
    around IMAGES_DIR, a ``--rejects`` file that must not be written, and an OUT_DIR holding
    files shardkit did not make."""
    check_apart(location, local_dir, [("IMAGES_DIR", config.images_dir)])
    if config.rejects_path:
        check_parent_exists(config.rejects_path, "--rejects")
    if config.rejects_path and config.on_error == "skip":
        problem = rejects_path_problem(
            config.rejects_path,
            metadata=config.metadata_path,
            images_dir=config.images_dir,
            out_dir=local_dir,
            default=default_rejects(local_dir),
        )
        if problem:
            raise UsageError(problem)
    # Before anything reads or writes there (the foreign-file check reads README.md; the lock is in .shardkit/).
    check_own_entries(local_dir)
    if location.is_local:  # a URL is not checked for foreign files: a bucket has no "folder" to claim
        check_out_dir(local_dir, adopt=config.adopt)
