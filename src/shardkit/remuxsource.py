"""A remux's source: its splits, its ClassLabel columns, and the rows of each piece of it, as
the user's function gets them (files read from the source only, images decoded if asked)."""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from .check import split_problem
from .decode import open_image
from .errors import ManifestError, NetworkError, ShardkitError, UsageError
from .location import (
    Location,
    OutsideDataset,
    check_in_dataset,
    is_network_error,
    is_timeout,
    open_in_dataset,
    readable_root,
)
from .manifest import MANIFEST_NAME, Manifest
from .remuxconfig import RemuxConfig
from .schema import class_label_names

log = logging.getLogger(__name__)


def shardkit_manifest(source: str, revision: str | None) -> Manifest | None:
    """The source's shards.json if it has one (then shardkit.stream reads it, one shard per file)."""
    if data_files_builder(source) is not None:
        return None
    if os.path.isdir(source) and not os.path.lexists(os.path.join(source, MANIFEST_NAME)):
        return None
    from .shardrows import read_manifest_from

    location = Location.parse(source, revision=revision)
    if location.is_local:
        return read_manifest_from(location)  # a damaged one is an error, as before
    try:
        return read_manifest_from(location)
    except (NetworkError, ManifestError):
        # A server that does not answer, or a manifest that is not shardkit's, is not "no
        # manifest there": say so, not that the source has no data files (which datasets would
        # say next), and never read the source some other way.
        raise
    except Exception as exc:
        if is_timeout(exc) or is_network_error(exc):
            raise ShardkitError(f"cannot reach {source!r}: {type(exc).__name__}: {exc}") from None
        return None


#: Data files a source may name directly (a path, a glob or a URL), and the builder that reads them.
DATA_FILE_BUILDERS = {".parquet": "parquet", ".tar": "webdataset", ".arrow": "arrow", ".jsonl": "json", ".csv": "csv"}


def data_files_builder(source: str) -> str | None:
    """The datasets builder for a source that names data files (``data/*.parquet``...), else None."""
    return DATA_FILE_BUILDERS.get(os.path.splitext(source.split("?")[0])[1].lower())


@dataclass(frozen=True)
class ClassLabelColumn:
    """A source column that is a datasets ``ClassLabel`` (or a list of them): integer i is names[i]."""

    column: str
    names: tuple[str, ...]
    in_list: bool = False  # a list of class labels (``List(ClassLabel)``): staged as lists of names


@dataclass(frozen=True)
class SourceSplit:
    """One split of the source as the remux reads it."""

    name: str  # the source's
    out: str  # the output's (a name the packer takes: the source's, other characters made "_")
    n_shards: int
    labels: tuple[ClassLabelColumn, ...] = ()  # in the order of the source's features
    rows: int | None = None  # as the manifest or the card says (None: not said)


def _labels_of_features(features: Any) -> tuple[ClassLabelColumn, ...]:
    """The ClassLabel columns of a ``datasets.Features`` (None: none known)."""
    import datasets

    found = []
    for name, feature in (features or {}).items():
        inner = getattr(feature, "feature", None)  # List / Sequence of ClassLabel
        if isinstance(feature, datasets.ClassLabel):
            found.append(ClassLabelColumn(name, tuple(feature.names)))
        elif isinstance(inner, datasets.ClassLabel):
            found.append(ClassLabelColumn(name, tuple(inner.names), in_list=True))
    return tuple(found)


_NOT_IN_SPLIT_NAMES = re.compile(r"[^A-Za-z0-9_]")


def _output_split_names(names: list[str], source: str) -> dict[str, str]:
    """Each source split's name in the output: as it is, or (datasets allows ``train.clean.100``,
    the packer does not: each split is a folder on the Hub) with other characters made ``_``."""
    out: dict[str, str] = {}
    for name in names:
        new = _NOT_IN_SPLIT_NAMES.sub("_", name)[:64]
        if problem := split_problem(new):
            raise UsageError(f"{source!r}: its split {name!r} cannot be a split of the output: {problem}")
        if new in out.values():
            other = next(k for k, v in out.items() if v == new)
            raise UsageError(
                f"{source!r}: its splits {other!r} and {name!r} would both be the output split {new!r};"
                " remux them one at a time with --split and different OUT_DIRs"
            )
        if new != name:
            log.warning(
                "the source split %r is the split %r of the output (a split name is letters, digits, _)", name, new
            )
        out[name] = new
    return out


def source_splits(config: RemuxConfig, manifest: Manifest | None) -> tuple[list[SourceSplit], dict[str, Any]]:
    """The splits the remux reads: every split of the source, or ``config.split``; a split that
    is not there is a UsageError naming those that are. With them, a source read with datasets
    gives each split as it opened it (for :func:`open_source`: not listed twice)."""
    if manifest is not None:
        counts = {s.name: (s.shards, s.rows) for s in manifest.splits()}
        if config.split is not None:
            manifest.shards_of(config.split)  # the error naming the splits there are
            counts = {config.split: counts[config.split]}
        labels = tuple(
            ClassLabelColumn(f["name"], tuple(names))
            for f in manifest.features
            if (names := class_label_names(f)) is not None
        )
        out = _output_split_names(list(counts), config.source)
        return [SourceSplit(name, out[name], n, labels, rows) for name, (n, rows) in counts.items()], {}
    opened = _parquet_splits(config) or _datasets_splits(config)
    out = _output_split_names(list(opened), config.source)
    splits = [
        SourceSplit(name, out[name], ds.n_shards, _labels_of_features(ds.features), _split_rows(ds, name))
        for name, ds in opened.items()
    ]
    return splits, opened


