"""What an earlier run left in OUT_DIR: its ``.shardkit/state.json``, or, for a folder packed
without its work folder (a clone), what its manifest implies. Read once, before the plan: the plan
starts from the shard names it gave (a re-run is the same run, an update keeps its shards), and
the resume stage (:mod:`.packresume`) compares this run with it."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from .manifest import Manifest, read_manifest
from .packrun import PackRun
from .plan import BY_SIZE, FIRST_BOUNDARY, shard_stem
from .schema import class_label_names
from .workstate import read_pack_state

#: The layout of a manifest that has a metadata table but records no layout: 3 (ZIP shards
#: then were still at 2, which packs of this version do not tell apart: both are older than 4).
_LAST_UNRECORDED_LAYOUT = 3


@dataclass(frozen=True)
class PreviousRun:
    """The run recorded in OUT_DIR."""

    state: dict[str, Any]  # as recorded (or, for a folder without its work folder, from its manifest)
    manifest: Manifest | None

    @property
    def fingerprint(self) -> str | None:
        return self.state.get("input_fingerprint")

    @property
    def prefix_lengths(self) -> dict[str, int]:
        return dict(self.state.get("prefix_lengths") or {})

    @property
    def labels(self) -> dict[str, list[str]]:
        return dict(self.state.get("labels") or {})

    def reuses(self, fingerprint: str, *, update: bool, force: bool) -> bool:
        """Whether a run plans from what this one planned from: a run of the same input (a re-run
        is the same run), or an update (which keeps its rule and shard names, so that unchanged
        rows land in the shards they are in). --force plans afresh: it replaces the output."""
        return not force and (update or self.fingerprint == fingerprint)

    def boundaries(self, split: str, fingerprint: str, update: bool) -> list[str]:
        """The shard names a split cut by size is planned from: this run's starting names for
        the same input (a re-run is the same run); for an update, the names this run gave its
        shards (so unchanged rows stay where they are); else one shard to start from."""
        recorded = (self.state.get("boundaries") or {}).get(split)
        if self.fingerprint == fingerprint and recorded:
            return list(recorded)
        if update and self.manifest is not None:
            names = _shard_names(self.manifest, split)
            if names and names[0] == FIRST_BOUNDARY:
                return names
        return list(recorded) if update and recorded else [FIRST_BOUNDARY]


def _shard_names(manifest: Manifest, split: str) -> list[str]:
    """The names a manifest gives a split's shards, sorted (cut by size: where each range starts)."""
    return sorted(shard_stem(s.file) for s in manifest.shards if s.split == split)


def previous_run(run: PackRun) -> PreviousRun | None:
    """The run recorded in OUT_DIR, if any (older records are completed with what they imply).
    A damaged state.json is refused; with ``--force``, ignored (the run starts afresh)."""
    state = read_pack_state(os.path.join(run.shardkit_dir, "state.json"), force=run.config.force)
    manifest = read_manifest(run.local_dir)
    if state is None and manifest is not None:  # a folder packed without its work folder (a clone)
        state = {"input_fingerprint": manifest.input_fingerprint, "options": asdict(manifest.options)}
        state["layout"] = manifest.layout or (_LAST_UNRECORDED_LAYOUT if manifest.metadata_table_sha256 else 1)
        state["prefix_lengths"] = {s.name: s.prefix_length for s in manifest.splits()}
        state["labels"] = {f["name"]: n for f in manifest.features if (n := class_label_names(f)) is not None}
        state["boundaries"] = {
            s.name: _shard_names(manifest, s.name) for s in manifest.splits() if s.prefix_length == BY_SIZE
        }
    if state is None:
        return None
    state.setdefault("layout", 1)  # state from before layout versions
    options = state.get("options") or {}
    # State from before splits and labels: one split, train, with the options' prefix length.
    state.setdefault("prefix_lengths", {"train": options.get("prefix_length")})
    state.setdefault("labels", {})
    state.setdefault("split_folders", manifest.split_folders if manifest is not None else False)
    state.setdefault("boundaries", {})
    return PreviousRun(state, manifest)
