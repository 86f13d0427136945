"""What a card says, as one frozen object: :class:`CardFacts`, built by :func:`card_facts` from
the manifest and the little only a pack knows (the files' extensions, the preview, what datasets'
builtin loader would make of the layout). Every section is a function of it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..builtin import card_features
from ..formats import ShardFormat
from ..manifest import Manifest, SplitSummary

LOADER_SUFFIX = "_loader.py"


@dataclass(frozen=True)
class CardFacts:
    """What the card says of a packed dataset."""

    fmt: ShardFormat
    title: str  # a new card's title
    modality: str  # "image" or "audio"
    #: A row's columns as ``shardkit.stream`` gives them (the manifest's features).
    columns: list[dict[str, Any]]
    #: The features the card declares for datasets' builtin loader (:func:`.builtin.card_features`).
    features: list[dict[str, Any]]
    rows: int
    shards: int
    bytes: int  # of the shard files
    splits: list[SplitSummary]
    preview: str | None = None  # the preview image's path in the repo
    #: Why ``load_dataset(repo)`` would open a split with the wrong builder; None: it reads them right.
    builtin_note: str | None = None
    loader: str | None = None  # the loading script at OUT_DIR's root (read by datasets 3.6)

    @property
    def file_column(self) -> str:
        return str(self.columns[0]["name"]) if self.columns else "image"


def card_facts(
    manifest: Manifest,
    out_dir: str,
    *,
    title: str | None = None,
    extensions: list[str] | None = None,
    preview: str | None = None,
    builtin_warnings: list[str] | None = None,
) -> CardFacts:
    """The card's facts: the manifest's, OUT_DIR's loading script, and what only a pack knows.

    ``title`` titles a new card (default: ``out_dir``'s folder name; nothing else in the card
    depends on where the folder is or what it is called, so a copy packs to the same bytes);
    ``extensions``: the files' extensions (datasets' webdataset builder makes a column of each);
    ``builtin_warnings``: :func:`.builtin.builtin_loader_warnings`. Without extensions (push,
    which renders only the load examples) the card's features are the rows' as they are."""
    fmt = manifest.options.shard_format
    name = title or os.path.basename(os.path.abspath(out_dir))
    # A folder name that is not UTF-8 (bytes Python holds as surrogates) titles the card with
    # U+FFFD in their place: the card is UTF-8 text.
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return CardFacts(
        fmt=fmt,
        title=name,
        modality=manifest.modality,
        columns=manifest.features,
        features=manifest.features if extensions is None else card_features(fmt, manifest.features, extensions),
        rows=sum(s.rows for s in manifest.shards),
        shards=len(manifest.shards),
        bytes=sum(s.bytes for s in manifest.shards),
        splits=manifest.splits(),
        preview=preview,
        builtin_note=" ".join(builtin_warnings or []) or None,
        loader=loader_in(out_dir) if fmt.loading_script else None,
    )


def loader_in(out_dir: str) -> str | None:
    """The loading script at OUT_DIR's root (the template's ``*_loader.py``), if there is one."""
    try:
        names = sorted(n for n in os.listdir(out_dir) if n.endswith(LOADER_SUFFIX))
    except FileNotFoundError:
        return None
    return names[0] if names else None
