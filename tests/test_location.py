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


def test_a_folder_lists_what_fsspecs_local_filesystem_lists(tmp_path: Path) -> None:
    """Folder lists and sizes with os calls; its answers are those of fsspec's LocalFileSystem,
    which it replaced (the pack's reconcile and verify rely on them): links, a link to a folder,
    a dangling link and a FIFO are files, a link's size is its target's."""
    import fsspec  # type: ignore[import-untyped]

    root = tmp_path / "r"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f1").write_bytes(b"x")
    (root / "a" / "b" / "f2").write_bytes(b"yy")
    (root / "top").write_bytes(b"zzz")
    (root / "link").symlink_to(root / "a" / "f1")
    (root / "dirlink").symlink_to(root / "a")
    (root / "a" / "dangling").symlink_to(tmp_path / "nothing")
    os.mkfifo(root / "fifo")
    folder, fs = Folder(str(root)), fsspec.filesystem("file")
    for sub in ["", "a", "a/b", "missing", "dirlink", "top", "link", "fifo", "top/x", "a/dangling"]:
        path = f"{root}/{sub}" if sub else str(root)
        found = fs.find(path, detail=True, withdirs=False)
        assert folder.find(sub) == {name[len(str(root)) + 1 :]: info["size"] for name, info in found.items()}, sub
    for sub in ["", "a", "missing"]:
        path = f"{root}/{sub}" if sub else str(root)
        entries = fs.ls(path, detail=True) if os.path.isdir(path) else []
        assert folder.list(sub) == sorted(e["name"].rsplit("/", 1)[-1] for e in entries if e["type"] == "file"), sub
    for rel in ["top", "link", "dirlink", "fifo", "a", "missing", "a/b/f2", "a/dangling"]:
        info = fs.info(f"{root}/{rel}") if os.path.exists(root / rel) else None
        assert folder.size(rel) == (info["size"] if info and info["type"] == "file" else None), rel
    folder.remove_with_empty_folder("a/b/f2")
    assert not (root / "a" / "b").exists() and (root / "a").is_dir()  # the emptied folder goes, not its parent
    folder.remove("missing")  # nothing there: nothing to do