def _parquet_splits(config: RemuxConfig) -> dict[str, Any] | None:
    """The source's splits (or ``config.split``) as Parquet files read here (:mod:`.remuxparquet`),
    when datasets reads it with its Parquet builder; else None."""
    from .remuxparquet import parquet_splits

    found = parquet_splits(config.source, config.config_name, config.revision, config.split or "train")
    if found is None or config.split is None:
        return found
    if config.split not in found:
        raise UsageError(f"{config.source!r} has no split {config.split!r}; its splits: {', '.join(found)}")
    return {config.split: found[config.split]}


def _split_rows(ds: Any, name: str) -> int | None:
    """The rows the source's card says the split holds (None if it does not say)."""
    info = getattr(getattr(ds, "info", None), "splits", None) or {}
    split = info.get(name) if hasattr(info, "get") else None
    rows = getattr(split, "num_examples", None)
    return rows if isinstance(rows, int) and rows > 0 else None


def _datasets_splits(config: RemuxConfig, split: str | None = None) -> dict[str, Any]:
    """The source's splits (``split``, else ``config.split``, else all) as streaming datasets,
    read with ``datasets``; files not decoded yet."""
    import datasets

    split = split or config.split
    builder = data_files_builder(config.source)
    try:
        if builder is not None:
            name = split or "train"
            files = {name: config.source}
            return {name: datasets.load_dataset(builder, data_files=files, split=name, streaming=True)}
        if split is not None:
            ds = datasets.load_dataset(
                config.source, config.config_name, split=split, revision=config.revision, streaming=True
            )
            return {split: ds}
        loaded = datasets.load_dataset(config.source, config.config_name, revision=config.revision, streaming=True)
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as exc:
        raise UsageError(f"cannot read {config.source!r} with datasets: {exc}") from None
    except Exception as exc:  # a damaged source: tarfile, pyarrow, fsspec... each raise their own
        raise ShardkitError(f"cannot read {config.source!r} with datasets: {type(exc).__name__}: {exc}") from None
    if not isinstance(loaded, dict) or not loaded:
        raise UsageError(f"cannot read {config.source!r} with datasets: it has no splits")
    return dict(loaded)


def open_source(config: RemuxConfig, shardkit_source: bool, split: str, opened: Any = None) -> Any:
    """One split of the source as a streaming ``datasets.IterableDataset``, files not decoded yet
    (``opened``: the split as :func:`source_splits` opened it)."""
    import datasets

    if shardkit_source:
        from .streaming import stream

        ds = stream(config.source, revision=config.revision, split=split)
    elif opened is not None and not hasattr(opened, "cast_column"):  # a ParquetSplit: files undecoded already
        return opened
    else:
        ds = opened if opened is not None else _datasets_splits(config, split)[split]
    # Decoding happens here, in the batch, so the function sees what it asked for.
    for name, feature in (ds.features or {}).items():
        if isinstance(feature, datasets.Image | datasets.Audio):
            ds = ds.cast_column(name, type(feature)(decode=False))
    return ds


def _with_bytes(value: Any, config: RemuxConfig, where: str) -> Any:
    """A file value as ``{"bytes", "path"}`` with its bytes (datasets gives a local folder's or a
    Hub repo's files as a path only). A path is followed only into the source itself: a hostile
    source naming ``/etc/passwd`` or ``../..`` must not make remux read (and publish) it."""
    if isinstance(value, dict) and value.get("bytes") is None and value.get("path"):
        path = str(value["path"])
        if not _inside_source(path, config.source):
            raise ShardkitError(
                f"{where}: the file has no bytes, only a path outside the source ({path!r}); remux reads"
                " only files the source holds"
            )
        import fsspec  # type: ignore[import-untyped]

        try:
            opened: Any = None
            if os.path.isdir(config.source):
                # A local source's file is read as every local dataset file is: not through a link
                # out of the folder (b.png -> ../secret.png), by the one rule of readable_root (for
                # a member of an archive, ``zip://b.png::/src/a.zip``, the archive's link).
                root = readable_root(config.source)
                check_in_dataset(_local_file(path), root)
                if "::" not in path:
                    opened = open_in_dataset(_local_file(path), root)
            with opened or fsspec.open(path, "rb") as f:
                return {"bytes": f.read(), "path": path}
        except OutsideDataset as exc:
            raise ShardkitError(f"{where}: {exc}") from None
        except OSError as exc:
            raise ShardkitError(f"{where}: cannot read its file {path!r}: {exc}") from None
    return value


def _local_file(path: str) -> str:
    """The file a local source's path names (datasets may give it as ``file://...``)."""
    return path.rsplit("::", 1)[-1].removeprefix("file://")


