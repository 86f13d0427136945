"""``shardkit remux``: a dataset streamed through a per-batch function into new shards.

Sources: the packed example on disk, the same pushed to the loopback Hub, and a plain
imagefolder read with datasets. The function resizes and mirrors with per-row seeds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from PIL import Image

import shardkit
from tests.remux_functions import SIZE
from tests.support.cli import run_cli
from tests.support.corpus import REPO_ROOT, Corpus, tree_bytes, write_jsonl
from tests.support.readback import expected_rows

SCRIPTS = Path(sys.executable).parent
RESIZE = "tests.remux_functions:resize_and_flip"


def remux(
    source: str | Path, out: Path | str, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> Any:
    env = {**(env or os.environ), "PYTHONPATH": str(REPO_ROOT)}
    if "://" not in str(out):  # the command makes OUT_DIR, not its parents (tests/test_paths.py)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [str(SCRIPTS / "shardkit"), "remux", str(source), str(out), "--json", "-q", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if not check:
        return result
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def read_rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for row in shardkit.stream(str(out)):
        rows.append(row)
    return rows


@pytest.mark.slow
def test_remux_from_disk_resizes_every_image_and_keeps_keys_and_fields(packed_template: Path, tmp_path: Path) -> None:
    out = tmp_path / "small"
    summary = remux(packed_template, out, "--map", RESIZE, "--batch-size", "16", "-j", "2")
    assert summary["source_shards"] == 16 and summary["rows_in"] == summary["rows_out"] == 300
    assert summary["pack"]["rows"] == 300
    verify = subprocess.run([str(SCRIPTS / "shardkit"), "verify", str(out), "--deep", "-q"], capture_output=True)
    assert verify.returncode == 0, verify.stdout

    rows = read_rows(out)
    source = {r[0]: json.loads(r[2]) for r in expected_rows()}
    assert sorted(r["key"] for r in rows) == sorted(source)  # the source keys, kept
    flipped = 0
    for row in rows:
        assert row["image"].size == SIZE and row["image"].format == "JPEG"
        fields = {k: v for k, v in row.items() if k not in ("image", "flipped")}
        assert fields == source[row["key"]]  # every field through, typed as before
        flipped += row["flipped"]
    assert 100 < flipped < 200  # about half, by each row's seed
    assert not (out / ".shardkit" / "remux").exists()  # the staged files are gone once packed


@pytest.mark.slow
def test_same_seed_gives_the_same_bytes_and_another_seed_other_flips(packed_template: Path, tmp_path: Path) -> None:
    first = tmp_path / "a" / "out"  # one name: the card's title is the folder's
    remux(packed_template, first, "--map", RESIZE, "--seed", "7", "-j", "2")
    again = tmp_path / "b" / "out"
    remux(packed_template, again, "--map", RESIZE, "--seed", "7", "-j", "1")
    assert tree_bytes(first) == tree_bytes(again)  # whatever the number of jobs
    other = tmp_path / "c" / "out"
    remux(packed_template, other, "--map", RESIZE, "--seed", "8", "-j", "2")
    flips = {p: {r["key"]: r["flipped"] for r in read_rows(p)} for p in (first, other)}
    assert flips[first] != flips[other] and flips[first].keys() == flips[other].keys()


@pytest.mark.slow
def test_remux_from_the_loopback_hub(packed_template: Path, tmp_path: Path) -> None:
    from tests.test_push import hub_env, pushed_copy

    with pushed_copy(packed_template, tmp_path) as (hub, _):
        env = hub_env(hub.url, tmp_path / "reader-home", token=None)
        summary = remux("tester/yfcc-mini", tmp_path / "out", "--map", RESIZE, "-j", "2", env=env)
        shard_gets = [e for e in hub.log.entries if e[1].endswith(".zip")]
    assert summary["rows_out"] == 300 and summary["source_shards"] == 16
    assert len(shard_gets) == 16  # each source shard read once, front to back
    assert tree_bytes(tmp_path / "out") == tree_bytes(_local_remux(packed_template, tmp_path / "local" / "out"))


def _local_remux(source: Path, out: Path) -> Path:
    remux(source, out, "--map", RESIZE, "-j", "2")
    return out


@pytest.mark.slow
def test_plain_dataset_source_and_a_function_that_changes_rows_and_columns(make_corpus: Any, tmp_path: Path) -> None:
    corpus: Corpus = make_corpus(30)
    # An imagefolder: metadata.jsonl beside the images, read with datasets (not shardkit).
    write_jsonl(corpus.images / "metadata.jsonl", corpus.rows)
    summary = remux(corpus.images, tmp_path / "out", "--map", "tests.remux_functions:two_crops_no_caption")
    assert summary["rows_in"] == 30 and summary["rows_out"] == 60
    rows = read_rows(tmp_path / "out")
    assert len({r["key"] for r in rows}) == 60  # derived keys, unique
    assert sorted(r["half"] for r in rows) == ["left"] * 30 + ["right"] * 30
    assert all("caption" not in r and r["image"].size == (12, 16) for r in rows)
    assert sorted(r["label"] for r in rows) == sorted(2 * [row["label"] for row in corpus.rows])


@pytest.mark.slow
def test_killed_part_way_resumes_to_the_same_bytes(packed_template: Path, tmp_path: Path) -> None:
    """Killed after some batches, a run resumes after the last batch it committed and makes the
    bytes of a run never stopped; on 2 workers as on 1 (batches are read in one process, so the
    output does not depend on --jobs)."""
    slow = ("--map", "tests.remux_functions:slow_identity", "--batch-size", "8")
    plain = tmp_path / "plain" / "out"
    remux(packed_template, plain, *slow, "-j", "1", env={**os.environ, "REMUX_TEST_SLEEP": "0"})

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "REMUX_TEST_SLEEP": "0.1"}
    cmd = [str(SCRIPTS / "shardkit"), "remux", str(packed_template), str(out), *slow, "-j", "2", "-q"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    record = out / ".shardkit" / "remux" / "parts" / "train.json"  # rewritten whole at each commit
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not record.exists() or json.loads(record.read_text())["batches"] < 5):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = json.loads(record.read_text())["rows_in"]
    assert 40 <= committed < 300

    summary = remux(packed_template, out, *slow, "-j", "2", env={**os.environ, "REMUX_TEST_SLEEP": "0"})
    assert summary["resumed_rows"] >= committed and summary["rows_in"] == summary["rows_out"] == 300
    assert tree_bytes(out) == tree_bytes(plain)  # as a run never interrupted


@pytest.mark.slow
def test_batches_finished_behind_a_held_one_are_not_transformed_again_after_a_kill(
    packed_template: Path, tmp_path: Path
) -> None:
    """The first batch held, the other worker finishes batches behind it that the run cannot
    commit yet; killed then, the next run transforms only the held batch and those no worker
    finished, and makes the bytes of a run never stopped."""
    options = ("--map", "tests.remux_functions:logged_holding", "--batch-size", "8")
    keys = [r["key"] for r in read_rows(packed_template)]  # in the order the source gives them
    batches = [keys[i : i + 8] for i in range(0, len(keys), 8)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "REMUX_TEST_RELEASE": str(tmp_path / "release")}
    plain = tmp_path / "plain" / "out"
    remux(packed_template, plain, *options, "-j", "1", env={**env, "REMUX_TEST_LOG": str(tmp_path / "plain.log")})

    out = tmp_path / "out"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    held = {**env, "REMUX_TEST_LOG": str(first_log), "REMUX_TEST_HOLD": batches[0][0]}
    cmd = [str(SCRIPTS / "shardkit"), "remux", str(packed_template), str(out), *options, "-j", "2", "-q"]
    proc = subprocess.Popen(cmd, env=held, start_new_session=True, stderr=subprocess.DEVNULL)
    remux_dir = out / ".shardkit" / "remux"
    deadline = time.monotonic() + 120
    finished_batches = "files/*/train/????????/batch.json"  # (a batch's folder in place: not a .partial one)
    while time.monotonic() < deadline and len(list(remux_dir.glob(finished_batches))) < 5:
        assert proc.poll() is None
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    record = remux_dir / "parts" / "train.json"
    assert not record.exists() or json.loads(record.read_text())["batches"] == 0  # the held batch 0 was never done
    recorded = sorted(p.parent for p in remux_dir.glob(finished_batches))
    assert len(recorded) >= 5 and recorded[0].name != "00000000"
    # One finished batch's folder lost, another's file cut short: each is transformed again.
    lost, cut = recorded[-1], recorded[-2]
    shutil.rmtree(lost)
    staged = next(cut.glob("rows.*"))
    os.truncate(staged, staged.stat().st_size - 10)
    finished = {batches[int(p.name)][0] for p in recorded if p not in (lost, cut)}

    summary = remux(packed_template, out, *options, "-j", "2", env={**env, "REMUX_TEST_LOG": str(second_log)})
    assert summary["rows_in"] == summary["rows_out"] == len(keys)
    called_again = second_log.read_text().split()
    assert sorted(called_again) == sorted({b[0] for b in batches} - finished)  # each batch not finished, once
    assert tree_bytes(out) == tree_bytes(plain)  # as a run never interrupted


@pytest.mark.slow
def test_bad_functions_are_clear_errors(packed_template: Path, tmp_path: Path) -> None:
    """Each in this process: a refusal needs no process of its own."""

    def remux_here(out: str, fn: str) -> subprocess.CompletedProcess[str]:
        spec = fn if ":" in fn else f"tests.remux_functions:{fn}"
        return run_cli("shardkit", "remux", packed_template, tmp_path / out, "-q", "--map", spec)

    missing = remux_here("a", "no_such_module:fn")
    assert missing.returncode == 2 and "cannot import no_such_module" in missing.stderr
    no_fn = remux_here("b", "nope")
    assert no_fn.returncode == 2 and "has no function 'nope'" in no_fn.stderr
    wrong = remux_here("c", "not_a_batch")
    assert wrong.returncode == 1 and "must return a dict of lists" in wrong.stderr and "batch from row" in wrong.stderr
    two = remux_here("d", "two_images")
    assert two.returncode == 1 and "exactly one image" in two.stderr and "thumb" in two.stderr
    bug = remux_here("e", "buggy")
    assert bug.returncode == 1 and "ValueError: my bug" in bug.stderr
    functions = REPO_ROOT / "tests" / "remux_functions.py"
    text = functions.read_text().splitlines()
    raising = next(i for i, line in enumerate(text, 1) if 'raise ValueError(f"my bug' in line)
    calling = next(i for i, line in enumerate(text, 1) if line.strip().startswith("_check_label(batch"))
    assert f"(at {functions}:{raising} in _check_label)" in bug.stderr  # the user's file and line
    assert f'{functions}", line {calling}, in buggy' in bug.stderr  # and the user's frames above it
    nan = remux_here("f", "nan_scores")
    assert nan.returncode == 1 and "column 'scores', item 1 holds NaN, which JSON has no value for" in nan.stderr
    empty = remux_here("g", "empty_images")
    assert empty.returncode == 1 and "the map function returned empty bytes in column 'image'" in empty.stderr
    assert re.search(r"\(split 'train', batch from row \d+, row 0 of its output\)", empty.stderr)
    for name in "abcdefg":
        assert not (tmp_path / name / "data").exists()  # nothing half-written where shards go


def _peak_rss_mb(cmd: list[str], env: dict[str, str]) -> float:
    proc = psutil.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        total = 0
        for p in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    assert proc.returncode == 0
    return peak / 1e6


@pytest.mark.slow
def test_memory_stays_flat_as_the_source_grows(make_corpus: Any, tmp_path: Path) -> None:
    peaks = {}
    for n in (200, 2000):
        corpus: Corpus = make_corpus(n, with_keys=True)
        for row in corpus.rows:  # bigger images, of noise: 2000 rows are about 60 MB of JPEG
            noise = Image.frombytes("RGB", (160, 120), os.urandom(160 * 120 * 3))
            noise.save(corpus.images / row["file_name"], quality=75)
        packed = tmp_path / f"src{n}"
        result = subprocess.run(
            [str(SCRIPTS / "pack-shards"), str(corpus.images), str(corpus.meta), "-o", str(packed), "-q"],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        cmd = [str(SCRIPTS / "shardkit"), "remux", str(packed), str(tmp_path / f"out{n}"), "--map", RESIZE, "-q"]
        peaks[n] = _peak_rss_mb([*cmd, "-j", "1"], {**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    # Ten times the rows: memory grows by less than a few MB (batches and buffers, not rows).
    print("peak RSS by rows:", peaks)
    assert peaks[2000] < peaks[200] * 1.15 + 10, peaks


@pytest.mark.slow
def test_python_api_takes_a_callable(packed_template: Path, tmp_path: Path) -> None:
    from shardkit import RemuxConfig
    from shardkit.remux import remux as remux_api

    def keep_wide(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:  # a filter: fewer rows out
        keep = [i for i, image in enumerate(batch["image"]) if image.size[0] > image.size[1]]
        return {name: [values[i] for i in keep] for name, values in batch.items()}

    summary = remux_api(RemuxConfig(str(packed_template), str(tmp_path / "out"), fn=keep_wide, jobs=1))
    rows = read_rows(tmp_path / "out")
    assert summary.rows_in == 300 and 0 < summary.rows_out == len(rows) < 300
    assert all(r["image"].size[0] > r["image"].size[1] for r in rows)


@pytest.mark.slow
def test_data_files_and_a_plain_hub_dataset_are_sources_too(tmp_path: Path) -> None:
    """Parquet files named by a glob, and a Hub repo of Parquet files with no shards.json: datasets reads both."""
    from tests.hub_server import run_hub_server
    from tests.support.packing import pack_example
    from tests.test_push import hub_env

    parquet = tmp_path / "parquet"
    assert pack_example(parquet, "--format", "parquet", "-q").returncode == 0
    summary = remux(f"{parquet}/data/*.parquet", tmp_path / "a" / "out", "--map", RESIZE)
    assert summary["rows_out"] == 300 and summary["source_shards"] == 16
    files_rows = read_rows(tmp_path / "a" / "out")
    assert {r["image"].size for r in files_rows} == {SIZE}

    plain = tmp_path / "plain"  # what another tool would publish: Parquet files and a card, nothing of shardkit's
    (plain / "data").mkdir(parents=True)
    for shard in (parquet / "data").iterdir():
        shutil.copy(shard, plain / "data" / f"train-{shard.stem}.parquet")
    upload = (
        "import sys; from huggingface_hub import HfApi; api = HfApi();"
        " api.create_repo('tester/plain', repo_type='dataset');"
        " api.upload_folder(repo_id='tester/plain', repo_type='dataset', folder_path=sys.argv[1])"
    )
    with run_hub_server(tmp_path / "hub") as hub:
        # huggingface_hub reads HF_HUB_DISABLE_XET at import: upload from a process that has it set.
        up = subprocess.run(
            [sys.executable, "-c", upload, str(plain)], env=hub_env(hub.url, tmp_path / "up"), capture_output=True
        )
        assert up.returncode == 0, up.stderr[-2000:]
        env = hub_env(hub.url, tmp_path / "home", token=None)
        args = ("--map", RESIZE, "--split", "train", "--config", "default")
        summary = remux("tester/plain", tmp_path / "b" / "out", *args, env=env)
    assert summary["rows_out"] == 300
    assert tree_bytes(tmp_path / "b" / "out") == tree_bytes(tmp_path / "a" / "out")  # same rows, same bytes
