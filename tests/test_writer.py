"""The shard writer's parts: changed files. (The worker processes: tests/test_tasks.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import shardkit.pack
from shardkit.inputfile import SourceChanged
from shardkit.pack import pack
from tests.support.packing import config_for


def test_file_changed_during_a_parallel_run_is_an_error_naming_it(
    make_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(60)
    out = tmp_path / "out"
    original = shardkit.pack.reconcile

    def grow_then_reconcile(*args: Any, **kw: Any) -> Any:
        # Grow one file between the check and the write: the planned sizes no longer hold.
        with open(corpus.images / corpus.rows[7]["file_name"], "ab") as f:
            f.write(b"more")
        return original(*args, **kw)

    monkeypatch.setattr(shardkit.pack, "reconcile", grow_then_reconcile)
    with pytest.raises(SourceChanged, match=r"img_0007\.jpg \(metadata line 8\): file changed since it was checked"):
        pack(config_for(corpus, out, jobs=2))
    assert not (out / "shards.json").exists()
    assert list((out / ".shardkit" / "tmp").glob("*")) == []  # nothing half-written left behind
