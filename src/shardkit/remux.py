"""``remux``: stream a dataset through a per-batch function straight into new shards.

Preprocessing (resize, augmentation, filtering) becomes a one-time cost: the source is read in
streaming mode, never materialised; each batch goes through the user's function; the results
are encoded and packed with the same planner, writer, manifest and card as :mod:`.pack`.

Two phases, both resumable:

1. **Transform.** This process reads the source once, in order (``shardkit.stream`` for a
   shardkit folder or repo, pyarrow for Parquet files datasets would read with its Parquet
   builder, ``datasets.load_dataset(..., streaming=True)`` otherwise), one split
   after another, in batches of ``batch_size`` rows whose files are not decoded yet. Each batch is
   a task for one of ``jobs`` worker processes (or a Dask cluster's): it decodes the images, calls
   ``fn(batch)`` or ``fn(batch, seeds)``, encodes the file column (PIL images re-encoded as
   ``image_format``/``quality``; bytes kept) and appends each output row's file to the batch's
   file for its extension under ``.shardkit/remux/files/<run>/<split>/<batch>/`` (``rows.jpg``:
   the pack reads each row as a byte range of it); it returns the rows' metadata lines. Work is so
   divided by batches of rows, not by source files: a source of one large shard keeps every core
   busy, and no worker opens the source again (listing a Hub dataset and importing datasets cost
   each worker as much as a few hundred rows of a typical augmentation). Reading is cheap next
   to the function, so the one reader keeps the workers fed.
   Batches finish in any order and are committed in order: their lines appended to
   ``parts/<split>.jsonl``, synced, then ``parts/<split>.json`` rewritten with the counts and
   where the source was read to (datasets' ``state_dict()``). A killed run resumes after the last
   committed batch (``load_state_dict`` skips the source's files read whole); a batch finished
   but not committed is taken as its worker recorded it (``<batch>/batch.json``, beside its files), so
   only the batches in flight are transformed again (``<run>``: the remux's id, kept while it
   resumes, so an attempt of a stopped remux still running elsewhere never mixes into another's).
   Memory: the reader's (a Parquet source, what push_to_hub
   writes, is read a few rows at a time: :mod:`.remuxparquet`) and ``jobs + 1`` batches in
   flight here; one batch, decoded, in each worker. None of it grows with the source or its shards.
2. **Pack** those files into OUT_DIR with :func:`shardkit.pack.pack` (which resumes by itself).

Why stage on disk at all: shards are hash-prefixed (rows grouped by key over the whole
dataset), so no output shard is complete until every input row has been seen. The staged files
are the processed output (usually smaller than the input), written once and read once, and
deleted after the pack.

What the output keeps of its source:

* **Splits.** Every split is read (``split=None``; ``split="test"`` reads one), and each output
  row goes to the split of its source row (a ``split`` the function returns wins): the output
  has the source's splits, ``data/<split>/``. An output that is ``train`` alone is packed as a
  dataset without splits (``data/*.zip``), as before splits existed. A split name the packer
  cannot take (datasets allows ``train.clean.100``) has each other character made ``_``.
* **Class labels.** A ``ClassLabel`` column (the manifest's features of a shardkit source,
  ``ds.features`` of another) reaches the function as integers, as datasets gives it, and is
  staged as its class names, so the first such column the output still has is published as a
  ClassLabel with the same names in the same order (integers unchanged; -1, datasets' "no
  label", becomes null). The packer makes one ClassLabel column: any other keeps its class
  names as strings (as does a list of class labels), which loses no information. A column the
  function renames, drops or fills with other values than class integers and names is not
  published as a ClassLabel.
* **Card fields.** The source card's ``license`` (with ``license_name``/``license_link``),
  ``pretty_name``, ``language``, ``task_categories``, ``task_ids`` and ``tags`` (not
  ``shardkit``) go into OUT_DIR's README.md after the pack (and to an OUT_DIR URL). A key the output card already sets
  keeps its value (the user's, for this output), with a warning where it differs from the
  source's; tags are merged. Keys shardkit owns (``configs``, ``dataset_info``,
  ``size_categories``) are never copied.

Determinism: a row's key is its source key if it has one (and the function keeps the row count)
or ``sha256(identity)[:32]`` where the identity is the source split and row number of the
batch's first row and the output position; ``seeds[i]`` is derived from ``seed`` and the source
row's identity. Batches are cut by row number in the split, whatever ``jobs`` or the executor:
same source, function, batch size and seed, same bytes.
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from .check import SPLIT_COLUMN
from .errors import InputErrors, ShardkitError, UsageError, naming_errors
from .location import (
    HUB_REPO_ID,
    HUB_REVISION,
    MAX_SMALL_FILE_BYTES,
    Location,
    bounded_hub_requests,
    network_timeout,
    read_bounded,
)
from .manifest import write_atomic
from .outdir import check_apart, check_out_dir, check_own_entries, locked
from .progress import NullProgress, Progress
from .remuxconfig import BatchFn, ImageFormatName, RemuxConfig
from .remuxfn import (
    OutputTypes,
    call_function,
    derived_key,
    function_file_sha256,
    function_spec,
    load_function,
    metadata_line,
    output_row,
    sample_seed,
    wants_seeds,
)
from .remuxsource import (
    ClassLabelColumn,
    SourceSplit,
    data_files_builder,
    decode_files,
    file_columns_of,
    open_source,
    read_batches,
    shardkit_manifest,
    source_splits,
)
from .rowrules import KEY_RE
from .tasks import (
    Cluster,
    cluster_for,
    in_pool_worker,
    keep_freed_memory,
    run_tasks,
    start_forkserver,
    task_executor,
)
from .workstate import read_remux_batch, read_remux_progress, read_remux_state

if TYPE_CHECKING:  # imported where the remux packs: its transform workers never need pack
    from .pack import PackSummary

__all__ = ["ImageFormatName", "RemuxConfig", "RemuxSummary", "remux"]  # RemuxConfig: remuxconfig.py

log = logging.getLogger(__name__)

REMUX_DIR = "remux"


@dataclass(frozen=True)
class RemuxSummary:
    source_shards: int
    resumed_rows: int  # rows an earlier run had transformed
    rows_in: int
    rows_out: int
    transform_seconds: float
    pack: PackSummary
    splits: list[str] = field(default_factory=list)  # the source splits read
    class_label: str | None = None  # the column published as the source's ClassLabel
    card_fields: list[str] = field(default_factory=list)  # the source card's keys set in the output card

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["pack"] = self.pack.to_json()
        return data


#: The card keys a remux keeps from its source: what the data is, under which terms. Never
#: shardkit's own (configs, dataset_info, size_categories): those describe the output's shards.
CARD_KEYS = (
    "license",
    "license_name",
    "license_link",
    "pretty_name",
    "language",
    "task_categories",
    "task_ids",
    "tags",
)


_HUB_SOURCE = re.compile(rf"(?:hf://datasets/)?({HUB_REPO_ID})(?:{HUB_REVISION})?/?")


def _source_card_text(config: RemuxConfig) -> str | None:
    """The source's README.md, or None if it has none (data files named directly have none)."""
    source = config.source
    if data_files_builder(source) is not None:
        return None
    try:
        location: Location | None = Location.parse(source)
    except UsageError:
        location = None
    if location is not None and not location.has_revisions:  # a folder, or a shardkit folder at a URL
        data = location.read_bytes("README.md")
    elif match := _HUB_SOURCE.fullmatch(source):  # the Hub's card through its API (a revision in the id too)
        data = _hub_card(match.group(1), config.revision or match.group(2), source)
    else:
        return None
    if data is None:
        return None
    return data.decode("utf-8", "replace").removeprefix("\ufeff").replace("\r\n", "\n")


