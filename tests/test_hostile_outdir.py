"""A hostile OUT_DIR (issue 31): links out of it or into ``.git/`` and ``.shardkit/``, FIFOs,
sockets, a card or ``.gitignore`` that is not UTF-8 or whose YAML does not parse.

pack (every mode) and push refuse each with one line naming the file, before they read, write or
send anything: no file outside changes, OUT_DIR stays as it was, no repo is made on the Hub.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hub_server import run_hub_server
from tests.support.cli import run_cli
from tests.support.corpus import REPO_ROOT
from tests.support.packing import example_args
from tests.test_push import REPO, hub_env

SCRIPTS = Path(sys.executable).parent
TIMEOUT = 120  # a run that opens a FIFO waits forever: the test fails on the timeout instead


@pytest.fixture
def out(packed_template: Path, tmp_path: Path) -> Path:
    """A private copy of the scaffolded, packed example (16 shards; its .shardkit/ too)."""
    dst = tmp_path / "ds"
    shutil.copytree(packed_template, dst, symlinks=True)
    return dst


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder of the user's beside OUT_DIR, which no run may read into or write through."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "notes.md").write_text("---\nlicense: mit\n---\nmy private notes\n")
    return folder


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root``: a file's sha256, a link's target, another entry's type. Reads
    no FIFO and follows no link."""
    found: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            mode = path.lstat().st_mode
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[rel] = stat.S_IFMT(mode)
    return found


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / args[0]), *args[1:]], capture_output=True, text=True, env=env, timeout=TIMEOUT, check=False
    )


def pack(out: Path, *options: str, fifo: bool = False) -> subprocess.CompletedProcess[str]:
    """`pack-shards` on the example into ``out``, in this process (tests/support/cli.py); with a
    FIFO in OUT_DIR (``fifo``) in a process of its own, whose hang, were the FIFO opened, TIMEOUT ends."""
    args = example_args(out, "-q", *options)
    return run("pack-shards", *args) if fifo else run_cli("pack-shards", *args)


def refused(result: subprocess.CompletedProcess[str], names: str, code: int = 1) -> str:
    """The run's one line of refusal, which names ``names``."""
    assert result.returncode == code, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert names in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def push_refused(out: Path, tmp_path: Path, names: str, *args: str, code: int = 1) -> str:
    """Push ``out`` to a test Hub of its own: refused in one line naming ``names``, with no repo
    made and nothing uploaded."""
    with run_hub_server(tmp_path / "hub-state") as hub:
        env = hub_env(hub.url, tmp_path / "home")
        line = refused(run("shardkit", "push", str(out), "--repo", REPO, *args, env=env), names, code)
        assert hub.state.load("dataset", REPO) is None
        assert not hub.state.objects.exists() or not any(hub.state.objects.iterdir())
    return line


def replace_with_link(path: Path, target: str) -> None:
    path.unlink()
    path.symlink_to(target)


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def first_metadata(out: Path) -> Path:
    return sorted((out / "metadata").rglob("*.jsonl*"))[0]


# --- push publishes nothing of .git/ or .shardkit/, through any link -------------------------------


def _git_config(out: Path) -> Path:
    (out / ".git").mkdir()
    config = out / ".git" / "config"
    config.write_text("[remote]\n\turl = https://bob:GITPW2@example.com/r\n")
    return config


def test_push_publishes_no_git_file_through_a_link_named_as_a_file_of_shardkits(out: Path, tmp_path: Path) -> None:
    _git_config(out)
    replace_with_link(out / "preview.jpg", ".git/config")
    before = snapshot(out)
    line = push_refused(out, tmp_path, "preview.jpg")
    assert ".git/" in line and "GITPW2" not in line
    assert snapshot(out) == before


@pytest.mark.parametrize(
    ("name", "target", "private"),
    [("config.txt", "../.git/config", ".git/"), ("state.json", "../.shardkit/state.json", ".shardkit/")],
)
def test_push_publishes_no_git_or_working_file_through_an_included_link(
    out: Path, tmp_path: Path, name: str, target: str, private: str
) -> None:
    _git_config(out)
    (out / "docs").mkdir()
    (out / "docs" / "guide.md").write_text("a guide\n")
    (out / "docs" / name).symlink_to(target)
    before = snapshot(out)
    line = push_refused(out, tmp_path, f"docs/{name}", "--include", "docs/*")
    assert private in line
    assert snapshot(out) == before


def test_push_refuses_a_metadata_file_that_is_a_link_into_git_even_with_the_right_bytes(
    out: Path, tmp_path: Path
) -> None:
    meta = first_metadata(out)
    (out / ".git").mkdir()
    hidden = out / ".git" / "copy"
    shutil.copyfile(meta, hidden)
    replace_with_link(meta, os.path.relpath(hidden, meta.parent))
    before = snapshot(out)
    push_refused(out, tmp_path, meta.name)
    assert snapshot(out) == before


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["metadata", "data"])
def test_push_and_pack_refuse_a_shard_folder_that_is_a_link_out(
    out: Path, outside: Path, tmp_path: Path, folder: str
) -> None:
    shutil.move(out / folder, outside / folder)
    (out / folder).symlink_to(outside / folder)
    before, before_outside = snapshot(out), snapshot(outside)
    line = push_refused(out, tmp_path, f"{out / folder}:")
    assert "outside" in line
    refused(pack(out, "--update"), f"{out / folder}:")
    assert snapshot(out) == before and snapshot(outside) == before_outside


# --- FIFOs and sockets: refused before anything opens them ----------------------------------------


