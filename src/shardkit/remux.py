"""``remux``: stream a dataset through a per-batch function straight into new shards.

Preprocessing (resize, augmentation, filtering) becomes a one-time cost: the source is read in
streaming mode, never materialised; each batch goes through the user's function; the results
are encoded and packed with the same planner, writer, manifest and card as :mod:`.pack`.

Two phases, both resumable:

1. **Transform**, one task per source shard of every split read, ``jobs`` worker processes:
   read the shard's rows (``shardkit.stream`` for a shardkit folder or repo,
   ``datasets.load_dataset(..., streaming=True)`` otherwise), call ``fn(batch)`` or
   ``fn(batch, seeds)`` on each batch (a dict of lists), encode the file column (PIL images
   re-encoded as ``image_format``/``quality``; bytes kept), and write each output row's file
   under ``.shardkit/remux/files/<split>/<shard>/`` and its metadata line to
   ``.shardkit/remux/parts/<split>/<shard>.jsonl``. A source shard counts as done only when its
   part file is renamed into place, so a killed run redoes at most the shards in flight.
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
or ``sha256(identity)[:32]`` where the identity is the source split and shard, the batch's
first row and the output position; ``seeds[i]`` is derived from ``seed`` and the source row's
identity. Same source, function, batch size and seed: same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .check import SPLIT_COLUMN
from .errors import ShardkitError, UsageError, naming_errors
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
from .remuxconfig import ImageFormatName, RemuxConfig
from .remuxfn import (
    call_function,
    derived_key,
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
    batches,
    data_files_builder,
    open_source,
    prepare_batch,
    shardkit_manifest,
    source_rows,
    source_splits,
)
from .rowrules import KEY_RE
from .tasks import Cluster, cluster_for, run_tasks, task_executor
from .workstate import read_remux_done, read_remux_state

if TYPE_CHECKING:  # imported where the remux packs: its transform workers never need pack
    from .pack import PackSummary

__all__ = ["ImageFormatName", "RemuxConfig", "RemuxSummary", "remux"]  # RemuxConfig: remuxconfig.py

log = logging.getLogger(__name__)

REMUX_DIR = "remux"


@dataclass(frozen=True)
class RemuxSummary:
    source_shards: int
    resumed_source_shards: int
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
class ShardTask:
    config: RemuxConfig
    shardkit_source: bool
    split: SourceSplit
    shard: int  # of the split's shards
    work_dir: str
    #: Stage each row's split (the output has splits other than train, or a train that is not alone).
    write_split: bool = False

    @property
    def n_shards(self) -> int:
        return self.split.n_shards

    @property
    def name(self) -> str:
        """How messages name the shard: ``split 'test', source shard 3``."""
        return f"split {self.split.name!r}, source shard {self.shard}"

    @property
    def stem(self) -> str:
        """Its staged files' and part's path under files/ and parts/: ``<split>/<shard>``."""
        return f"{self.split.out}/{self.shard:05d}"


def transform_shard(task: ShardTask) -> tuple[str, int, int]:
    """Run one source shard through the function; return (its stem, rows in, rows out)."""
    config = task.config
    fn = load_function(config.fn)
    with_seeds = wants_seeds(fn)
    ds = open_source(config, task.shardkit_source, task.split.name)
    file_columns = [n for n, f in (ds.features or {}).items() if type(f).__name__ in ("Image", "Audio")]
    ds = ds.shard(num_shards=task.n_shards, index=task.shard) if task.n_shards > 1 else ds
    part = os.path.join(task.work_dir, "parts", f"{task.stem}.jsonl")
    files_dir = os.path.join(task.work_dir, "files", task.stem)
    shutil.rmtree(files_dir, ignore_errors=True)
    os.makedirs(files_dir)
    os.makedirs(os.path.dirname(part), exist_ok=True)
    rows_in = rows_out = 0
    columns: set[str] = set()
    not_labels: set[str] = set()  # ClassLabel columns the function filled with something else
    lines: list[bytes] = []
    partial = f"{part}.{secrets.token_hex(4)}.partial"  # this attempt's own (see writer.write_shard)
    for batch_rows in batches(source_rows(ds, config.source, task.name), config.batch_size):
        first = rows_in
        identities = [
            str(r["key"]) if isinstance(r.get("key"), str) else f"{task.split.name}/{task.shard}/{first + i}"
            for i, r in enumerate(batch_rows)
        ]
        rows_in += len(batch_rows)
        batch = {name: [r.get(name) for r in batch_rows] for name in batch_rows[0]}
        prepare_batch(batch, file_columns, config, f"{task.name}, row", first)
        seeds = [sample_seed(config.seed, identity) for identity in identities]
        where = f"{task.name}, batch from row {first}"
        rows = call_function(fn, with_seeds, batch, seeds, where=where, rows=f"rows {first}..{rows_in - 1}")
        same_rows = len(identities) == len(rows)
        for j, row in enumerate(rows):
            staged = output_row(row, config, task.split.labels, where, file_columns=file_columns, index=j)
            not_labels |= staged.not_labels
            key = staged.key
            if key is None:
                key = identities[j] if same_rows and KEY_RE.fullmatch(identities[j]) else None
            if key is None:
                key = derived_key(f"{identities[0]}#{j}")
            name = f"{task.stem}/{rows_out:08d}{staged.ext}"
            file_path = os.path.join(files_dir, f"{rows_out:08d}{staged.ext}")
            with naming_errors(file_path), open(file_path, "wb") as f:
                f.write(staged.data)
            fields = staged.fields
            if task.write_split and fields.get(SPLIT_COLUMN) is None:
                fields[SPLIT_COLUMN] = task.split.out  # (a split the function gave wins: it may move rows)
            columns.update(fields)
            lines.append(metadata_line(name, key, fields, where))
            rows_out += 1
        if len(lines) > 4096:  # keep memory flat: spill to the part file as it grows
            _append(partial, lines)
            lines = []
    _append(partial, lines)
    os.replace(partial, part)
    counts = {"rows_in": rows_in, "rows_out": rows_out, "columns": sorted(columns), "not_labels": sorted(not_labels)}
    write_atomic(_done_path(task.work_dir, task.stem), json.dumps(counts).encode())  # the shard is done only now
    return task.stem, rows_in, rows_out


def _done_path(work_dir: str, stem: str) -> str:
    return os.path.join(work_dir, "parts", f"{stem}.done")


def _append(path: str, lines: list[bytes]) -> None:
    with naming_errors(path), open(path, "ab") as f:
        f.writelines(lines)


def _state(config: RemuxConfig, splits: list[SourceSplit]) -> dict[str, Any]:
    """What the staged files depend on: a run with another state starts over (with --force)."""
    fn = config.fn if isinstance(config.fn, str) else f"{config.fn.__module__}:{config.fn.__qualname__}"
    return {
        "source": config.source,
        "config_name": config.config_name,
        "split": config.split,
        # The splits read and their shard counts: a source that changed shape since is not resumed.
        "splits": [[s.name, s.out, s.n_shards] for s in splits],
        "labels": [[s.name, [[c.column, list(c.names), c.in_list] for c in s.labels]] for s in splits],
        "revision": config.revision,
        "fn": fn,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "decode": config.decode,
        "image_format": config.image_format,
        "quality": config.quality,
    }


def remux(config: RemuxConfig, *, progress: Progress | None = None, client: Any = None) -> RemuxSummary:
    """Stream ``config.source`` through ``config.fn`` into shards under ``config.out_dir``.

    ``progress`` as for :func:`shardkit.pack.pack`. ``client``, a ``distributed.Client``, runs
    every source shard and then every output shard as a task on that Dask cluster (as does
    ``config.executor="dask"`` with ``config.scheduler``).
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
    started = time.perf_counter()
    manifest = shardkit_manifest(config.source, config.revision)
    shardkit_source = manifest is not None
    splits = source_splits(config, manifest)
    card_fields = source_card_fields(config)  # now: a card that cannot be read fails before the work
    write_split = [s.out for s in splits] != ["train"]
    n_shards = sum(s.n_shards for s in splits)
    with locked(out_dir) as work_dir:
        remux_dir = os.path.join(work_dir, REMUX_DIR)
        _start_state(config, splits, out_dir, remux_dir)
        if cluster is not None:
            local_source = [os.path.abspath(config.source)] if os.path.isdir(config.source) else []
            cluster.check_workers(work_dir, local_source)
        all_tasks = [
            ShardTask(config, shardkit_source, split, i, remux_dir, write_split)
            for split in splits
            for i in range(split.n_shards)
        ]
        resumed, counts = _transform(config, all_tasks, remux_dir, progress, cluster)
        transform_seconds = time.perf_counter() - started
        rows_in = sum(c["rows_in"] for c in counts)
        rows_out = sum(c["rows_out"] for c in counts)
        metadata = _join_parts(all_tasks, remux_dir)
    if rows_out == 0:
        raise ShardkitError(f"the map function returned no rows for the {n_shards} source shards: nothing to pack")
    label = _published_label(splits, counts)
    packed = _pack_remuxed(config, remux_dir, metadata, label, progress, cluster)
    kept = keep_card_fields(out_dir, card_fields) if card_fields else []
    if kept:  # pack put the card at OUT_DIR before these keys were in it (a local one is that file)
        location.upload(os.path.join(out_dir, "README.md"), "README.md")
    shutil.rmtree(remux_dir, ignore_errors=True)  # packed: the staged files have served
    return RemuxSummary(
        source_shards=n_shards,
        resumed_source_shards=len(resumed),
        rows_in=rows_in,
        rows_out=rows_out,
        transform_seconds=transform_seconds,
        pack=packed,
        splits=[s.name for s in splits],
        class_label=None if label is None else label.column,
        card_fields=kept,
    )


