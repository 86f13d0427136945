"""Damaged working files in ``OUT_DIR/.shardkit/`` and Ctrl-C at any moment of a command.

A re-run (plain or --update) refuses a damaged state.json with one line naming it and saying
--force starts afresh; --force always works. A damaged done record or hashes.json (they only
spare work) is discarded with a warning naming it, and the run ends as an intact one would.
A Ctrl-C while the command loads or reads its options ends it with "interrupted", exit 130.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.corpus import EXAMPLE_DIR, REPO_ROOT, tree_bytes

BIN = Path(sys.executable).parent
PACK = [str(BIN / "pack-shards"), str(EXAMPLE_DIR / "images"), str(EXAMPLE_DIR / "metadata.jsonl"), "-j", "1", "-q"]


def pack(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`pack-shards` on the example into ``out``, in this process (tests/support/cli.py): the
    damages below are many, and each is a pack."""
    return run_cli("pack-shards", *PACK[1:], "-o", out, *options)


@pytest.fixture(scope="module")
def packed_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("state") / "base"
    done = pack(out)
    assert done.returncode == 0, done.stderr
    assert (out / ".shardkit" / "done" / "data__0.zip.json").is_file()
    return out


@pytest.fixture
def copy(packed_base: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(packed_base, out, symlinks=True)
    return out


def _edit_json(path: Path, change: Callable[[dict[str, object]], object]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _replace_with_link(path: Path) -> None:
    # A link to a valid copy of itself, kept outside OUT_DIR: never followed all the same.
    outside = path.parent.parent.parent / f"outside-{path.name}"
    path.rename(outside)
    path.symlink_to(outside)


def _options(data: dict[str, object]) -> dict[str, object]:
    options = data["options"]
    assert isinstance(options, dict)
    return options


STATE_DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_bytes(b"\x00\xffnot json at all"),
    "empty": lambda p: p.write_bytes(b""),
    "a list": lambda p: p.write_text("[]"),
    "NaN": lambda p: p.write_text('{"options": {}, "layout": NaN}'),
    "layout a string": lambda p: _edit_json(p, lambda d: d.update(layout="4")),
    "layout out of range": lambda p: _edit_json(p, lambda d: d.update(layout=0)),
    "no options": lambda p: _edit_json(p, lambda d: d.pop("options")),
    "options a list": lambda p: _edit_json(p, lambda d: d.update(options=[1])),
    "prefix length a float": lambda p: _edit_json(p, lambda d: _options(d).update(prefix_length=1.5)),
    "max size negative": lambda p: _edit_json(p, lambda d: _options(d).update(max_shard_bytes=-5)),
    "unknown format": lambda p: _edit_json(p, lambda d: _options(d).update(format="rar")),
    "fingerprint a number": lambda p: _edit_json(p, lambda d: d.update(input_fingerprint=5)),
    "prefix_lengths out of range": lambda p: _edit_json(p, lambda d: d.update(prefix_lengths={"train": 99})),
    "labels not names": lambda p: _edit_json(p, lambda d: d.update(labels={"label": [1, 2]})),
    "split_folders a string": lambda p: _edit_json(p, lambda d: d.update(split_folders="yes")),
    "boundaries unsorted": lambda p: _edit_json(p, lambda d: d.update(boundaries={"train": ["1", "0"]})),
    "boundaries a string": lambda p: _edit_json(p, lambda d: d.update(boundaries={"train": "0"})),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
}


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(STATE_DAMAGE))
@pytest.mark.parametrize("mode", [(), ("--update",)], ids=["rerun", "update"])
def test_damaged_state_is_refused_naming_it(copy: Path, damage: str, mode: tuple[str, ...]) -> None:
    state = copy / ".shardkit" / "state.json"
    STATE_DAMAGE[damage](state)
    before = tree_bytes(copy / "data")
    result = pack(copy, *mode)
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {state}: damaged (")
    assert "--force to start afresh" in line
    assert tree_bytes(copy / "data") == before  # the shards are left as they were


@pytest.mark.slow
@pytest.mark.parametrize("damage", [d for d in STATE_DAMAGE if d != "a folder"])
def test_force_starts_afresh_over_damaged_state(copy: Path, packed_base: Path, damage: str) -> None:
    state = copy / ".shardkit" / "state.json"
    STATE_DAMAGE[damage](state)
    result = pack(copy, "--force")
    assert result.returncode == 0, result.stderr
    assert f"WARNING: {state}: damaged (" in result.stderr
    assert "Traceback" not in result.stderr
    assert not state.is_symlink() and state.is_file()
    assert json.loads(state.read_text()) == json.loads((packed_base / ".shardkit" / "state.json").read_text())
    assert tree_bytes(copy / "data") == tree_bytes(packed_base / "data")
    assert pack(copy).returncode == 0  # and the next re-run is an ordinary one


DONE_DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_text("{{{"),
    "a list": lambda p: p.write_text("[]"),
    "rows a string": lambda p: _edit_json(p, lambda d: d.update(rows="2")),
    "rows zero": lambda p: _edit_json(p, lambda d: d.update(rows=0)),
    "no sha256": lambda p: _edit_json(p, lambda d: d.pop("sha256")),
    "file outside data": lambda p: _edit_json(p, lambda d: d.update(file="../../etc/passwd")),
    "keys descending": lambda p: _edit_json(p, lambda d: d.update(first_key="f" * 32, last_key="0" * 32)),
}


