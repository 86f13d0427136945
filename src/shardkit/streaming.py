"""``shardkit.stream``: read a packed dataset as a ``datasets.IterableDataset``, for training.

What a training job asks of a stream, and how this one gives it (docs/design-training-stream.md):

* **Which rows, in which order**: a pure function (:mod:`.order`) of the manifest, the shuffle
  seed, the epoch, the rank and the world size. Each rank reads a contiguous floor-or-ceil share
  of the epoch's rows (its shards, and parts of at most two), so it fetches about its share of
  the bytes. With a seed the shards are permuted per epoch and the rows of ``shuffle_shards``
  shards at a time are merged at random and permuted in windows of ``shuffle_window`` rows.
* **Exact resume**: the order is computed, so datasets' own ``state_dict()`` (a unit of work and
  a row within it) is the whole state: ``load_state_dict`` in a new process continues with the
  next row, in DataLoader workers too (torchdata's ``StatefulDataLoader``).
* **The epoch**: ``set_epoch(n)`` on the dataset being iterated. datasets hands the epoch to its
  data sources as a random generator (:class:`.epochunits.EpochUnits`), from which the
  epoch's plan is drawn.
* **Parallel decode**: ``decode_threads`` decodes the file column on threads, a batch of rows per
  task (:mod:`.decoding`), through datasets' async ``map``, whose state accounts for the rows in
  flight.

Reading: a whole ZIP or tar shard is read front to back from one forward-only stream (one GET on
the Hub or any web server, one ``open()`` on disk); part of a ZIP shard through its central
directory, a Parquet shard row group by row group (:meth:`.formats.base.ShardFormat.read_piece`).
Every format yields the same columns: the file column (``image`` or ``audio``), ``key``, then
the fields. Files are yielded as bytes and decoded when a row is formatted, as datasets does.

Sources: a packed folder, an ``http(s)://`` URL of one, a Hub dataset id (``ns/name``),
``hf://datasets/ns/name[@revision]``, or another fsspec URL (``s3://bucket/ds``, where
``pack -o URL`` writes). Hub reads go to ``HF_ENDPOINT`` with the token huggingface_hub finds
(``HF_TOKEN`` or the login), so private repos work.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .closeatexit import close_at_exit
from .errors import ShardkitError, UsageError
from .location import Location
from .manifest import Manifest
from .order import Piece, Unit, plan_units, shuffled_window, unit_order
from .shardrows import iter_shard, read_manifest_from

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)

#: Rows of this many shards are merged together when shuffling (one open stream each).
DEFAULT_SHUFFLE_SHARDS = 4
#: Rows permuted together when shuffling: the most rows held in memory.
DEFAULT_SHUFFLE_WINDOW = 1024


@dataclass(frozen=True)
class Plan:
    """What every epoch's units follow from (pickled to DataLoader workers with the dataset)."""

    source: Location
    manifest: Manifest
    split: str
    seed: int | None
    rank: int
    world_size: int
    shuffle_shards: int
    shuffle_window: int
    #: Threads the file column is decoded on (None: not on threads): datasets' state of a stream
    #: decoded on threads has another shape (its async ``map``), which the other kind cannot load.
    decode_threads: int | None = None

    @cached_property
    def identity(self) -> dict[str, Any]:
        """What the order depends on besides the epoch, as every ``state_dict()`` records it and
        ``load_state_dict`` checks it (:mod:`.epochunits`): the split, its shards (a sha256 over
        each one's file, rows and sha256 as the manifest lists them: not the card, which a push
        may change without touching a row), and the options (the shuffle's only with a seed)."""
        shards = [[s.file, s.rows, s.sha256] for s in self.manifest.shards_of(self.split)]
        seeded = self.seed is not None
        return {
            "split": self.split,
            "shards": hashlib.sha256(json.dumps(shards).encode()).hexdigest(),
            "shuffle_seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "shuffle_shards": self.shuffle_shards if seeded else None,
            "shuffle_window": self.shuffle_window if seeded else None,
            "decode_threads": self.decode_threads,
        }

    def units(self, epoch_key: int) -> list[Unit]:
        return plan_units(
            [(s.file, s.rows) for s in self.manifest.shards_of(self.split)],
            seed=self.seed,
            epoch_key=epoch_key,
            rank=self.rank,
            world_size=self.world_size,
            shuffle_shards=self.shuffle_shards,
            shuffle_window=self.shuffle_window,
        )