@pytest.mark.parametrize(
    "name", ["README.md", ".gitignore", ".gitattributes", "preview.jpg", "metadata.parquet", "shards.json", "METADATA"]
)
def test_push_refuses_a_fifo_before_opening_it_or_sending_anything(out: Path, tmp_path: Path, name: str) -> None:
    path = first_metadata(out) if name == "METADATA" else out / name
    if path.exists():
        replace_with_fifo(path)
    else:
        os.mkfifo(path)
    before = snapshot(out)
    line = push_refused(out, tmp_path, f"{path}: a FIFO")
    assert line.endswith("not a regular file; shardkit reads and writes only files")
    assert snapshot(out) == before


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("README.md", ("--force",)),
        ("README.md", ("--update",)),
        ("METADATA", ()),
        (".gitattributes", ()),
        (".gitignore", ("--adopt",)),
        ("shards.json", ("--update",)),
        ("STATE", ()),
    ],
)
def test_pack_in_every_mode_refuses_a_fifo_before_opening_it(out: Path, name: str, options: tuple[str, ...]) -> None:
    special = {"METADATA": first_metadata(out), "STATE": out / ".shardkit" / "state.json"}
    path = special.get(name, out / name)
    if path.exists():
        replace_with_fifo(path)
    else:
        os.mkfifo(path)
    before = snapshot(out)
    refused(pack(out, *options, fifo=True), f"{path}: a FIFO")
    assert snapshot(out) == before


def test_a_socket_is_refused_by_push_and_pack(out: Path, tmp_path: Path) -> None:
    path = out / "preview.jpg"
    path.unlink()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        before = snapshot(out)
        push_refused(out, tmp_path, f"{path}: a socket")
        refused(pack(out), f"{path}: a socket")
        assert snapshot(out) == before


def test_a_folder_where_shardkit_keeps_a_file_is_refused(out: Path, tmp_path: Path) -> None:
    (out / "preview.jpg").unlink()
    (out / "preview.jpg").mkdir()
    push_refused(out, tmp_path, f"{out / 'preview.jpg'}: a folder")
    refused(pack(out, "--update"), f"{out / 'preview.jpg'}: a folder")


# --- pack reads nothing through, and writes nothing through, a link out of OUT_DIR ---------------


@pytest.mark.parametrize("options", [("--update",), ("--force",), (), ("--adopt",)])
def test_pack_copies_in_no_card_that_is_a_link_out(out: Path, outside: Path, options: tuple[str, ...]) -> None:
    replace_with_link(out / "README.md", str(outside / "notes.md"))
    before, before_outside = snapshot(out), snapshot(outside)
    line = refused(pack(out, *options), f"{out / 'README.md'}: a link to")
    assert "outside" in line
    assert snapshot(out) == before and snapshot(outside) == before_outside


@pytest.mark.slow
@pytest.mark.parametrize("name", ["data", ".shardkit", "shards.json", "metadata.parquet"])
@pytest.mark.parametrize("options", [("--update",), ("--force",), ()])
def test_pack_writes_nothing_through_a_link_out(out: Path, outside: Path, name: str, options: tuple[str, ...]) -> None:
    shutil.move(out / name, outside / name)
    (out / name).symlink_to(outside / name)
    before, before_outside = snapshot(out), snapshot(outside)
    refused(pack(out, *options), f"{out / name}: a link to")
    assert snapshot(out) == before and snapshot(outside) == before_outside


def test_pack_creates_nothing_through_a_dangling_link_out(out: Path, outside: Path) -> None:
    target = outside / "made-by-pack.md"
    replace_with_link(out / "README.md", str(target))
    refused(pack(out, "--update"), f"{out / 'README.md'}: a link to")
    assert not target.exists() and not os.path.lexists(outside / "made-by-pack.md.tmp")


def test_a_link_inside_out_dir_to_a_file_beside_stays_allowed(out: Path) -> None:
    (out / "notes").mkdir()
    shutil.move(out / "README.md", out / "notes" / "card.md")
    (out / "README.md").symlink_to("notes/card.md")
    result = pack(out, "--update")
    assert result.returncode == 0, result.stderr


# --- push checks the card and .gitignore before it makes the repo ---------------------------------


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("README.md", b"---\nlicense: mit\n---\n\xff\xfe caf\xe9\n", "is not UTF-8 text (byte 0xff at offset 21)"),
        (".gitignore", b"*.tmp\ncaf\xe9/\n", "is not UTF-8 text (byte 0xe9 at offset 9)"),
        ("README.md", b"---\nlicense: [unclosed\n---\n# card\n", "its YAML front matter does not parse"),
        (".gitignore", b"#" * (2 << 20), "more than 1048576 bytes"),
    ],
)
def test_push_refuses_a_card_or_gitignore_it_cannot_read_before_making_the_repo(
    out: Path, tmp_path: Path, name: str, data: bytes, says: str
) -> None:
    (out / name).write_bytes(data)
    before = snapshot(out)
    line = push_refused(out, tmp_path, f"{out / name}", code=2)
    assert says in line
    assert snapshot(out) == before


def test_remux_into_an_out_dir_with_a_fifo_or_a_link_out_is_refused(out: Path, outside: Path, tmp_path: Path) -> None:
    target = tmp_path / "remuxed"
    target.mkdir()
    os.mkfifo(target / "README.md")
    (target / "data").symlink_to(outside)
    before, before_outside = snapshot(target), snapshot(outside)
    remux = ("shardkit", "remux", str(out), str(target), "--map", "tests.remux_functions:identity", "-q", "-j", "1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(REPO_ROOT)])}
    result = run(*remux, env=env)
    refused(result, f"{target / 'README.md'}: a FIFO")
    (target / "README.md").unlink()
    result = run(*remux, env=env)
    refused(result, f"{target / 'data'}: a link to")
    assert snapshot(target) == {k: v for k, v in before.items() if k != "README.md"}
    assert snapshot(outside) == before_outside