HASHES_DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage": lambda p: p.write_text("not json"),
    "a list": lambda p: p.write_text("[1]"),
    "a value of 5": lambda p: p.write_text('{"data/0.zip": 5}'),
    "a short sha256": lambda p: p.write_text('{"data/0.zip": ["1:2:3", "abc"]}'),
}


#: The working files that only spare work, by their path in .shardkit/, with their damages.
CACHES = {"done/data__0.zip.json": DONE_DAMAGE, "hashes.json": HASHES_DAMAGE}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "damage"), [(name, damage) for name, damages in CACHES.items() for damage in damages])
@pytest.mark.parametrize("mode", [(), ("--update",), ("--force",)], ids=["rerun", "update", "force"])
def test_damaged_cache_is_discarded_with_a_warning(
    copy: Path, packed_base: Path, name: str, damage: str, mode: tuple[str, ...]
) -> None:
    path = copy / ".shardkit" / name
    CACHES[name][damage](path)
    result = pack(copy, *mode)
    assert result.returncode == 0, result.stderr
    assert f"WARNING: {path}: damaged (" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_bytes(copy / "data") == tree_bytes(packed_base / "data")
    assert (copy / "shards.json").read_bytes() == (packed_base / "shards.json").read_bytes()
    assert not path.is_symlink()
    if name == "hashes.json":  # written afresh, a plain file again
        assert set(json.loads(path.read_text())) >= {"data/0.zip"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["state.json", "done/data__0.zip.json", "hashes.json"])
@pytest.mark.parametrize("entry", ["a FIFO", "a link"])
@pytest.mark.parametrize("mode", [(), ("--update",), ("--force",)], ids=["rerun", "update", "force"])
def test_a_fifo_or_a_link_out_in_the_working_folder_is_refused_in_every_mode(
    copy: Path, name: str, entry: str, mode: tuple[str, ...]
) -> None:
    """Not damaged state but an entry shardkit did not write (outdir.check_own_entries): refused
    before anything is read or written, even with --force, which replaces only shardkit's files.
    A FIFO is never opened (the run would hang), a link never followed nor replaced."""
    path = copy / ".shardkit" / name
    outside = copy.parent / f"outside-{path.name}"  # beside OUT_DIR: out of it
    if entry == "a FIFO":
        _replace_with_fifo(path)
    else:
        path.rename(outside)
        path.symlink_to(outside)
    target = outside.read_bytes() if entry == "a link" else None
    before = tree_bytes(copy / "data")
    result = pack(copy, *mode)
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {path}: ")
    assert ("not a regular file" if entry == "a FIFO" else "outside the dataset folder") in line
    assert tree_bytes(copy / "data") == before
    if target is not None:
        assert path.is_symlink() and outside.read_bytes() == target


# --- Ctrl-C at any moment -----------------------------------------------------------------

HOOK = REPO_ROOT / "tests" / "block_until_interrupted"