def _read_piece(plan: Plan, piece: Piece) -> Generator[dict[str, Any], None, None]:
    return iter_shard(
        plan.source,
        piece.shard,
        plan.manifest.modality,
        plan.manifest.options.format,
        plan.manifest,
        start=piece.start,
        stop=piece.stop,
    )


def _read_unit(plan: Plan, unit: Unit) -> Iterator[dict[str, Any]]:
    """A unit's rows in its order (:func:`.order.unit_order`): without a seed each piece front to
    back; with one, the pieces' rows merged and permuted window by window (each piece still read
    front to back, one stream each, opened when its first row is needed)."""
    if unit.seed is None:
        for piece in unit.pieces:
            yield from _read_piece(plan, piece)
        return
    readers: dict[int, Generator[dict[str, Any], None, None]] = {}
    try:
        for number, window in enumerate(unit_order(unit)):
            rows = []
            for index, _ in window:
                if index not in readers:
                    readers[index] = _read_piece(plan, unit.pieces[index])
                row = next(readers[index], None)
                if row is None:  # read_piece raises first when a shard is short; this is a guard
                    raise ShardkitError(f"{unit.pieces[index].shard}: fewer rows than the manifest records")
                rows.append(row)
            for position in shuffled_window(window, unit, number):
                yield rows[position]
        for reader in readers.values():  # a piece to a shard's end runs the format's end checks
            for _ in reader:
                raise ShardkitError("a shard has more rows than the manifest records")
    finally:
        for reader in readers.values():  # a unit left early (a break, an error) closes its streams
            reader.close()


def _generate(units: list[Unit], plan: Plan) -> Iterator[dict[str, Any]]:
    """The rows of ``units`` (what datasets iterates), closed at exit if left open
    (:mod:`.closeatexit`: ``next(iter(ds))`` at the end of a script printed a traceback per open
    piece at teardown)."""
    return close_at_exit(_units_rows(units, plan))


def _units_rows(units: list[Unit], plan: Plan) -> Generator[dict[str, Any], None, None]:
    for unit in units:
        yield from _read_unit(plan, unit)


def stream(
    source: str,
    *,
    revision: str | None = None,
    split: str | None = None,
    shuffle_seed: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    shuffle_shards: int = DEFAULT_SHUFFLE_SHARDS,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    decode_threads: int | None = None,
) -> datasets.IterableDataset:
    """One split of a packed dataset as a ``datasets.IterableDataset``.

    ``source``: a packed folder, an http(s) URL of one, a Hub dataset id (``ns/name``, at
    ``revision``), ``hf://datasets/ns/name[@rev]`` or another fsspec URL (``s3://...``).

    ``split``: the split to read. A training stream is one split: without ``split`` a dataset of
    one split gives that split, and a dataset of several is a UsageError naming them.

    ``shuffle_seed``: rows of different shards interleaved, in an order that is a pure function
    of the seed, the epoch and the dataset; ``shuffle_shards`` shards' rows are merged at a time
    and ``shuffle_window`` rows permuted together (the most rows held in memory). Both have no
    effect without a seed. ``rank``/``world_size``: this rank's contiguous floor-or-ceil share
    of the epoch's rows, disjoint from the other ranks'. ``decode_threads``: the images (audio)
    decoded on that many threads, in batches (:mod:`.decoding`).

    Exact resume: ``state_dict()`` at any row; in a new process, build the same stream, call
    ``set_epoch`` with the saved epoch and ``load_state_dict`` on the dataset you iterate (after
    ``map``...). The state records the split, its shards and the options the order depends on;
    iterating after ``load_state_dict`` refuses (a UsageError naming what differs) a state of
    other options or shards, or of another epoch (datasets would start the epoch over without a
    word). In DataLoader workers use torchdata's ``StatefulDataLoader``.

    The network: a read over http(s) or from the Hub retries a reset, a cut, a timeout, a 408,
    429 or 5xx from the next byte it has not given (no row repeated or lost), waiting
    ``SHARDKIT_RETRY_WAIT`` seconds (0.5) doubled up to 30 s, at most ``SHARDKIT_NETWORK_RETRIES``
    (8) times in a row with less than 1 MiB read between them; then a NetworkError naming the URL
    (keep ``state_dict()`` and resume). Each retry is a WARNING of the logger
    ``shardkit.location.reading``. ``SHARDKIT_NETWORK_TIMEOUT`` (60) bounds each wait for a byte.

    Bad options, a source that is not a packed dataset and a split that is not there (the
    message names those that are) are UsageErrors.
    """
    import datasets

    from .decoding import decode_on_threads
    from .epochunits import EpochUnits, StreamDataset

    _check_options(shuffle_seed, rank, world_size, shuffle_shards, shuffle_window, decode_threads)
    where = Location.parse(source, revision=revision)
    manifest = read_manifest_from(where)
    split = _split_to_read(manifest, split, source)
    plan = Plan(where, manifest, split, shuffle_seed, rank, world_size, shuffle_shards, shuffle_window, decode_threads)
    features = datasets.Features._from_yaml_list(manifest.features) if manifest.features else None
    file_column = manifest.modality
    if features is not None and file_column == "audio" and not _audio_feature_usable(datasets):
        log.warning(
            "audio cannot be decoded here (datasets 4+ needs torchcodec, 3.x librosa and soundfile):"
            " the 'audio' column holds each file's bytes and path"
        )
        features[file_column] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    built = datasets.IterableDataset.from_generator(
        _generate,
        features=features,
        gen_kwargs={"units": plan.units(0), "plan": plan},  # the list: what datasets splits among workers
        split=datasets.NamedSplit(split),
    )
    inner = built._ex_iterable
    ds = StreamDataset(EpochUnits(inner.generate_examples_fn, inner.kwargs), info=built.info, split=built.split)
    if shuffle_seed is not None and hasattr(ds, "_shuffling"):
        # datasets 3.x/4.0 hand the epoch to data sources only when a shuffling is configured.
        import numpy as np
        from datasets.iterable_dataset import ShufflingConfig

        ds._shuffling = ShufflingConfig(generator=np.random.default_rng(shuffle_seed), _original_seed=shuffle_seed)
    if decode_threads is not None:
        ds = decode_on_threads(ds, file_column, decode_threads)
    return ds