def _start_state(config: RemuxConfig, splits: list[SourceSplit], out_dir: str, remux_dir: str) -> None:
    """Record the run's state in ``remux_dir`` (kept from an earlier run with the same state, to
    resume it). Another state there is refused, or with --force (or a damaged state) removed with
    what it staged."""
    state_path = os.path.join(remux_dir, "state.json")
    state = _state(config, splits)
    previous = read_remux_state(state_path, force=config.force)
    # --force starts over from nothing: also when the state was damaged (then it reads as None).
    if previous != state and (previous is not None or config.force) and os.path.isdir(remux_dir):
        if not config.force:
            raise UsageError(
                f"{out_dir} holds an unfinished remux with other settings; re-run with --force to start over"
            )
        shutil.rmtree(remux_dir)
    os.makedirs(os.path.join(remux_dir, "parts"), exist_ok=True)
    write_atomic(state_path, json.dumps(state, sort_keys=True).encode())


def _transform(
    config: RemuxConfig, all_tasks: list[ShardTask], remux_dir: str, progress: Progress, cluster: Cluster | None
) -> tuple[set[str], list[dict[str, Any]]]:
    """Transform every source shard an earlier run did not finish, one task each; the stems of
    those it had finished, and every task's counts (its done file), in task order."""
    for dirpath, _, names in os.walk(os.path.join(remux_dir, "parts")):
        for name in names:
            if name.endswith(".partial"):
                os.unlink(os.path.join(dirpath, name))
    done_counts = {t.stem: read_remux_done(_done_path(remux_dir, t.stem)) for t in all_tasks}
    resumed = {stem for stem, counts in done_counts.items() if counts is not None}
    tasks = [t for t in all_tasks if t.stem not in resumed]
    progress.start("transforming source shards", total=len(all_tasks), unit="shards")
    progress.advance(len(resumed))
    rows_so_far = 0
    with task_executor(config.jobs, cluster, len(tasks)) as executor:
        names = [t.stem for t in tasks]
        for _, _, shard_out in run_tasks(transform_shard, tasks, names=names, executor=executor, what="transform"):
            rows_so_far += shard_out
            progress.advance(1, rows=rows_so_far)
    progress.finish()
    counts = []
    for task in all_tasks:
        done_path = _done_path(remux_dir, task.stem)
        task_counts = done_counts[task.stem] or read_remux_done(done_path)
        if task_counts is None:  # written by the task just run: gone only if something else removed it
            raise ShardkitError(f"{done_path}: missing once its source shard was transformed; re-run to redo it")
        counts.append(task_counts)
    return resumed, counts


def _join_parts(all_tasks: list[ShardTask], remux_dir: str) -> str:
    """The tasks' metadata parts, in task order, as one metadata file for pack; its path."""
    metadata = os.path.join(remux_dir, "metadata.jsonl")
    with naming_errors(metadata), open(metadata, "wb") as out:
        for task in all_tasks:
            with open(os.path.join(remux_dir, "parts", f"{task.stem}.jsonl"), "rb") as part:
                shutil.copyfileobj(part, out)
    return metadata


def _pack_remuxed(
    config: RemuxConfig,
    remux_dir: str,
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
            images_dir=os.path.join(remux_dir, "files"),
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
