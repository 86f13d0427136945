"""What the card's front matter tells datasets and the Hub: ``configs`` (which files each split
reads, and their features), ``dataset_info`` and ``size_categories``.

The card's YAML front matter is what makes ``load_dataset(OUT_DIR)`` work without a script:
``configs`` points the builtin loader at ``data/*.zip`` (or ``*.tar``, ``*.parquet``; and away
from ``metadata/`` and the manifest) and declares every column's type as inferred from all rows
(``features``, in the config, where every datasets version reads it, and in
``dataset_info.features`` for the Hub). An existing card keeps its text and every other key; only
those keys are set (a ``configs`` path that is shardkit's pattern for another format is changed
to this one's).
"""

from __future__ import annotations

import re
from typing import Any

from ..builtin import builtin_loader
from ..formats import FORMAT_NAMES, ZIP, ShardFormat
from ..manifest import SplitSummary
from .facts import CardFacts

#: A ``data_files`` path shardkit writes: ``data/*.zip``, or a split's ``data/<split>/*.zip``,
#: with ``*/`` before the file where the shards are nested (manifest.data_files_pattern).
_SHARDKIT_PATTERN = re.compile(rf"data/(?:[A-Za-z0-9_]{{1,64}}/)?(?:\*/)?\*\.(?:{'|'.join(FORMAT_NAMES)})")
_SIZE_CATEGORIES = [
    (10**3, "n<1K"),
    (10**4, "1K<n<10K"),
    (10**5, "10K<n<100K"),
    (10**6, "100K<n<1M"),
    (10**7, "1M<n<10M"),
    (10**8, "10M<n<100M"),
    (10**9, "100M<n<1B"),
    (10**10, "1B<n<10B"),
    (10**11, "10B<n<100B"),
    (10**12, "100B<n<1T"),
]


def size_category(rows: int) -> str:
    """The Hub's size category for a row count."""
    for bound, name in _SIZE_CATEGORIES:
        if rows < bound:
            return name
    return "n>1T"


def split_data_files(fmt: ShardFormat, splits: list[SplitSummary] | None) -> list[dict[str, Any]]:
    """The ``data_files`` of shardkit's config: one entry per split."""
    if not splits:
        return [{"split": "train", "path": fmt.data_files_pattern}]
    return [{"split": s.name, "path": s.data_files} for s in splits]


def default_configs(fmt: ShardFormat = ZIP, splits: list[SplitSummary] | None = None) -> list[dict[str, Any]]:
    return [{"config_name": "default", "data_files": split_data_files(fmt, splits)}]


def _config_entries(config: Any) -> list[Any]:
    """A ``configs`` entry's ``data_files`` as a list of entries (dicts with ``path``, or paths)."""
    files = config.get("data_files") if isinstance(config, dict) else None
    return files if isinstance(files, list) else [files]


def config_paths(config: Any) -> list[Any]:
    """The paths a ``configs`` entry reads."""
    return [e.get("path") if isinstance(e, dict) else e for e in _config_entries(config)]


def is_shardkit_path(path: Any) -> bool:
    return isinstance(path, str) and _SHARDKIT_PATTERN.fullmatch(path) is not None


def _is_shardkit_config(config: Any) -> bool:
    """Whether a ``configs`` entry reads shardkit's shards only (its data_files are shardkit's)."""
    paths = config_paths(config)
    return bool(paths) and all(is_shardkit_path(p) for p in paths)


def _retarget_configs(configs: Any, fmt: ShardFormat, splits: list[SplitSummary] | None = None) -> Any:
    """Point every config that reads shardkit's shards (of any format, split or not) at these:
    one data_files entry per split."""
    if not isinstance(configs, list):
        return configs
    for config in configs:
        if isinstance(config, dict) and _is_shardkit_config(config):
            config["data_files"] = split_data_files(fmt, splits)
    return configs


def _with_features(configs: Any, fmt: ShardFormat, features: list[dict[str, Any]]) -> Any:
    """Declare ``features`` in every config that reads this format's shards.

    datasets' folder builders (imagefolder, audiofolder) ignore ``dataset_info.features``: with
    no features in the config they infer each column from ONE shard's metadata (a different
    one from run to run), so a column null throughout that shard, or a float column written as
    integers there, comes back with the wrong type or fails. Features given in the config
    reach the folder and parquet builders in datasets 3.6 to 5.x (``dataset_info.features``,
    when present, wins over them: the two are kept the same).
    """
    if not isinstance(configs, list):
        return configs
    for config in configs:
        if _is_shardkit_config(config):
            if builtin_loader(fmt).config_features:
                config["features"] = features
            else:
                config.pop("features", None)
    return configs


def front_matter_keys(facts: CardFacts, data: dict[str, Any]) -> dict[str, Any]:
    """The keys shardkit sets in a card whose front matter is ``data``: ``configs`` (the user's,
    pointed at these shards; or shardkit's), ``size_categories`` and ``dataset_info``."""
    fmt, splits, features = facts.fmt, facts.splits, facts.features
    info = data.get("dataset_info")
    info = dict(info) if isinstance(info, dict) else {}
    info["features"] = features
    if splits:
        # What the Hub shows of each split: rows, and bytes (of its shards: the images are in
        # them, so they are what a reader downloads and about what Arrow holds).
        info["splits"] = [{"name": s.name, "num_bytes": s.bytes, "num_examples": s.rows} for s in splits]
        info["download_size"] = sum(s.bytes for s in splits)
        info["dataset_size"] = sum(s.bytes for s in splits)
    configs = _retarget_configs(data.get("configs"), fmt, splits) or default_configs(fmt, splits)
    return {
        "configs": _with_features(configs, fmt, features),
        "size_categories": [size_category(facts.rows)],
        "dataset_info": info,
    }


def first_config_problem(configs: Any) -> str | None:
    """Why a ``configs`` list would keep datasets from loading the shards (None: it would not):
    datasets picks the builder of every config from the first one's files."""
    if not isinstance(configs, list) or not configs:
        return None
    first = configs[0] if isinstance(configs[0], dict) else {}
    paths = config_paths(first)
    if any(is_shardkit_path(p) for p in paths):
        return None
    return (
        f"its first config ({first.get('config_name')!r}) reads {paths}, not shardkit's"
        " data/*.<format>; datasets picks every config's builder from the first one's files, so the"
        " shards could not be loaded. Put a config for the shards first, or remove `configs`."
    )
