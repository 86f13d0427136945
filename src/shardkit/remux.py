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

import hashlib
import importlib
import importlib.util
import inspect
import io
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .check import SPLIT_COLUMN, split_problem
from .decode import open_image
from .errors import ManifestError, NetworkError, ShardkitError, UsageError, naming_errors
from .location import (
    HUB_REPO_ID,
    HUB_REVISION,
    MAX_SMALL_FILE_BYTES,
    Location,
    OutsideDataset,
    bounded_hub_requests,
    check_in_dataset,
    is_network_error,
    is_timeout,
    network_timeout,
    open_in_dataset,
    read_bounded,
    readable_root,
)
from .manifest import MANIFEST_NAME, Manifest, write_atomic
from .metadata import non_finite_problem
from .outdir import check_apart, check_out_dir, check_own_entries, locked
from .plan import DEFAULT_MAX_SHARD_BYTES
from .progress import NullProgress, Progress
from .rowrules import EXT_RE, KEY_RE
from .schema import class_label_names
from .tasks import Cluster, cluster_for, run_tasks, task_executor
from .workstate import read_remux_done, read_remux_state

if TYPE_CHECKING:  # imported where the remux packs: its transform workers never need pack
    from .pack import ExecutorName, PackSummary, ShardFormatName

log = logging.getLogger(__name__)

BatchFn = Callable[..., dict[str, list[Any]]]
REMUX_DIR = "remux"
_IMAGE_EXTENSIONS = {"jpeg": ".jpg", "png": ".png", "webp": ".webp"}
ImageFormatName = Literal["jpeg", "png", "webp"]  # how returned PIL images are encoded


@dataclass(frozen=True)
class RemuxConfig:
    """What :func:`remux` reads, calls and writes: ``shardkit remux``'s arguments and options, by name."""

    source: str  # a shardkit folder/repo, a Hub dataset id, a local dataset folder
    out_dir: str
    fn: BatchFn | str  # a callable, or "module:function"
    config_name: str | None = None
    split: str | None = None  # None: every split of the source, each into the output split of its name
    revision: str | None = None
    batch_size: int = 64
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    seed: int = 0
    decode: bool = True  # the function gets PIL images (True) or {"bytes", "path"} dicts (False)
    image_format: ImageFormatName = "jpeg"
    quality: int = 90
    format: ShardFormatName = "zip"
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES  # as for PackConfig
    target_shard_bytes: int | None = None  # as for PackConfig: None is half the cap
    force: bool = False
    adopt: bool = False  # as for PackConfig
    executor: ExecutorName = "local"  # dask: each source shard, then each shard, a cluster task
    scheduler: str | None = None  # as for PackConfig
    work_dir: str | None = None  # as for PackConfig: with an OUT_DIR URL, where the staged files go


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


