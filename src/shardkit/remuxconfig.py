"""What :func:`shardkit.remux.remux` is asked to do (:class:`RemuxConfig`), and the shape of the
user's batch function."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .plan import DEFAULT_MAX_SHARD_BYTES

if TYPE_CHECKING:  # imported where the remux packs: its transform workers never need pack
    from .pack import ExecutorName, ShardFormatName


BatchFn = Callable[..., dict[str, list[Any]]]


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
