"""shardkit.location: telling places apart, and the same file operations for each kind."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from shardkit.errors import UsageError
from shardkit.location import Folder, FsspecUrl, Location


def test_parse_tells_folders_urls_and_hub_datasets_apart(tmp_path: Path) -> None:
    assert Location.parse(str(tmp_path)) == Location(str(tmp_path), "folder")
    assert Location.parse(f"file://{tmp_path}").kind == "folder"
    assert Location.parse("https://example.org/ds/").url == "https://example.org/ds"
    assert Location.parse("https://example.org/ds").kind == "http"
    assert Location.parse("memory://bucket/ds").kind == "fsspec"
    hub = Location.parse("hf://datasets/ns/name@v1.0")
    assert hub.kind == "hub" and hub.url.endswith("/datasets/ns/name/resolve/v1.0")
    assert (
        hub.has_revisions
        and not hub.repaired_in_place
        and not Location.parse("https://example.org/ds").repaired_in_place
    )
    assert not Location.parse(str(tmp_path)).has_revisions and Location.parse("memory://bucket/ds").repaired_in_place
    assert Location.parse("ns/name", revision="dev").url.endswith("/datasets/ns/name/resolve/dev")
    with pytest.raises(UsageError, match="is not a folder, an http"):
        Location.parse("not a place")


def test_an_out_dir_is_a_folder_or_a_url_and_never_the_hub(tmp_path: Path) -> None:
    assert Location.out_dir(str(tmp_path / "new")).is_local
    assert not Location.out_dir("memory://bucket/ds").is_local
    with pytest.raises(UsageError, match="to publish on the Hub, pack there and run `shardkit push"):
        Location.out_dir("hf://datasets/ns/name")
    with pytest.raises(UsageError, match="--work-dir is for an OUT_DIR URL"):
        Location.out_dir(str(tmp_path)).local_dir(str(tmp_path / "work"))
    assert Location.out_dir(str(tmp_path)).local_dir(None) == str(tmp_path)
    assert Location.out_dir("memory://b/ds").local_dir(str(tmp_path / "w")) == str(tmp_path / "w")


@pytest.mark.parametrize("kind", ["folder", "fsspec"])
def test_the_same_operations_on_a_folder_and_a_url(tmp_path: Path, kind: str) -> None:
    where = (
        Location(str(tmp_path / "repo"), "folder")
        if kind == "folder"
        else Location(f"memory://loc-{os.getpid()}/repo", "fsspec")
    )
    assert type(where) is {"folder": Folder, "fsspec": FsspecUrl}[kind]
    check_file_operations(where, tmp_path)


def check_file_operations(where: Location, tmp_path: Path) -> None:
    """What every kind of place does alike (tests/test_location_kinds.py runs it on a kind of its own)."""
    assert where.read_bytes("README.md") is None and where.size("data/a.zip") is None
    assert where.files_under("data") == [] and where.list("") == []
    local = tmp_path / "a.partial"
    local.write_bytes(b"shard")
    where.put(str(local), "data/train/a.zip")
    assert not local.exists()  # moved, not copied
    where.write_bytes("README.md", b"card")
    (tmp_path / "b").write_bytes(b"meta!")
    where.upload(str(tmp_path / "b"), "metadata/a.jsonl")
    assert (tmp_path / "b").exists()  # copied
    assert where.read_bytes("README.md") == b"card"
    assert where.size("data/train/a.zip") == 5
    assert where.files_under("data") == ["data/train/a.zip"]
    assert where.list("") == ["README.md"] and where.list("data/train") == ["a.zip"]
    assert where.find() == {"README.md": 4, "data/train/a.zip": 5, "metadata/a.jsonl": 5}
    with where.open("data/train/a.zip") as f:
        assert f.read() == b"shard"
    with where.open_random("metadata/a.jsonl") as f:
        f.seek(2)
        assert f.read() == b"ta!"
    with where.open_range("data/train/a.zip", 1, 3) as f:
        assert f.read() == b"ha"
    where.get("README.md", str(tmp_path / "card"))
    assert (tmp_path / "card").read_bytes() == b"card"
    where.check_writable()
    where.remove("README.md")
    where.remove("README.md")  # gone already: nothing to do
    assert where.read_bytes("README.md") is None
    assert pickle.loads(pickle.dumps(where)) == where