def _interrupted_at(point: str, command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` blocked at ``point`` (see the hook's docstring), Ctrl-C it there (SIGINT to
    its process group, as a terminal sends it), and return how it ended."""
    marker = tmp_path / "blocked"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HOOK), str(REPO_ROOT / "src")]),
        "SHARDKIT_TEST_BLOCK_AT": point,
        "SHARDKIT_TEST_BLOCKED": str(marker),
    }
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # waiting for the process to get there; the result never depends on when
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the command never reached the point"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


CTRL_C_POINTS = {
    # while cli.py imports its modules (click among the first)
    "pack-shards, loading": ("click", "pack"),
    "shardkit verify, loading": ("shardkit.errors", "verify"),
    # click has read the options; the command loads its stage before the library call
    "pack-shards, after the options": ("shardkit.pack", "pack"),
    "shardkit verify, after the options": ("shardkit.verify", "verify"),
    # the library call has returned; the summary is being made
    "shardkit verify, the summary": ("shardkit.summarytext:shards", "verify"),
}


@pytest.mark.parametrize("name", list(CTRL_C_POINTS))
def test_ctrl_c_before_and_after_the_library_call_is_one_line(name: str, packed_base: Path, tmp_path: Path) -> None:
    point, which = CTRL_C_POINTS[name]
    out = tmp_path / "out"
    command = [*PACK, "-o", str(out)] if which == "pack" else [str(BIN / "shardkit"), "verify", "-q", str(packed_base)]
    result = _interrupted_at(point, command, tmp_path)
    assert result.returncode == 130, result.stderr
    assert result.stderr == "interrupted\n"
    assert not out.exists()  # nothing written before the library call


def test_ctrl_c_in_verify_does_not_offer_to_resume(packed_base: Path, tmp_path: Path) -> None:
    # verify reads from the start each time: its Ctrl-C says no "re-run to resume".
    command = [str(BIN / "shardkit"), "verify", "-q", str(packed_base)]
    result = _interrupted_at("shardkit.verify:check_whole", command, tmp_path)
    assert result.returncode == 130
    assert _one_line(result.stderr) == "interrupted"


def test_ctrl_c_in_pack_says_a_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _interrupted_at("shardkit.pack:reconcile", [*PACK, "-o", str(out)], tmp_path)
    assert result.returncode == 130
    assert _one_line(result.stderr) == "interrupted; re-run the same command to resume"


def test_force_does_not_remove_a_folder_in_place_of_the_state(copy: Path) -> None:
    # Not a file shardkit wrote: --force leaves it (and says which), as it leaves any such folder.
    state = copy / ".shardkit" / "state.json"
    state.unlink()
    (state / "mine").mkdir(parents=True)
    result = pack(copy, "--force")
    assert result.returncode == 1
    assert _one_line(result.stderr).startswith(f"error: {state}: a folder, ")
    assert (state / "mine").is_dir()


# --- remux's working files ------------------------------------------------------------------


def remux(source: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "src")])}
    command = [str(BIN / "shardkit"), "remux", str(source), str(out), "-q", "-j", "1"]
    map_fn = ["--map", "tests.remux_functions:resize_and_flip"]
    return subprocess.run([*command, *map_fn, *options], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "a list"])
def test_damaged_remux_state_is_refused_and_force_starts_afresh(packed_base: Path, tmp_path: Path, damage: str) -> None:
    out = tmp_path / "out"
    state = out / ".shardkit" / "remux" / "state.json"
    (state.parent / "parts").mkdir(parents=True)
    state.write_text('{"a": 1}')
    {
        "garbage": lambda p: p.write_text("{"),
        "a list": lambda p: p.write_text("[]"),
    }[damage](state)
    refused = remux(packed_base, out)
    assert refused.returncode == 1
    assert _one_line(refused.stderr).startswith(f"error: {state}: damaged (")
    (state.parent / "parts" / "stale.json").write_text("{}")  # of the run before: gone with --force
    forced = remux(packed_base, out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"WARNING: {state}: damaged (" in forced.stderr
    assert json.loads((out / "shards.json").read_text())["shards"]
    assert not (out / ".shardkit" / "remux").exists()


_PROGRESS = {
    "batches": 2,
    "rows_in": 3,
    "rows_out": 2,
    "part_bytes": 10,
    "position": {"shard_idx": 0},
    "columns": ["a"],
    "not_labels": [],
    "finished": False,
}


@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b"[]",
        json.dumps({**_PROGRESS, "rows_in": "3"}).encode(),
        json.dumps({k: v for k, v in _PROGRESS.items() if k != "position"}).encode(),
        json.dumps({**_PROGRESS, "rows_in": -1}).encode(),
        json.dumps({**_PROGRESS, "finished": 1}).encode(),
        json.dumps({**_PROGRESS, "columns": [1]}).encode(),
        json.dumps({**_PROGRESS, "position": 5}).encode(),
    ],
)
def test_damaged_remux_progress_is_discarded_with_a_warning(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    from shardkit.workstate import read_remux_progress

    done = tmp_path / "train.json"
    done.write_bytes(content)
    assert read_remux_progress(str(done)) is None
    assert f"{done}: damaged (" in caplog.text
    assert read_remux_progress(str(tmp_path / "absent.json")) is None
    done.write_text(json.dumps(_PROGRESS))
    assert read_remux_progress(str(done)) == _PROGRESS


_BATCH = {"first": 8, "rows_in": 8, "rows_out": 1, "lines": '{"file_name": "a.jpg"}\n', "columns": [], "not_labels": []}


@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b"[]",
        json.dumps({**_BATCH, "first": -8}).encode(),
        json.dumps({**_BATCH, "rows_out": None}).encode(),
        json.dumps({**_BATCH, "lines": ["a"]}).encode(),
        json.dumps({k: v for k, v in _BATCH.items() if k != "not_labels"}).encode(),
    ],
)
def test_a_damaged_record_of_a_finished_remux_batch_is_discarded_with_a_warning(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    from shardkit.workstate import read_remux_batch

    batch = tmp_path / "00000001.json"
    batch.write_bytes(content)
    assert read_remux_batch(str(batch)) is None  # the batch is transformed again
    assert f"{batch}: damaged (" in caplog.text
    assert read_remux_batch(str(tmp_path / "absent.json")) is None
    batch.write_text(json.dumps(_BATCH))
    assert read_remux_batch(str(batch)) == _BATCH