def _inside_source(path: str, source: str) -> bool:
    """Whether a file path datasets gave lies inside the source: under a local source folder,
    or (the last link of a chained URL such as ``zip://x::hf://...``) in the source's Hub repo."""
    last = _local_file(path)
    if os.path.isdir(source):
        # Compared as written, not resolved: the user's own folder may hold symlinks (a Hub
        # cache's snapshot is links into blobs/); what is refused is a path naming elsewhere.
        root = os.path.join(os.path.abspath(source), "")
        return "://" not in last and os.path.normpath(os.path.abspath(last)).startswith(root)
    repo = source.removeprefix("hf://datasets/").split("@", 1)[0].strip("/")
    return (
        ".." not in last.split("/")
        and last.startswith(f"hf://datasets/{repo}")
        and last[len(f"hf://datasets/{repo}") :][:1] in ("/", "@")
    )


def _has_bytes(value: Any) -> bool:
    return isinstance(value, dict) and bool(value.get("bytes"))


def decode_files(batch: dict[str, list[Any]], file_columns: list[str], decode: bool, rows: str, first: int) -> None:
    """File columns as the function asked for them: PIL images (``decode``), or the ``{"bytes",
    "path"}`` dicts they are. Messages name a row as ``f"{rows} {first + i}"``."""
    from PIL import Image, UnidentifiedImageError

    if not decode:
        return
    for column in file_columns:
        values = batch[column]
        for i, v in enumerate(values):
            if not _has_bytes(v):
                continue
            try:
                values[i] = open_image(io.BytesIO(v["bytes"]))
            except UnidentifiedImageError:
                raise ShardkitError(f"{rows} {first + i}: column {column!r} is not an image Pillow can read") from None
            except (OSError, ValueError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                raise ShardkitError(
                    f"{rows} {first + i}: column {column!r} does not open as an image: {type(exc).__name__}: {exc}"
                ) from None


@dataclass
class SourceBatch:
    """Consecutive rows of one source split, as read, each file with its bytes."""

    number: int  # of the split's batches, from 0
    first: int  # the split's row number of its first row
    rows: list[dict[str, Any]]
    position: Any  # where the source is read to after it: ``state_dict()`` (JSON), or None


def file_columns_of(ds: Any) -> list[str]:
    """The columns of a streaming dataset that hold files (images, audio)."""
    return [n for n, f in (ds.features or {}).items() if type(f).__name__ in ("Image", "Audio")]


def read_batches(
    config: RemuxConfig, ds: Any, split: str, *, batches_done: int = 0, rows_done: int = 0, position: Any = None
) -> Iterator[SourceBatch]:
    """The rows of ``ds`` (one split of the source, :func:`open_source`) in batches of
    ``config.batch_size``, after the ``batches_done`` batches (``rows_done`` rows) an earlier run
    transformed: read from ``position`` (datasets' ``load_state_dict``, which skips whole
    source files) when there is one, else read through and passed over.

    Every batch's rows are read here, in one process, and handed to the workers that decode
    them and call the function: so work is divided by batches, whatever the source's files.
    A file given by path only is read here, from the source alone (:func:`_with_bytes`)."""
    import json

    file_columns = file_columns_of(ds)
    if position is not None:
        try:
            ds.load_state_dict(position)
        except (ValueError, TypeError, KeyError) as exc:  # a record damaged, or of another reader
            log.warning("split %r: where an earlier run stopped does not load (%s); read through", split, exc)
            position = None
    rows = source_rows(ds, config.source, f"split {split!r}", first=rows_done if position is not None else 0)
    if position is None and rows_done:
        for _ in zip(range(rows_done), rows, strict=False):  # read through what was done
            pass
    number, first = batches_done, rows_done
    try:
        for batch in batches(rows, config.batch_size):
            for column in file_columns:
                for i, row in enumerate(batch):
                    where = f"{config.source}: split {split!r}, row {first + i}"
                    row[column] = _with_bytes(row.get(column), config, where)
            try:
                after = ds.state_dict()
                json.dumps(after)
            except (TypeError, ValueError, AttributeError):  # a source whose position is no JSON: read through
                after = None
            yield SourceBatch(number, first, batch, after)
            number += 1
            first += len(batch)
    finally:
        rows.close()  # a run stopped part-way closes the source's files now, not at exit


def batches(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def source_rows(ds: Any, source: str, shard: str, *, first: int = 0) -> Generator[dict[str, Any], None, None]:
    """The rows of ``ds`` (``shard`` of the source, its first row numbered ``first``); a source
    that cannot be read (damaged, hostile, gone) is one error naming it, the shard and the
    row, not a traceback from deep inside datasets."""
    rows = iter(ds)
    n = first
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except ShardkitError as exc:  # shardkit.stream's own, naming the shard file already
            raise ShardkitError(f"cannot read {shard} of {source!r}: {exc}") from None
        except Exception as exc:  # datasets, pyarrow, fsspec and the decoders raise many types
            raise ShardkitError(f"cannot read {shard} of {source!r} at row {n}: {type(exc).__name__}: {exc}") from None
        yield row
        n += 1