def load_function(spec: BatchFn | str) -> BatchFn:
    """The user's function: a callable as is, or ``"module:function"`` (a module path or a file.py)."""
    if callable(spec):
        return spec
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--map {spec!r}: expected MODULE:FUNCTION (e.g. my_transforms:augment)")
    try:
        if module_name.endswith(".py"):
            loaded = importlib.util.spec_from_file_location("shardkit_user_map", module_name)
            if loaded is None or loaded.loader is None:
                raise ImportError(f"cannot load {module_name}")
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except (ImportError, OSError) as exc:
        raise UsageError(f"--map {spec!r}: cannot import {module_name}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"--map {spec!r}: {module_name} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


def wants_seeds(fn: BatchFn) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def sample_seed(seed: int, identity: str) -> int:
    """A 63-bit seed for one source row: the same row and seed always give the same number."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{identity}".encode()).digest()[:8], "big") >> 1


def derived_key(identity: str) -> str:
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()[:32]


# --- reading the source ----------------------------------------------------------------------------


def _shardkit_manifest(source: str, revision: str | None) -> Manifest | None:
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


def source_splits(config: RemuxConfig, manifest: Manifest | None) -> list[SourceSplit]:
    """The splits the remux reads: every split of the source, or ``config.split``; a split that
    is not there is a UsageError naming those that are."""
    if manifest is not None:
        counts = {s.name: s.shards for s in manifest.splits()}
        if config.split is not None:
            manifest.shards_of(config.split)  # the error naming the splits there are
            counts = {config.split: counts[config.split]}
        labels = tuple(
            ClassLabelColumn(f["name"], tuple(names))
            for f in manifest.features
            if (names := class_label_names(f)) is not None
        )
        out = _output_split_names(list(counts), config.source)
        return [SourceSplit(name, out[name], n, labels) for name, n in counts.items()]
    opened = _datasets_splits(config)
    out = _output_split_names(list(opened), config.source)
    return [SourceSplit(name, out[name], ds.n_shards, _labels_of_features(ds.features)) for name, ds in opened.items()]


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


def open_source(config: RemuxConfig, shardkit_source: bool, split: str) -> Any:
    """One split of the source as a streaming ``datasets.IterableDataset``, files not decoded yet."""
    import datasets

    if shardkit_source:
        from .streaming import stream

        ds = stream(config.source, revision=config.revision, split=split)
    else:
        ds = _datasets_splits(config, split)[split]
    # Decoding happens here, in the batch, so the function sees what it asked for.
    for name, feature in (ds.features or {}).items():
        if isinstance(feature, datasets.Image | datasets.Audio):
            ds = ds.cast_column(name, type(feature)(decode=False))
    return ds


# --- the source's card -------------------------------------------------------------------------------

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


# --- one source shard --------------------------------------------------------------------------------


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


def _encode(value: Any, config: RemuxConfig) -> tuple[bytes, str] | None:
    """(bytes, extension) of a file-column value, or None if it is not one."""
    from PIL import Image

    if isinstance(value, Image.Image):
        image = value
        fmt = config.image_format
        if fmt == "jpeg" and image.mode not in ("RGB", "L", "CMYK"):
            image = image.convert("RGB")
        buf = io.BytesIO()
        options: dict[str, Any] = {"quality": config.quality} if fmt in ("jpeg", "webp") else {}
        image.save(buf, format=fmt.upper(), **options)
        return buf.getvalue(), _IMAGE_EXTENSIONS[fmt]
    if isinstance(value, dict) and isinstance(value.get("bytes"), bytes | bytearray):
        ext = os.path.splitext(str(value.get("path") or ""))[1].lower()
        if not EXT_RE.fullmatch(ext):  # no extension, or one no file name may carry (a source's path is data)
            ext = _sniff(value["bytes"])
        return bytes(value["bytes"]), ext
    if isinstance(value, bytes | bytearray):
        return bytes(value), _sniff(bytes(value))
    return None


def _sniff(data: bytes) -> str:
    signatures = {b"\xff\xd8\xff": ".jpg", b"\x89PNG": ".png", b"RIFF": ".webp", b"GIF8": ".gif"}
    for magic, ext in signatures.items():
        if data.startswith(magic):
            return ".wav" if magic == b"RIFF" and data[8:12] == b"WAVE" else ext
    return ".bin"


def _json_value(value: Any) -> Any:
    """A field value as JSON: numpy scalars and arrays become Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


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


def _prepare_batch(
    batch: dict[str, list[Any]], file_columns: list[str], config: RemuxConfig, rows: str, first: int
) -> None:
    """File columns as the function asked for them: PIL images, or ``{"bytes", "path"}`` dicts.
    Messages name a row as ``f"{rows} {first + i}"``."""
    from PIL import Image, UnidentifiedImageError

    for column in file_columns:
        values = [_with_bytes(v, config, f"{rows} {first + i}") for i, v in enumerate(batch[column])]
        if config.decode:
            for i, v in enumerate(values):
                if not _has_bytes(v):
                    continue
                try:
                    values[i] = open_image(io.BytesIO(v["bytes"]))
                except UnidentifiedImageError:
                    raise ShardkitError(
                        f"{rows} {first + i}: column {column!r} is not an image Pillow can read"
                    ) from None
                except (OSError, ValueError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                    raise ShardkitError(
                        f"{rows} {first + i}: column {column!r} does not open as an image: {type(exc).__name__}: {exc}"
                    ) from None
        batch[column] = values


def _batches(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


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
    for batch_rows in _batches(_source_rows(ds, config.source, task.name), config.batch_size):
        first = rows_in
        identities = [
            str(r["key"]) if isinstance(r.get("key"), str) else f"{task.split.name}/{task.shard}/{first + i}"
            for i, r in enumerate(batch_rows)
        ]
        rows_in += len(batch_rows)
        batch = {name: [r.get(name) for r in batch_rows] for name in batch_rows[0]}
        _prepare_batch(batch, file_columns, config, f"{task.name}, row", first)
        seeds = [sample_seed(config.seed, identity) for identity in identities]
        try:
            out = fn(batch, seeds) if with_seeds else fn(batch)
        except Exception as exc:
            raise ShardkitError(
                f"the map function failed on {task.name}, rows {first}..{rows_in - 1}:"
                f" {type(exc).__name__}: {exc}{_where_raised(exc)}"
            ) from exc
        where = f"{task.name}, batch from row {first}"
        rows = _rows_of(out, where)
        same_rows = len(identities) == len(rows)
        for j, row in enumerate(rows):
            file_column, encoded = _file_of(row, config, where)
            data, ext = encoded
            key = row.get("key")
            if not (isinstance(key, str) and KEY_RE.fullmatch(key)):
                key = identities[j] if same_rows and KEY_RE.fullmatch(identities[j]) else None
            if key is None:
                key = derived_key(f"{identities[0]}#{j}")
            name = f"{task.stem}/{rows_out:08d}{ext}"
            file_path = os.path.join(files_dir, f"{rows_out:08d}{ext}")
            with naming_errors(file_path), open(file_path, "wb") as f:
                f.write(data)
            fields = {k: _json_value(v) for k, v in row.items() if k not in (file_column, "key")}
            for label in task.split.labels:
                if label.column in fields and not _as_class_names(fields, label, where):
                    not_labels.add(label.column)
            if task.write_split and fields.get(SPLIT_COLUMN) is None:
                fields[SPLIT_COLUMN] = task.split.out  # (a split the function gave wins: it may move rows)
            columns.update(fields)
            try:
                text = json.dumps({"file_name": name, "key": key, **fields}, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                cause = non_finite_problem(fields) or exc
                raise ShardkitError(
                    f"the map function returned a value that is not JSON ({where}): {cause};"
                    " return numbers, strings, lists or dicts besides the image"
                ) from None
            lines.append(text.encode("utf-8") + b"\n")
            rows_out += 1
        if len(lines) > 4096:  # keep memory flat: spill to the part file as it grows
            _append(partial, lines)
            lines = []
    _append(partial, lines)
    os.replace(partial, part)
    counts = {"rows_in": rows_in, "rows_out": rows_out, "columns": sorted(columns), "not_labels": sorted(not_labels)}
    write_atomic(_done_path(task.work_dir, task.stem), json.dumps(counts).encode())  # the shard is done only now
    return task.stem, rows_in, rows_out


def _as_class_names(fields: dict[str, Any], label: ClassLabelColumn, where: str) -> bool:
    """Put a ClassLabel column's class names in place of its integers (what the packer numbers
    again, in the source's order); False if it holds something else (then it is no ClassLabel)."""
    value = fields[label.column]

    def name_of(v: Any) -> Any:
        if not isinstance(v, int) or isinstance(v, bool):
            return v
        if v == -1:  # datasets' "no label"
            return None
        if not 0 <= v < len(label.names):
            raise ShardkitError(
                f"column {label.column!r} is a ClassLabel of {len(label.names)} names in the source, and the map"
                f" function returned {v} in it ({where}); return a class's number or name, or rename the column"
            )
        return label.names[v]

    if label.in_list:
        if isinstance(value, list):
            fields[label.column] = [name_of(v) for v in value]
        return False  # the packer makes one ClassLabel, of single values: the names stay as strings
    fields[label.column] = value = name_of(value)
    return value is None or isinstance(value, str)


def _source_rows(ds: Any, source: str, shard: str) -> Iterator[dict[str, Any]]:
    """The source shard's rows; a source that cannot be read (damaged, hostile, gone) is one
    error naming it, the shard and the row, not a traceback from deep inside datasets."""
    rows = iter(ds)
    n = 0
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


def _done_path(work_dir: str, stem: str) -> str:
    return os.path.join(work_dir, "parts", f"{stem}.done")


def _append(path: str, lines: list[bytes]) -> None:
    with naming_errors(path), open(path, "ab") as f:
        f.writelines(lines)


def _where_raised(exc: BaseException) -> str:
    """Where the user's code raised ``exc``: its innermost frame outside shardkit, and the
    traceback of the user's frames (the task may have run in another process, so as text)."""
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(here)]
    if not frames:
        return ""
    last = frames[-1]
    lines = "".join(traceback.format_list(frames)).rstrip()
    return f" (at {last.filename}:{last.lineno} in {last.name})\nTraceback of the map function:\n{lines}"


def _rows_of(out: Any, where: str) -> list[dict[str, Any]]:
    """The function's returned batch as rows, once checked to be a dict of equal-length lists."""
    if not isinstance(out, dict) or not all(isinstance(v, list) for v in out.values()):
        raise ShardkitError(f"the map function must return a dict of lists ({where}); it returned {type(out).__name__}")
    lengths = {len(v) for v in out.values()}
    if len(lengths) > 1:
        raise ShardkitError(f"the map function returned columns of different lengths {sorted(lengths)} ({where})")
    names = list(out)
    return [{name: out[name][i] for name in names} for i in range(lengths.pop() if lengths else 0)]


def _file_of(row: dict[str, Any], config: RemuxConfig, where: str) -> tuple[str, tuple[bytes, str]]:
    found = [(name, enc) for name, value in row.items() if (enc := _encode(value, config)) is not None]
    if len(found) != 1:
        what = "no image or file column" if not found else f"{len(found)} file columns ({[n for n, _ in found]})"
        raise ShardkitError(
            f"each output row needs exactly one image (PIL image or bytes); the map function returned {what} ({where})"
        )
    return found[0]


# --- the whole run ---------------------------------------------------------------------------------


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
    load_function(config.fn)  # a bad --map fails now, not in a worker
    # With an OUT_DIR URL the transformed files are staged in the local work folder, as pack's own.
    location = Location.out_dir(config.out_dir)
    out_dir = location.local_dir(config.work_dir)
    source_dir = [("SOURCE", config.source)] if os.path.isdir(config.source) else []
    check_apart(location, out_dir, source_dir)
    check_own_entries(out_dir)  # as in pack: before anything there is read or written
    if location.is_local:  # a URL is not checked for foreign files, as in pack
        check_out_dir(out_dir, adopt=config.adopt)
    started = time.perf_counter()
    manifest = _shardkit_manifest(config.source, config.revision)
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