def _hub_card(repo_id: str, revision: str | None, source: str) -> bytes | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        with bounded_hub_requests(network_timeout()):  # a timeout, and no hour-long Retry-After
            path = hf_hub_download(repo_id, "README.md", repo_type="dataset", revision=revision)
    except EntryNotFoundError:  # a repo without a card
        return None
    except Exception as exc:  # the data was just read from there: this is a failure, not "no card"
        raise ShardkitError(
            f"cannot read the card (README.md) of {source!r}, whose license and description the output keeps:"
            f" {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    with open(path, "rb") as f:
        return read_bounded(f, MAX_SMALL_FILE_BYTES, f"the card (README.md) of {source!r}")


def source_card_fields(config: RemuxConfig) -> dict[str, Any]:
    """The keys of :data:`CARD_KEYS` the source card's YAML front matter sets."""
    import yaml

    from .card import split_front_matter

    text = _source_card_text(config)
    if text is None:
        return {}
    try:
        data, _ = split_front_matter(text)
    except (yaml.YAMLError, ValueError) as exc:
        log.warning("the card of %r does not parse (%s): its license and other fields are not kept", config.source, exc)
        return {}
    fields = {key: data[key] for key in CARD_KEYS if data.get(key) not in (None, "", [], {})}
    if isinstance(fields.get("tags"), list):
        fields["tags"] = [t for t in fields["tags"] if t != "shardkit"]  # the output card says so itself
        if not fields["tags"]:
            del fields["tags"]
    return fields


def keep_card_fields(out_dir: str, fields: dict[str, Any]) -> list[str]:
    """Set the source's card fields in OUT_DIR's README.md where the card does not set them (a
    key it sets is the user's, for this output: kept, with a warning if the source's differs);
    tags are merged. Return the keys set."""
    from .card import read_front_matter, set_card_keys

    path = os.path.join(out_dir, "README.md")
    data = read_front_matter(out_dir)
    values: dict[str, Any] = {}
    for key, value in fields.items():
        current = data.get(key)
        if key == "tags" and isinstance(value, list) and isinstance(current, list | type(None)):
            merged = list(current or [])
            merged += [t for t in value if t not in merged]
            if merged != current:
                values[key] = merged
        elif current in (None, "", [], {}):
            values[key] = value
        elif current != value:
            log.warning(
                "%s keeps its %s %s; the source's card says %s",
                path,
                key,
                json.dumps(current, ensure_ascii=False, default=str),
                json.dumps(value, ensure_ascii=False, default=str),
            )
    if values:
        set_card_keys(out_dir, values)
    return list(values)


@dataclass(frozen=True)
class BatchTask:
    """One batch of source rows for a worker: what it needs to run the function on them and
    stage the output (pickled to the worker, so no more than that)."""

    config: RemuxConfig
    split: SourceSplit
    write_split: bool  # stage each row's split (the output has splits other than train, or a train not alone)
    file_columns: tuple[str, ...]
    work_dir: str
    run: str  # the remux's id (:func:`_start_state`): what it stages is named by it
    number: int  # of the split's batches
    first: int  # the split's row number of its first row
    rows: list[dict[str, Any]]
    recorded: BatchResult | None = None  # the batch as a stopped attempt of this run finished it (then no rows)

    @property
    def name(self) -> str:
        return batch_name(self.split.name, self.first)


def batch_name(split: str, first: int) -> str:
    """How messages name a batch: ``split 'test', batch from row 64``."""
    return f"split {split!r}, batch from row {first}"


@dataclass(frozen=True)
class BatchResult:
    """A batch's output, staged: its files under files/, its metadata lines for the part file."""

    number: int
    first: int  # the split's row number of its first source row
    rows_in: int
    rows_out: int
    lines: bytes
    columns: list[str]
    not_labels: list[str]  # ClassLabel columns the function filled with something else


@dataclass(frozen=True)
class BatchFailure:
    """A batch the function failed on, or whose output cannot be published: its error is raised
    when the batch's turn to be committed comes, after every batch before it, so the error a
    run stops with is the first batch's in source order, whatever ``--jobs``."""

    number: int
    error: ShardkitError


def transform_batch(task: BatchTask) -> BatchResult | BatchFailure:
    """Run one batch through the function; stage its output rows' files under
    ``files/<run>/<split>/<batch>/`` (:class:`_BatchFiles`; written again whole by a rerun), record
    the batch as finished and return its metadata lines; a batch a stopped run finished is
    returned as recorded. What fails with a message for the user is returned as a failure."""
    try:
        return _transform_batch(task)
    except ShardkitError as exc:
        return BatchFailure(task.number, exc)


def _transform_batch(task: BatchTask) -> BatchResult:
    if task.recorded is not None:  # finished by a run of this remux stopped before committing it
        return task.recorded
    if in_pool_worker():  # a worker process of shardkit's own (not a Dask worker: the user's)
        keep_freed_memory()
    config = task.config
    fn = _loaded_function(config.fn)
    batch_rows = task.rows
    identities = [
        str(r["key"]) if isinstance(r.get("key"), str) else f"{task.split.name}/{task.first + i}"
        for i, r in enumerate(batch_rows)
    ]
    batch = {name: [r.get(name) for r in batch_rows] for name in batch_rows[0]}
    rows_named = f"{config.source}: split {task.split.name!r}, row"  # a file that does not decode is the source's
    decode_files(batch, list(task.file_columns), config.decode, rows_named, task.first)
    seeds = [sample_seed(config.seed, identity) for identity in identities]
    where = task.name
    last = task.first + len(batch_rows) - 1
    rows = call_function(fn, wants_seeds(fn), batch, seeds, where=where, rows=f"rows {task.first}..{last}")
    folder = _batch_folder(task)
    # Written in a folder of this attempt's own, then put into place whole (_put_in_place).
    final_dir = _batch_dir(task)
    files_dir = f"{final_dir}.{secrets.token_hex(4)}.partial"
    os.makedirs(files_dir)
    try:
        columns: set[str] = set()
        not_labels: set[str] = set()
        lines = []
        keys: dict[str, int] = {}
        with _BatchFiles(files_dir) as staged_files:
            for j, row in enumerate(rows):
                staged = output_row(row, config, task.split.labels, where, file_columns=task.file_columns, index=j)
                not_labels |= staged.not_labels
                key = staged.key
                if key is None and len(rows) == len(identities) and KEY_RE.fullmatch(identities[j]):
                    key = identities[j]
                if key is None:
                    key = derived_key(f"{identities[0]}#{j}")
                if (before := keys.setdefault(key, j)) != j:  # (the pack finds those of two batches)
                    raise ShardkitError(
                        f"the map function returned key {key} for rows {before} and {j} of its output ({where}):"
                        " each row needs a key of its own; drop the 'key' column for shardkit to give each row one"
                    )
                name, offset = staged_files.add(staged.ext, staged.data)
                fields = staged.fields
                if task.write_split and fields.get(SPLIT_COLUMN) is None:
                    fields[SPLIT_COLUMN] = task.split.out  # (a split the function gave wins: it may move rows)
                columns.update(fields)
                lines.append(metadata_line([f"{folder}/{name}", offset, len(staged.data)], key, fields, where))
        result = BatchResult(
            task.number, task.first, len(batch_rows), len(rows), b"".join(lines), sorted(columns), sorted(not_labels)
        )
        # Recorded with its files, in the folder put into place whole: a run stopped before the
        # batch was committed (behind a slow batch, many may be finished and not committed) takes
        # it as it is instead of transforming it again.
        finished = asdict(result) | {"lines": result.lines.decode()}
        del finished["number"]
        write_atomic(os.path.join(files_dir, BATCH_RECORD), json.dumps(finished).encode())
    except BaseException:  # (Ctrl-C too) nothing of a batch that failed stays
        shutil.rmtree(files_dir, ignore_errors=True)
        raise
    return _put_in_place(task, files_dir, final_dir, result)


#: A finished batch's record in its folder: counts, first row, metadata lines, columns.
BATCH_RECORD = "batch.json"


def _put_in_place(task: BatchTask, files_dir: str, final_dir: str, result: BatchResult) -> BatchResult:
    """Rename a finished batch's folder into place; a folder already there is never replaced.

    Another attempt of the batch may have finished first: a stopped run's, still running on a
    cluster or orphaned, with the same run id. Its folder holds its files and their record
    together (written before its rename), so the lines committed always name the bytes in place,
    even from a function that is not deterministic: the later attempt gives that record, not its
    own. (A folder in place that does not hold is removed by the process that reads the source,
    before it hands the batch out: never by a worker, which might race another.)"""
    try:
        os.rename(files_dir, final_dir)  # (refused onto a folder that holds anything)
        return result
    except OSError as exc:
        shutil.rmtree(files_dir, ignore_errors=True)
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if (in_place := _recorded_result(task)) is None:
        raise ShardkitError(f"{final_dir}: another attempt of the {task.name} put a damaged folder there; re-run")
    return in_place


class _BatchFiles:
    """A batch's staged files: one per extension (``rows.jpg``), each output row a byte range of
    one (the packer reads ranges: ``PackConfig.file_ranges``). A file per row cost a create each,
    and a remux of 100M rows would need more inodes than a disk has."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._files: dict[str, BinaryIO] = {}

    def add(self, ext: str, data: bytes) -> tuple[str, int]:
        """Append a row's bytes to the file for ``ext``: its name in the folder and where they start."""
        name = f"rows{ext}"
        with naming_errors(os.path.join(self.folder, name)):
            out = self._files.get(name)
            if out is None:
                out = self._files[name] = open(os.path.join(self.folder, name), "wb")  # noqa: SIM115 - closed by __exit__
            offset = out.tell()
            out.write(data)
        return name, offset

    def __enter__(self) -> _BatchFiles:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        first: OSError | None = None
        for name, out in self._files.items():  # every file closed, the first error raised
            try:
                with naming_errors(os.path.join(self.folder, name)):
                    out.close()  # (flushes: a full disk fails here)
            except OSError as exc:
                first = first or exc
        if first is not None and exc_type is None:
            raise first


def _files_dir(remux_dir: str, run: str) -> str:
    """Where a remux's workers stage its files, by split and batch: the IMAGES_DIR it packs (the
    names in its metadata are relative to it, so they are the same whatever the run's id)."""
    return os.path.join(remux_dir, "files", run)


def _batch_folder(task: BatchTask) -> str:
    """The batch's folder in the run's files folder (the pack's IMAGES_DIR): ``<split>/<batch>``."""
    return f"{task.split.out}/{task.number:08d}"


def _batch_dir(task: BatchTask) -> str:
    """The batch's folder in place: its staged files and its record (:data:`BATCH_RECORD`)."""
    return os.path.join(_files_dir(task.work_dir, task.run), _batch_folder(task))


def _recorded_result(task: BatchTask) -> BatchResult | None:
    """The batch as an attempt of this remux finished it, when one did (its folder in place, with
    its files and record) from the same first row with as many rows, its files as long as its
    lines say; else None. (An attempt of another remux, still running on a cluster or killed
    late, stages under its own run id: it is never taken for this one's.)"""
    folder = _batch_dir(task)
    path = os.path.join(folder, BATCH_RECORD)
    if not os.path.exists(path):
        return None
    found = read_remux_batch(path)
    if found is None or (found["first"], found["rows_in"]) != (task.first, len(task.rows)):
        return None
    if not _files_hold(folder, _batch_folder(task), found["lines"], found["rows_out"]):
        log.warning("%s: its files are not what its record says; the batch is transformed again", folder)
        return None
    lines = found["lines"].encode()
    return BatchResult(
        task.number, task.first, found["rows_in"], found["rows_out"], lines, found["columns"], found["not_labels"]
    )


def _files_hold(folder: str, relative: str, lines: str, rows: int) -> bool:
    """Whether a recorded batch's ``rows`` lines name byte ranges, one after the other, of files in
    its ``folder`` (``relative`` to the files folder), each file ending where its last range does
    (a file cut short or grown since fails)."""
    ends: dict[str, int] = {}
    try:
        parsed = [json.loads(line)["file_name"] for line in lines.split("\n") if line]  # (not splitlines: U+2028)
    except (ValueError, TypeError, KeyError):
        return False
    for entry in parsed:
        match entry:
            case [str(name), int(offset), int(size)] if name.startswith(f"{relative}/") and ends.get(name, 0) == offset:
                ends[name] = offset + size
            case _:
                return False
    try:
        sizes = {name: os.stat(os.path.join(folder, name[len(relative) + 1 :])).st_size for name in ends}
    except OSError:
        return False
    return len(parsed) == rows and sizes == ends


@functools.lru_cache(maxsize=4)
def _loaded_function(spec: BatchFn | str) -> BatchFn:
    """The function, loaded once per worker process (a module given as a file would be run
    again for each batch, its imports with it)."""
    return load_function(spec)


def _progress_path(remux_dir: str, split: SourceSplit) -> str:
    return os.path.join(remux_dir, "parts", f"{split.out}.json")


def _part_path(remux_dir: str, split: SourceSplit) -> str:
    return os.path.join(remux_dir, "parts", f"{split.out}.jsonl")


def _state(config: RemuxConfig, splits: list[SourceSplit]) -> dict[str, Any]:
    """What the staged files depend on: a run with another state starts over (with --force)."""
    import datasets

    fn = config.fn if isinstance(config.fn, str) else f"{config.fn.__module__}:{config.fn.__qualname__}"
    return {
        # Batches read in one process, committed in order (parts/<split>.json), staged under the
        # remux's id (files/<run>/: an unfinished remux staged before the id is not resumed);
        # where the source was read to is datasets' state, which another datasets version may not take.
        "layout": "batches by run, rows as byte ranges",
        "datasets": datasets.__version__,
        "source": config.source,
        "config_name": config.config_name,
        "split": config.split,
        # The splits read and their shard counts: a source that changed shape since is not resumed.
        "splits": [[s.name, s.out, s.n_shards] for s in splits],
        "labels": [[s.name, [[c.column, list(c.names), c.in_list] for c in s.labels]] for s in splits],
        "revision": config.revision,
        "fn": fn,
        "fn_file_sha256": function_file_sha256(config.fn),  # an edited function does not resume
        "batch_size": config.batch_size,
        "seed": config.seed,
        "decode": config.decode,
        "image_format": config.image_format,
        "quality": config.quality,
    }


def remux(config: RemuxConfig, *, progress: Progress | None = None, client: Any = None) -> RemuxSummary:
    """Stream ``config.source`` through ``config.fn`` into shards under ``config.out_dir``.

    ``progress`` as for :func:`shardkit.pack.pack`. ``client``, a ``distributed.Client``, runs
    every batch of source rows (read here) and then every output shard as a task on that Dask
    cluster (as does ``config.executor="dask"`` with ``config.scheduler``).
    """
    with cluster_for(config.executor, config.scheduler, client) as cluster:
        return _remux(config, progress or NullProgress(), cluster)


def _remux(config: RemuxConfig, progress: Progress, cluster: Cluster | None) -> RemuxSummary:
    if config.batch_size < 1:
        raise UsageError(f"batch size must be at least 1, got {config.batch_size}")
    config = replace(config, fn=function_spec(config.fn))  # a bad --map fails now; workers load this
    # With an OUT_DIR URL the transformed files are staged in the local work folder, as pack's own.
    location = Location.out_dir(config.out_dir)
    out_dir = location.local_dir(config.work_dir)
    source_dir = [("SOURCE", config.source)] if os.path.isdir(config.source) else []
    check_apart(location, out_dir, source_dir)
    check_own_entries(out_dir)  # as in pack: before anything there is read or written
    if location.is_local:  # a URL is not checked for foreign files, as in pack
        check_out_dir(out_dir, adopt=config.adopt)
    if cluster is None:
        start_forkserver(config.jobs, ("shardkit.remux",))  # its imports run while the source is opened here
    started = time.perf_counter()
    manifest = shardkit_manifest(config.source, config.revision)
    splits, opened = source_splits(config, manifest)
    card_fields = source_card_fields(config)  # now: a card that cannot be read fails before the work
    n_shards = sum(s.n_shards for s in splits)
    with locked(out_dir) as work_dir:
        remux_dir = os.path.join(work_dir, REMUX_DIR)
        run = _start_state(config, splits, out_dir, remux_dir, _reader_of(manifest is not None, opened))
        if cluster is not None:  # the workers stage files here; only this process reads the source
            cluster.check_workers(work_dir, [])
        source = _Source(config, manifest is not None, opened, remux_dir, run)
        resumed_rows, counts = _transform(source, splits, progress, cluster)
        transform_seconds = time.perf_counter() - started
        rows_in = sum(c["rows_in"] for c in counts)
        rows_out = sum(c["rows_out"] for c in counts)
        metadata = _join_parts(splits, remux_dir)
    if rows_out == 0:
        raise ShardkitError(f"the map function returned no rows for the {rows_in} source rows: nothing to pack")
    label = _published_label(splits, counts)
    try:
        packed = _pack_remuxed(config, _files_dir(remux_dir, run), metadata, label, progress, cluster)
    except InputErrors as exc:
        if exc.source != metadata:
            raise
        raise _output_problems(exc, splits, config.batch_size) from None
    kept = keep_card_fields(out_dir, card_fields) if card_fields else []
    if kept:  # pack put the card at OUT_DIR before these keys were in it (a local one is that file)
        location.upload(os.path.join(out_dir, "README.md"), "README.md")
    shutil.rmtree(remux_dir, ignore_errors=True)  # packed: the staged files have served
    return RemuxSummary(
        source_shards=n_shards,
        resumed_rows=resumed_rows,
        rows_in=rows_in,
        rows_out=rows_out,
        transform_seconds=transform_seconds,
        pack=packed,
        splits=[s.name for s in splits],
        class_label=None if label is None else label.column,
        card_fields=kept,
    )


def _reader_of(shardkit_source: bool, opened: dict[str, Any]) -> dict[str, Any]:
    """How the source is read, as the state records it: a position of one reader means nothing to
    another, and the files (their URLs name the Hub commit) pin what a position points into."""
    if shardkit_source:
        return {"reader": "shardkit"}
    files = {name: split.files for name, split in opened.items() if hasattr(split, "files")}
    return {"reader": "pyarrow", "data_files": files} if files else {"reader": "datasets"}


def _start_state(
    config: RemuxConfig, splits: list[SourceSplit], out_dir: str, remux_dir: str, reader: dict[str, Any]
) -> str:
    """Record the run's state in ``remux_dir`` (kept from an earlier run with the same state, to
    resume it). Another state there is refused, or with --force (or a damaged state) removed with
    what it staged. Return the remux's id: kept while it resumes, new when it starts. What its
    workers stage is named by it, so an attempt of a stopped remux that still runs (a Dask task,
    a worker whose parent was killed) never mixes its output into another remux's."""
    state_path = os.path.join(remux_dir, "state.json")
    state = _state(config, splits) | reader
    previous = read_remux_state(state_path, force=config.force)
    run = previous.pop("run", None) if previous is not None else None
    # --force starts over from nothing: also when the state was damaged (then it reads as None).
    if previous != state and (previous is not None or config.force) and os.path.isdir(remux_dir):
        if not config.force:
            named = _changed_settings(previous or {}, state)  # (not None here: only a state read is refused)
            raise UsageError(
                f"{out_dir} holds an unfinished remux with other settings ({named}); re-run with --force to start"
                " over (its finished batches are dropped)"
            )
        shutil.rmtree(remux_dir)
    if previous != state or not (isinstance(run, str) and _RUN_ID.fullmatch(run)):
        run = secrets.token_hex(8)
        # A remux starting: progress found without its state (removed by hand) is no one's to resume.
        shutil.rmtree(os.path.join(remux_dir, "parts"), ignore_errors=True)
    os.makedirs(os.path.join(remux_dir, "parts"), exist_ok=True)
    write_atomic(state_path, json.dumps(state | {"run": run}, sort_keys=True).encode())
    return run


def _changed_settings(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The settings in which two remux states differ, named as the user gives them (``--split``,
    not also the splits it selects)."""
    differ = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    if differ & {"source", "config_name", "split", "revision"}:  # what the splits read follow from
        differ -= {"splits", "labels"}
    known = [name for key, name in _SETTING_NAMES.items() if key in differ]
    return ", ".join(known + sorted(differ - _SETTING_NAMES.keys()))


_RUN_ID = re.compile("[0-9a-f]{16}")
#: How a refused resume names the settings that changed (:func:`_start_state`); others by their key.
_SETTING_NAMES = {
    "source": "SOURCE",
    "config_name": "--config",
    "split": "--split",
    "splits": "the source's splits",
    "labels": "the source's class labels",
    "revision": "--revision",
    "fn": "--map",
    "fn_file_sha256": "the map function's file, edited since",
    "batch_size": "--batch-size",
    "seed": "--seed",
    "decode": "--no-decode",
    "image_format": "--image-format",
    "quality": "--quality",
    "datasets": "the datasets version",
}


@dataclass(frozen=True)
class _Source:
    """The source as this run reads it, and where it stages what it makes of it."""

    config: RemuxConfig
    shardkit_source: bool
    opened: dict[str, Any]  # a datasets source's splits, as source_splits opened them
    remux_dir: str
    run: str  # the remux's id (:func:`_start_state`)


def _transform(
    source: _Source, splits: list[SourceSplit], progress: Progress, cluster: Cluster | None
) -> tuple[int, list[dict[str, Any]]]:
    """Transform every split, its batches on one pool of workers; the rows an earlier run had
    transformed, and each split's counts (its progress record), in split order."""
    config = source.config
    write_split = [s.out for s in splits] != ["train"]
    records = [read_remux_progress(_progress_path(source.remux_dir, s)) for s in splits]
    # A part file that does not hold what its record counts, or whose batches' staged files do not
    # hold what its lines name, is damage: that split starts over (_part_damaged).
    records = [
        None if r is not None and _part_damaged(source, s, r) else r for s, r in zip(splits, records, strict=True)
    ]
    resumed_rows = sum(r["rows_in"] for r in records if r is not None)
    known = [s.rows for s in splits]
    total = sum(r for r in known if r is not None) if None not in known else None
    progress.start("transforming", total=total, unit="rows")
    progress.advance(resumed_rows)
    counts = []
    types = OutputTypes(sorted({label.column for split in splits for label in split.labels}))  # in the pack's order
    # Tasks are made as the source is read (a generator): their number is not known before.
    with task_executor(config.jobs, cluster, 2**31) as executor:
        for split, record in zip(splits, records, strict=True):
            if record is not None:
                _add_committed(types, source, split, record)
            if record is None or not record["finished"]:
                record = _transform_split(source, split, record, write_split, executor, progress, types)
            counts.append(record)
    progress.finish()
    return resumed_rows, counts


def _transform_split(
    source: _Source,
    split: SourceSplit,
    record: dict[str, Any] | None,
    write_split: bool,
    executor: Executor | None,
    progress: Progress,
    types: OutputTypes,
) -> dict[str, Any]:
    """Transform one split from where ``record`` (its progress, None: its start) says an earlier
    run stopped; return its finished record. Each batch's rows are checked against the output's
    ``types`` as it is committed.

    Batches are read here, in order, and transformed by the workers in any order; each is
    committed in order (its metadata lines appended to the split's part file, which is synced,
    then the progress record rewritten), so a run killed at any point resumes after the last
    committed batch; of those after it, it transforms again only the ones no worker finished
    (:func:`transform_batch` takes a finished one as its worker recorded it)."""
    config = source.config
    record = record or _fresh_record()
    part = _part_path(source.remux_dir, split)
    with naming_errors(part), open(part, "ab") as f:  # lines after the last commit were never counted
        f.truncate(record["part_bytes"])
    ds = open_source(config, source.shardkit_source, split.name, source.opened.get(split.name))
    file_columns = tuple(file_columns_of(ds))
    positions: dict[int, Any] = {}  # where the source's reader is after each batch, to record at its commit

    def tasks() -> Iterator[BatchTask]:
        for batch in read_batches(
            config,
            ds,
            split.name,
            batches_done=record["batches"],
            rows_done=record["rows_in"],
            position=record["position"],
        ):
            positions[batch.number] = batch.position
            task = BatchTask(
                config,
                split,
                write_split,
                file_columns,
                source.remux_dir,
                source.run,
                batch.number,
                batch.first,
                batch.rows,
            )
            recorded = _recorded_result(task)  # (read here: a damaged record's warning is this process's)
            if recorded is None:  # a folder in place that does not hold (damaged) is this process's to remove
                shutil.rmtree(_batch_dir(task), ignore_errors=True)
            yield task if recorded is None else replace(task, rows=[], recorded=recorded)

    finished: dict[int, BatchResult | BatchFailure] = {}
    progress_path = _progress_path(source.remux_dir, split)
    with naming_errors(part), open(part, "ab") as out:
        for result in run_tasks(transform_batch, tasks(), names=_task_name, executor=executor, what="transform"):
            finished[result.number] = result
            if isinstance(result, BatchResult):
                progress.advance(result.rows_in, rows=result.rows_out)
            while record["batches"] in finished:
                done = finished.pop(record["batches"])
                if isinstance(done, BatchFailure):
                    raise done.error
                types.add(done.lines, batch_name(split.name, done.first))  # (refused: not committed)
                _commit(done, record, positions, out, progress_path)
    record["finished"] = True
    write_atomic(progress_path, json.dumps(record).encode())
    return record


def _add_committed(types: OutputTypes, source: _Source, split: SourceSplit, record: dict[str, Any]) -> None:
    """Add to ``types`` the rows of the batches an earlier run committed to the split's part file
    (a resumed remux checks its new batches against them too), each batch named by its first row:
    every batch but a split's last holds ``--batch-size`` source rows. (Its lines were checked by
    :func:`_part_damaged`.)"""
    with naming_errors(part := _part_path(source.remux_dir, split)), open(part, "rb") as f:
        for (_, number), lines in itertools.groupby(_committed_lines(f, record), key=_staged_batch):
            types.add(b"".join(lines), batch_name(split.name, number * source.config.batch_size))


def _committed_lines(part: IO[bytes], record: dict[str, Any]) -> Iterator[bytes]:
    """The lines of a split's part file that its progress ``record`` counts, read one at a time."""
    left = record["part_bytes"]
    for line in part:  # (a binary file's lines end at b"\n" only)
        if left <= 0:
            return
        left -= len(line)
        yield line


def _staged_batch(line: bytes) -> tuple[str, int]:
    """The split (the output's name) and the batch number of a staged metadata line (its file is
    ``<split>/<batch number>/<file>``: :func:`_batch_folder`)."""
    split, number, _ = json.loads(line)["file_name"][0].split("/")
    if not (len(number) == 8 and number.isascii() and number.isdigit()):  # (as _batch_folder names it)
        raise ValueError(f"batch folder {number!r}")
    return split, int(number)


def _output_problems(exc: InputErrors, splits: list[SourceSplit], batch_size: int) -> ShardkitError:
    """The final pack's refusal of the staged metadata (of what only the whole output shows, such
    as one key the function gave to rows of two batches) as problems of the function's output:
    each line and each line a message refers to named by its batch and row, not by the staged file."""
    wanted = {p.line for p in exc.problems} | {int(m[2]) for p in exc.problems for m in _LINE_RE.finditer(p.message)}
    names = {s.out: s.name for s in splits}
    where: dict[int, tuple[str, int]] = {}  # a line's batch and its row in the batch's output
    with naming_errors(exc.source), open(exc.source, "rb") as f:
        start, current = 0, ("", -1)
        for number, line in enumerate(f, 1):
            if (batch := _staged_batch(line)) != current:
                start, current = number, batch
            if number in wanted:
                where[number] = (batch_name(names.get(batch[0], batch[0]), batch[1] * batch_size), number - start)

    def named(match: re.Match[str]) -> str:
        if int(match[2]) not in where:
            return match[0]
        batch, row = where[int(match[2])]
        return f"{'in ' if match[1] else ''}row {row} of the output of {batch}"

    def at(line: int) -> str:
        return f"{where[line][0]}, row {where[line][1]} of its output" if line in where else f"line {line}"

    lines = [f"{at(p.line)}: {_LINE_RE.sub(named, p.message)}" for p in exc.problems]
    if exc.total > len(exc.problems):
        lines.append(f"... and {exc.total - len(exc.problems)} more problem(s)")
    head = f"{exc.total} problem(s) in the map function's output; no shard was written:"
    return ShardkitError([head, *lines, "Fix the map function, then re-run with --force (its batches are dropped)."])


#: A row a pack's message refers to: ``on line 12``, ``line 12``.
_LINE_RE = re.compile(r"\b(on )?line (\d+)")


def _part_damaged(source: _Source, split: SourceSplit, record: dict[str, Any]) -> bool:
    """Whether the split's part file does not hold what its record counts (fewer bytes, lines that
    are not rows remux staged for this split, a count that ends within a line), or a committed
    batch's staged files not what its lines name (removed, cut short, grown): damage, with a
    warning. The split then starts over; its finished batches that still hold are kept."""
    part = _part_path(source.remux_dir, split)
    try:
        size = os.stat(part).st_size
    except FileNotFoundError:
        size = 0
    if size < record["part_bytes"]:
        log.warning("%s: shorter than its record says; its split starts over (finished batches are kept)", part)
        return True
    counted, files = 0, _files_dir(source.remux_dir, source.run)
    try:
        with naming_errors(part), open(part, "rb") as f:
            for (out, number), grouped in itertools.groupby(_committed_lines(f, record), key=_staged_batch):
                lines = b"".join(grouped)
                counted += len(lines)
                folder = f"{out}/{number:08d}"
                if out != split.out:
                    raise ValueError(f"a row of split {out!r}")
                if not _files_hold(os.path.join(files, folder), folder, lines.decode(), lines.count(b"\n")):
                    log.warning(
                        "%s: the staged files of its batch from row %d are not what its lines say; its split"
                        " starts over (finished batches are kept)",
                        part,
                        number * source.config.batch_size,
                    )
                    return True
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        counted = -1
    if counted != record["part_bytes"]:  # (lines of another kind, or a count that ends within a line)
        log.warning("%s: holds lines remux did not stage; its split starts over (finished batches are kept)", part)
        return True
    return False


def _fresh_record() -> dict[str, Any]:
    """A split's progress record before its first batch (:func:`.workstate.read_remux_progress`)."""
    return {
        "batches": 0,
        "rows_in": 0,
        "rows_out": 0,
        "part_bytes": 0,
        "position": None,
        "columns": [],
        "not_labels": [],
        "finished": False,
    }


def _task_name(task: BatchTask) -> str:
    return task.name


def _commit(result: BatchResult, record: dict[str, Any], positions: dict[int, Any], out: IO[bytes], path: str) -> None:
    """Add a finished batch to its split's part file and progress record, in that order (the
    record counts only lines that are on disk)."""
    out.write(result.lines)
    out.flush()
    os.fsync(out.fileno())
    record["batches"] += 1
    record["rows_in"] += result.rows_in
    record["rows_out"] += result.rows_out
    record["part_bytes"] += len(result.lines)
    record["position"] = positions.pop(result.number)
    record["columns"] = sorted(set(record["columns"]) | set(result.columns))
    record["not_labels"] = sorted(set(record["not_labels"]) | set(result.not_labels))
    write_atomic(path, json.dumps(record).encode())


def _join_parts(splits: list[SourceSplit], remux_dir: str) -> str:
    """The splits' metadata parts, in split order, as one metadata file for pack; its path."""
    metadata = os.path.join(remux_dir, "metadata.jsonl")
    with naming_errors(metadata), open(metadata, "wb") as out:
        for split in splits:
            with open(_part_path(remux_dir, split), "rb") as part:
                shutil.copyfileobj(part, out)
    return metadata


def _pack_remuxed(
    config: RemuxConfig,
    images_dir: str,
    metadata: str,
    label: ClassLabelColumn | None,
    progress: Progress,
    cluster: Cluster | None,
) -> PackSummary:
    """Pack the transformed files and their metadata into OUT_DIR, as pack-shards would, with
    ``label`` published as the ClassLabel column (its names and numbers the source's)."""
    from .pack import PackConfig, pack

    return pack(
        PackConfig(
            images_dir=images_dir,
            metadata_path=metadata,
            out_dir=config.out_dir,
            work_dir=config.work_dir,
            jobs=config.jobs,
            format=config.format,
            force=config.force,
            adopt=config.adopt,
            max_shard_bytes=config.max_shard_bytes,
            target_shard_bytes=config.target_shard_bytes,
            class_label=None if label is None else label.column,
            class_names=() if label is None else label.names,
            file_ranges=True,
        ),
        progress=progress,
        client=None if cluster is None else cluster.client,
    )


def _published_label(splits: list[SourceSplit], counts: list[dict[str, Any]]) -> ClassLabelColumn | None:
    """The ClassLabel column the output publishes as one: the source's first that the function
    kept, holding class names (staged) only. The packer makes one ClassLabel column; the others
    keep their class names as strings, so no class is lost, only its number."""
    columns = set().union(*(c.get("columns", []) for c in counts))
    not_labels = set().union(*(c.get("not_labels", []) for c in counts))
    for split in splits:
        for label in split.labels:
            if label.column in columns and label.column not in not_labels and not label.in_list:
                return label
    return None