def _split_to_read(manifest: Manifest, split: str | None, source: str) -> str:
    """``split``, or the dataset's only one; a UsageError for a split that is not there (naming
    those that are) and for no ``split`` in a dataset of several."""
    if split is None:
        names = [s.name for s in manifest.splits()]
        if len(names) > 1:
            raise UsageError(
                f"{source} has {len(names)} splits ({', '.join(names)}): a stream reads one;"
                f" pass split= to choose, e.g. shardkit.stream(..., split={names[0]!r})"
            )
        split = names[0] if names else "train"
    manifest.shards_of(split)  # a split that is not there: the UsageError naming those that are
    return split


def _whole(value: object) -> bool:
    return type(value) is int  # not a bool, not a float


def _check_options(
    seed: int | None, rank: int, world_size: int, shuffle_shards: int, shuffle_window: int, decode_threads: int | None
) -> None:
    """A UsageError saying what was expected, before anything is read."""
    if seed is not None and not (_whole(seed) and seed >= 0):
        raise UsageError(f"shuffle_seed must be a whole number of at least 0 (or None), got {seed!r}")
    if not (_whole(rank) and _whole(world_size) and world_size >= 1 and 0 <= rank < world_size):
        raise UsageError(
            f"rank and world_size must be whole numbers with 0 <= rank < world_size, got rank={rank!r},"
            f" world_size={world_size!r}"
        )
    for name, value in (("shuffle_shards", shuffle_shards), ("shuffle_window", shuffle_window)):
        if not (_whole(value) and value >= 1):
            raise UsageError(f"{name} must be a whole number of at least 1, got {value!r}")
    if decode_threads is not None and not (_whole(decode_threads) and decode_threads >= 1):
        raise UsageError(f"decode_threads must be a whole number of at least 1 (or None), got {decode_threads!r}")


def _audio_feature_usable(datasets: Any) -> bool:
    """Whether datasets' ``Audio`` feature can hold audio here.

    datasets 4.0+ needs torchcodec (and torch) even to pass an audio file's bytes through
    (``Audio.encode_example`` imports them); datasets 3.x has no ``TORCHCODEC_AVAILABLE`` flag
    and decodes with soundfile and librosa.
    """
    if hasattr(datasets.config, "TORCHCODEC_AVAILABLE"):
        return bool(datasets.config.TORCHCODEC_AVAILABLE)
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("soundfile", "librosa"))
