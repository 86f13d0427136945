"""``shardkit.stream``: read a packed dataset as a ``datasets.IterableDataset``, one shard per file.

Each ZIP or tar shard is read front to back from one forward-only stream: a single HTTP GET per
shard on the Hub or any web server (no Range requests, no central directory), or one ``open()``
on disk. Parquet shards need their footer first, so they are read row group by row group through
ranged reads (fsspec). What a shard's bytes mean is its format's (:mod:`.formats`: ZIP members
are CRC-checked, tar headers checksummed, unsafe names refused...); this module finds the
shards, opens them and wires them into ``datasets``. Every format yields the same columns: the
file column (``image`` or ``audio``), ``key``, then the fields. Images are yielded as bytes and
decoded only when a row is formatted, as ``datasets`` does.

The shard list goes into ``gen_kwargs``, so ``n_shards`` is the number of ZIPs: DataLoader
workers and ``split_dataset_by_node`` split the dataset by shard, and ``.shuffle(seed,
buffer_size)`` shuffles the shard order plus a buffer of rows (``set_epoch`` reshuffles).

Sources: a packed folder, an ``http(s)://`` URL of one, a Hub dataset id (``ns/name``),
``hf://datasets/ns/name[@revision]``, or another fsspec URL (``s3://bucket/ds``, where
``pack -o URL`` writes; read through fsspec in 8 MiB blocks). Hub reads go to ``HF_ENDPOINT``
with the token huggingface_hub finds (``HF_TOKEN`` or the login), so private repos work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .location import Location
from .manifest import Manifest
from .shardrows import iter_shard, read_manifest_from

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)


def _generate(
    shards: list[str], source: Location, file_column: str, fmt_name: str, manifest: Manifest
) -> Iterator[dict[str, Any]]:
    for shard in shards:
        yield from iter_shard(source, shard, file_column, fmt_name, manifest)


def stream(source: str, *, revision: str | None = None, split: str = "train") -> datasets.IterableDataset:
    """One split of a packed dataset as a ``datasets.IterableDataset`` with one shard per shard
    file; see the module doc. A split that is not there is a UsageError naming those that are."""
    import datasets

    where = Location.parse(source, revision=revision)
    manifest = read_manifest_from(where)
    features = datasets.Features._from_yaml_list(manifest.features) if manifest.features else None
    file_column = manifest.modality
    if features is not None and file_column == "audio" and not _audio_feature_usable(datasets):
        log.warning(
            "audio cannot be decoded here (datasets 4+ needs torchcodec, 3.x librosa and soundfile):"
            " the 'audio' column holds each file's bytes and path"
        )
        features[file_column] = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    return datasets.IterableDataset.from_generator(
        _generate,
        features=features,
        gen_kwargs={
            "shards": [s.file for s in manifest.shards_of(split)],
            "source": where,
            "file_column": file_column,
            "fmt_name": manifest.options.format,
            "manifest": manifest,  # not a list: every worker gets all of it (what Parquet shards are held to)
        },
        split=datasets.NamedSplit(split),
    )


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
