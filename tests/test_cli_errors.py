"""Every input error: a message naming file and line, exit code 1, and no shard written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from shardkit.cli import main, pack_shards
from tests.support.corpus import Corpus, shard_files


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(pack_shards, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def pack_rows(corpus: Corpus, rows: list[object], tmp_path: Path, *extra: str) -> tuple[int, str, str, Path]:
    meta = corpus.write_meta(rows, "bad.jsonl")
    out = tmp_path / "out"
    code, stdout, stderr = run(corpus.images, meta, "-o", out, "-j", "1", *extra)
    return code, stdout, stderr, out


def good(corpus: Corpus, i: int) -> dict[str, object]:
    return dict(corpus.rows[i])


CASES = {
    "invalid JSON": (
        '{"file_name": "sub0/img_0000.jpg",',
        "bad.jsonl:2: invalid JSON: Expecting property name enclosed in double quotes (column 35)",
    ),
    "not an object": ('["sub0/img_0000.jpg"]', "bad.jsonl:2: line is not a JSON object (found list)"),
    "missing file_name": ({"caption": "no file"}, "bad.jsonl:2: no 'file_name' (the file's path relative to"),
    "empty file_name": ({"file_name": ""}, "bad.jsonl:2: 'file_name' is empty"),
    "file_name not a string": ({"file_name": 7}, "bad.jsonl:2: 'file_name' holds 7, not a path (a string)"),
    "file not found": ({"file_name": "sub0/nope.jpg"}, "bad.jsonl:2: file not found: "),
    "dot-dot": ({"file_name": "../meta.jsonl.jpg"}, "bad.jsonl:2: file_name '../meta.jsonl.jpg' contains '..'"),
    "absolute": ({"file_name": "/etc/hosts.jpg"}, "bad.jsonl:2: file_name '/etc/hosts.jpg' is absolute"),
    "bad key": ({"file_name": "sub1/img_0001.jpg", "key": "Not-Hex!"}, "bad.jsonl:2: key 'Not-Hex!' does not fit"),
    "column ending in file_name": (
        {"file_name": "sub1/img_0001.jpg", "orig_file_name": "x"},
        "bad.jsonl:2: column 'orig_file_name' ends in 'file_name'",
    ),
    "reserved column": (
        {"file_name": "sub1/img_0001.jpg", "image": "x"},
        "bad.jsonl:2: column 'image' is reserved for the file itself",
    ),
    "no extension": ({"file_name": "noext"}, "bad.jsonl:2: file_name 'noext' has no usable extension"),
    "type conflict": (
        {"file_name": "sub1/img_0001.jpg", "label": "five"},
        "bad.jsonl:2: column 'label' is a string here but an integer on line 1",
    ),
    # Column names the manifest's features could not hold (every reader refuses them there).
    "empty column name": ({"file_name": "sub1/img_0001.jpg", "": 1}, "bad.jsonl:2: column '' is empty; rename it"),
    "column name with a newline": (
        {"file_name": "sub1/img_0001.jpg", "a\nb": 1},
        "bad.jsonl:2: column 'a\\nb' holds '\\n': a column name holds no control character or line break",
    ),
    "column name with U+2028": (
        {"file_name": "sub1/img_0001.jpg", "a\u2028": 1},
        "bad.jsonl:2: column 'a\\u2028' holds",
    ),
    "column name too long": (
        {"file_name": "sub1/img_0001.jpg", "c" * 10_001: 1},
        "is longer than 10000 characters; rename it",
    ),
    "struct field name with a tab": (
        {"file_name": "sub1/img_0001.jpg", "meta": {"a\tb": 1}},
        "bad.jsonl:2: column 'meta': its field 'a\\tb' holds '\\t'",
    ),
    "struct field name empty, in a list": (
        {"file_name": "sub1/img_0001.jpg", "items": [{"": 1}]},
        "bad.jsonl:2: column 'items[]': its field '' is empty",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_input_error_names_file_and_line_and_writes_nothing(corpus: Corpus, tmp_path: Path, case: str) -> None:
    bad, expected = CASES[case]
    (corpus.images / "noext").write_bytes(b"data")
    code, _, stderr, out = pack_rows(corpus, [good(corpus, 0), bad, good(corpus, 2)], tmp_path)
    assert code == 1, stderr
    assert expected in stderr
    assert "no shard was written" in stderr
    assert "--on-error skip" in stderr
    assert shard_files(out) == []
    assert not (out / "shards.json").exists()


def test_empty_file(corpus: Corpus, tmp_path: Path) -> None:
    (corpus.images / "empty.jpg").write_bytes(b"")
    code, _, stderr, out = pack_rows(corpus, [good(corpus, 0), {"file_name": "empty.jpg"}], tmp_path)
    assert code == 1
    assert "bad.jsonl:2: empty file: " in stderr and "empty.jpg" in stderr
    assert shard_files(out) == []


def test_symlink_escaping_images_dir(corpus: Corpus, tmp_path: Path) -> None:
    outside = tmp_path / "secret.jpg"
    outside.write_bytes(b"secret")
    os.symlink(outside, corpus.images / "link.jpg")
    code, _, stderr, out = pack_rows(corpus, [{"file_name": "link.jpg"}], tmp_path)
    assert code == 1
    assert "bad.jsonl:1: file_name 'link.jpg' resolves outside IMAGES_DIR" in stderr
    assert shard_files(out) == []


def test_symlink_inside_images_dir_is_fine(corpus: Corpus, tmp_path: Path) -> None:
    os.symlink(corpus.images / "sub0" / "img_0000.jpg", corpus.images / "alias.jpg")
    code, _, stderr, out = pack_rows(corpus, [{"file_name": "alias.jpg"}], tmp_path)
    assert code == 0, stderr
    assert len(shard_files(out)) == 1


def test_duplicate_key_names_both_lines(corpus: Corpus, tmp_path: Path) -> None:
    rows = [dict(good(corpus, i), key="ab" * 8) for i in (0, 1)]
    rows.insert(1, good(corpus, 5))
    code, _, stderr, out = pack_rows(corpus, rows, tmp_path)
    assert code == 1
    assert f"bad.jsonl:3: duplicate key {'ab' * 8} (first used on line 1)" in stderr
    assert shard_files(out) == []


def test_same_file_twice_without_keys_is_a_duplicate_content_key(corpus: Corpus, tmp_path: Path) -> None:
    code, _, stderr, _ = pack_rows(corpus, [good(corpus, 3), good(corpus, 3)], tmp_path)
    assert code == 1
    name = good(corpus, 3)["file_name"]
    assert f"bad.jsonl:2: file_name {name!r} is named again (first on line 1): a file is published once" in stderr


def test_two_files_with_the_same_bytes_and_no_keys_are_named_as_such(corpus: Corpus, tmp_path: Path) -> None:
    """Scraped data holds copies: without keys, two files of the same bytes get the same key."""
    name = good(corpus, 3)["file_name"]
    (corpus.images / "copy.jpg").write_bytes((corpus.images / name).read_bytes())
    code, _, stderr, _ = pack_rows(corpus, [good(corpus, 0), good(corpus, 3), {"file_name": "copy.jpg"}], tmp_path)
    assert code == 1
    assert (
        f"bad.jsonl:3: file_name 'copy.jpg' has the same bytes as {name!r} on line 2: a file is published once"
        in stderr
    )


def test_same_file_under_two_keys_is_reported_and_skip_keeps_the_first(corpus: Corpus, tmp_path: Path) -> None:
    name = corpus.rows[3]["file_name"]
    folder, base = name.split("/")
    rows = [dict(good(corpus, 3), key="aa" * 8), good(corpus, 4), {"file_name": f"{folder}/./{base}", "key": "bb" * 8}]
    code, _, stderr, out = pack_rows(corpus, rows, tmp_path)
    assert code == 1
    assert (
        f"bad.jsonl:3: file_name '{folder}/./{base}' is the same file as line 1 names ('{name}', key {'aa' * 8}):"
        " a file is published once; drop one of the rows"
    ) in stderr
    assert shard_files(out) == []
    code, stdout, stderr, _ = pack_rows(corpus, rows, tmp_path, "--on-error", "skip", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["rows"] == 2 and json.loads(stdout)["rejected_rows"] == 1


def test_links_to_one_file_are_distinct_rows(corpus: Corpus, tmp_path: Path) -> None:
    """Hard and symbolic links are how some collections share a file between distinct rows."""
    target = corpus.images / corpus.rows[0]["file_name"]
    (corpus.images / "hard.jpg").hardlink_to(target)
    (corpus.images / "soft.jpg").symlink_to(target)
    rows = [dict(good(corpus, 0), key="aa" * 8), {"file_name": "hard.jpg", "key": "bb" * 8}]
    rows.append({"file_name": "soft.jpg", "key": "cc" * 8})
    code, stdout, stderr, _ = pack_rows(corpus, rows, tmp_path, "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["rows"] == 3


def test_check_images_decodes_each_file_and_names_the_bad_ones(corpus: Corpus, tmp_path: Path) -> None:
    whole = (corpus.images / corpus.rows[0]["file_name"]).read_bytes()
    (corpus.images / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (corpus.images / "text.jpg").write_bytes(b"this is not a picture")
    rows = [good(corpus, 0), {"file_name": "truncated.jpg"}, {"file_name": "text.jpg"}, good(corpus, 1)]
    code, _, _, _ = pack_rows(corpus, rows, tmp_path, "--json", "--dry-run")
    assert code == 0  # without --check-images only sizes and paths are checked
    code, _, stderr, out = pack_rows(corpus, rows, tmp_path, "--check-images")
    assert code == 1
    assert "bad.jsonl:2: " in stderr and "truncated.jpg: does not decode as an image: " in stderr
    assert "bad.jsonl:3: " in stderr and "text.jpg: is not an image Pillow can read" in stderr
    assert shard_files(out) == []
    code, stdout, stderr, _ = pack_rows(corpus, rows, tmp_path, "--check-images", "--on-error", "skip", "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["rows"] == 2 and summary["rejected_rows"] == 2
    reasons = [json.loads(line)["reason"] for line in Path(summary["rejects_file"]).read_text().splitlines()]
    assert any("does not decode" in r for r in reasons) and any("not an image" in r for r in reasons)


def test_file_bigger_than_the_cap(corpus: Corpus, tmp_path: Path) -> None:
    (corpus.images / "big.jpg").write_bytes(b"x" * 5000)
    code, _, stderr, out = pack_rows(
        corpus,
        [good(corpus, 0), {"file_name": "big.jpg"}],
        tmp_path,
        "--max-shard-size",
        "4000",
        "--target-shard-size",
        "2000",
    )
    assert code == 1
    assert "bad.jsonl:2: file is 5000 bytes, more than fits in one shard" in stderr
    assert shard_files(out) == []


def test_first_problems_listed_then_a_count(corpus: Corpus, tmp_path: Path) -> None:
    rows = [{"file_name": f"missing_{i}.jpg"} for i in range(30)]
    code, _, stderr, _ = pack_rows(corpus, rows, tmp_path)
    assert code == 1
    assert stderr.count("file not found") == 20
    assert "bad.jsonl:20: file not found" in stderr and "bad.jsonl:21:" not in stderr
    assert "... and 10 more problem(s)" in stderr
    assert "30 problem(s) in the input" in stderr


def test_on_error_skip_packs_the_rest_and_writes_rejects(corpus: Corpus, tmp_path: Path) -> None:
    rows = [good(corpus, 0), "{broken", {"file_name": "sub0/nope.jpg"}, good(corpus, 1), dict(good(corpus, 1))]
    code, stdout, stderr, _ = pack_rows(corpus, rows, tmp_path, "--on-error", "skip", "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["rows"] == 2 and summary["rejected_rows"] == 3
    rejects = [json.loads(line) for line in Path(summary["rejects_file"]).read_text().splitlines()]
    assert [(r["line"], r["reason"].split(":")[0]) for r in sorted(rejects, key=lambda r: r["line"])] == [
        (2, "invalid JSON"),
        (3, "file not found"),
        (5, f"file_name {good(corpus, 1)['file_name']!r} is named again (first on line 4)"),
    ]
    assert rejects[0]["row"] == "{broken"
    assert "skipped 3 bad rows" in stderr


def test_missing_inputs_are_usage_errors(tmp_path: Path) -> None:
    code, _, stderr = run(tmp_path / "nope", tmp_path / "nope.jsonl", "-o", tmp_path / "out")
    assert code == 2
    assert "does not exist" in stderr


def test_bad_size_option_is_a_usage_error(corpus: Corpus, tmp_path: Path) -> None:
    code, _, stderr = run(corpus.images, corpus.meta, "-o", tmp_path / "o", "--max-shard-size", "lots")
    assert code == 2
    assert "'lots' is not a size" in stderr


def test_target_above_cap_is_a_usage_error(corpus: Corpus, tmp_path: Path) -> None:
    code, _, stderr = run(
        corpus.images, corpus.meta, "-o", tmp_path / "o", "--max-shard-size", "1MB", "--target-shard-size", "2MB"
    )
    assert code == 2
    assert "target shard size must be between 1 and the max shard size (1000000)" in stderr


def test_a_smaller_cap_alone_is_enough_the_target_follows_it(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "o"
    code, _, stderr = run(corpus.images, corpus.meta, "-o", out, "--max-shard-size", "3MB", "-q")
    assert code == 0, stderr
    manifest = json.loads((out / "shards.json").read_text())
    assert (manifest["max_shard_bytes"], manifest["target_shard_bytes"]) == (3_000_000, 1_500_000)


def test_empty_metadata_is_an_error(corpus: Corpus, tmp_path: Path) -> None:
    code, _, stderr, _ = pack_rows(corpus, [], tmp_path)
    assert code == 1
    assert "bad.jsonl: the file is empty: no rows to pack" in stderr


def test_shardkit_pack_is_the_same_command(corpus: Corpus, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["pack", str(corpus.images), str(corpus.meta), "-o", str(tmp_path / "o"), "--dry-run"]
    )
    assert result.exit_code == 0, result.stderr
    assert "plan: 40 rows -> " in result.stdout and "dry run: nothing written" in result.stdout
    assert not (tmp_path / "o" / "data").exists()


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_exits_130_promptly_and_the_rerun_completes(make_corpus, tmp_path: Path, jobs: str) -> None:  # type: ignore[no-untyped-def]

    corpus = make_corpus(20)
    out = tmp_path / "out"
    # 3000 rows (keys given) over the 20 files; the highest key, alone in the last shard written,
    # names a file whose read never returns, like a file on a hung network mount (see
    # tests/hang_on_read).
    target = corpus.images / "target.jpg"
    target.write_bytes(b"\xff\xd8 target")
    for i in range(3000):  # distinct file_names (one file may not be published twice), cheap to make
        (corpus.images / f"link_{i}.jpg").symlink_to(corpus.images / corpus.rows[i % 20]["file_name"])
    rows: list[object] = [
        {"file_name": f"link_{i}.jpg", "key": f"{i * 0x9E3779B1 % 0xF0000000:08x}{i:08x}"}
        for i in range(3000)  # keys spread over prefixes 0-e
    ]
    rows.append({"file_name": "target.jpg", "key": "f" * 32})
    meta = corpus.write_meta(rows, "many.jsonl")
    cmd = [
        str(Path(sys.executable).parent / "pack-shards"),
        str(corpus.images),
        str(meta),
        "-o",
        str(out),
        "-j",
        jobs,
        "-q",
        "--prefix-length",  # a shard per first hex digit: the target alone in the last, data/f.zip
        "1",
    ]
    hang = {**os.environ, "PYTHONPATH": str(Path(__file__).parent / "hang_on_read")}
    proc = subprocess.Popen(
        cmd,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**hang, "SHARDKIT_TEST_HANG_ON_READ": target.name},
    )
    try:
        deadline = time.monotonic() + 30
        while len(shard_files(out)) < 15 and time.monotonic() < deadline:  # all but the last shard
            time.sleep(0.01)
        time.sleep(0.3)
        assert proc.poll() is None and not (out / "shards.json").exists()  # stuck on the read
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole process group
        # The read never returns: a packer that waited for it would never exit, so exiting at
        # all (130) is the proof, whatever the machine's load (no time is measured).
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # a failed assertion must not leave a packer blocked
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr == "interrupted; re-run the same command to resume\n"  # no traceback, no leaked semaphores
    assert list((out / ".shardkit" / "tmp").glob("*.partial")) == []
    rerun = subprocess.run([*cmd, "--json"], capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["resumed_shards"] == 15 and summary["written_shards"] == 1
    assert json.loads((out / "shards.json").read_text())["totals"]["rows"] == 3001


def test_os_error_while_writing_is_one_line_naming_the_path(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / ".shardkit").mkdir()  # a shardkit repo (an earlier run's work folder)
    (out / "data").write_text("a file where the data/ folder should be")
    code, _, stderr = run(corpus.images, corpus.meta, "-o", out, "-j", "1")
    assert code == 1
    assert "Traceback" not in stderr
    # Refused by the check of OUT_DIR's own entries before anything is written (the writer's own
    # OSErrors are named too: test_hostile_messages' full disks).
    assert f"error: {out / 'data'}: a file, where shardkit keeps a folder" in stderr
    assert (out / "data").read_text() == "a file where the data/ folder should be"
    assert list((out / ".shardkit" / "tmp").glob("*.partial")) == []


def test_bom_crlf_and_odd_file_names_are_accepted(corpus: Corpus, tmp_path: Path) -> None:
    names = ["with space.jpg", "ünïcode.jpg", "nbsp\u00a0and\u3000fullwidth space.jpg"]
    for i, name in enumerate(names):
        (corpus.images / name).write_bytes((corpus.images / corpus.rows[i]["file_name"]).read_bytes() + b"x")
    lines = [json.dumps({"file_name": n, "caption": f"c{i}"}, ensure_ascii=False) for i, n in enumerate(names)]
    meta = corpus.root / "bom.jsonl"
    meta.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    code, stdout, stderr = run(corpus.images, meta, "-o", tmp_path / "out", "-j", "1", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["rows"] == 3


def test_a_file_name_with_a_line_end_is_one_bad_row(corpus: Corpus, tmp_path: Path) -> None:
    # A control character in a file name would print raw in messages and in --keep-source-path's
    # column: the row is refused with the name quoted, on one line, and nothing is written.
    (corpus.images / "new\nline.jpg").write_bytes((corpus.images / corpus.rows[0]["file_name"]).read_bytes())
    meta = corpus.write_meta([good(corpus, 1), {"file_name": "new\nline.jpg", "caption": "c"}], "nl.jsonl")
    code, _, stderr = run(corpus.images, meta, "-o", tmp_path / "out", "-j", "1")
    assert code == 1
    [line] = [ln for ln in stderr.splitlines() if "nl.jsonl:2:" in ln]
    assert "'new\\nline.jpg'" in line
    assert "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


def test_non_utf8_line_names_line_and_column(corpus: Corpus, tmp_path: Path) -> None:
    before = b'{"file_name": "sub1/img_0001.jpg", "caption": "caf'
    meta = corpus.root / "latin1.jsonl"
    meta.write_bytes(json.dumps(good(corpus, 0)).encode() + b"\n" + before + b'\xe9"}\n')
    code, _, stderr = run(corpus.images, meta, "-o", tmp_path / "out", "-j", "1")
    assert code == 1
    assert f"latin1.jsonl:2: line is not valid UTF-8 (byte 0xe9 at column {len(before) + 1})" in stderr


@pytest.mark.slow
def test_ctrl_c_while_metadata_ranges_are_checked_stops_every_process(corpus: Corpus, tmp_path: Path) -> None:
    # 52 MB of metadata, checked in ranges by two worker processes; the check of one file never
    # returns (tests/hang_on_read), so the check never ends: a run that waited for it would
    # never exit, and exiting at all (130) proves the interrupt stopped it, with no time measured.
    with open(corpus.root / "big.jsonl", "w") as f:
        for i in range(600_000):
            # No key: the check opens every file to hash it, and the hung open is met at once.
            f.write(json.dumps({"file_name": corpus.rows[i % 20]["file_name"], "n": i}) + "\n")
    meta = corpus.root / "big.jsonl"
    cmd = [str(Path(sys.executable).parent / "pack-shards"), str(corpus.images), str(meta), "-o", str(tmp_path / "o")]
    hang = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent / "hang_on_read"),
        "SHARDKIT_TEST_HANG_ON_READ": Path(corpus.rows[7]["file_name"]).name,
    }
    proc = subprocess.Popen(
        [*cmd, "-j", "2", "-q"], stderr=subprocess.PIPE, text=True, start_new_session=True, env=hang
    )
    try:
        deadline = time.monotonic() + 30
        everyone: list[psutil.Process] = []  # the forkserver, the resource tracker, the workers
        workers: list[psutil.Process] = []  # forked by the forkserver
        while len(workers) < 2 and time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error):
                everyone = psutil.Process(proc.pid).children(recursive=True)
                workers = [p for p in everyone if p.ppid() != proc.pid]
            time.sleep(0.05)
        assert len(workers) == 2 and proc.poll() is None  # still checking
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr == "interrupted; re-run the same command to resume\n"  # no traceback, no leaked semaphores
    gone = psutil.wait_procs(everyone, timeout=5)[1] == []
    assert gone  # no worker left behind, stuck or waiting for more work, nor any other process


@pytest.mark.slow
def test_a_write_that_fails_names_the_file_and_leaves_no_partial_file(corpus: Corpus, tmp_path: Path) -> None:
    """A full disk, as the kernel reports it on a write (here a file size limit, EFBIG, which
    fails the same call as ENOSPC does): one line naming the file, nothing half-written left."""
    import resource

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).parent / "pack-shards"), str(corpus.images), str(corpus.meta), "-o", str(out)]
    proc = subprocess.run(
        [*cmd, "-q", "-j", "1", "--target-shard-size", "60KB"],
        preexec_fn=limited,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}/") and lines[0].endswith(": File too large"), (
        proc.stderr
    )
    assert not list(out.rglob("*.partial")) and not (out / "shards.json").exists()
    rerun = subprocess.run(
        [*cmd, "-q", "-j", "1", "--target-shard-size", "60KB"], capture_output=True, text=True, check=False
    )
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads((out / "shards.json").read_text())["totals"]["rows"] == 40


def test_dry_run_prints_the_schema_it_would_publish(corpus: Corpus, tmp_path: Path) -> None:
    rows = [{**good(corpus, i), "tags": ["a", "b"][: i % 3]} for i in range(4)]
    code, stdout, _, out = pack_rows(corpus, rows, tmp_path, "--dry-run")
    assert code == 0 and not out.exists()
    schema = stdout.split("schema (the card's features):\n", 1)[1].split("plan:", 1)[0].splitlines()
    assert [line.split(None, 1) for line in schema] == [
        ["image", "image"],
        ["key", "string"],
        ["caption", "string"],
        ["label", "int64"],
        ["score", "float64"],
        ["tags", '{"list": "string"}'],
    ]
    code, stdout, _, _ = pack_rows(corpus, rows, tmp_path, "--dry-run", "--json")
    assert json.loads(stdout)["features"][-1] == {"name": "tags", "list": "string"}


@pytest.mark.slow
def test_on_duplicate_skip_packs_the_first_of_the_same_bytes_and_names_the_rest(corpus: Corpus, tmp_path: Path) -> None:
    name = good(corpus, 3)["file_name"]
    (corpus.images / "copy.jpg").write_bytes((corpus.images / name).read_bytes())
    rows = [good(corpus, 0), good(corpus, 3), {"file_name": "copy.jpg"}, good(corpus, 5)]
    meta, out = corpus.write_meta(rows, "bad.jsonl"), tmp_path / "out"
    cmd = [str(Path(sys.executable).parent / "pack-shards"), str(corpus.images), str(meta), "-o", str(out), "-j", "1"]
    done = subprocess.run([*cmd, "--on-duplicate", "skip", "--json"], capture_output=True, text=True, check=False)
    code, stdout, stderr = done.returncode, done.stdout, done.stderr  # the warning goes to the real stderr
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["rows"] == 3 and summary["skipped_duplicates"] == 1 and summary["rejected_rows"] == 0
    assert (
        f"bad.jsonl: 1 row(s) left out, each after an earlier row with its key: line 3"
        f" (line 3: file_name 'copy.jpg' has the same bytes as {name!r} on line 2: a file is published once)"
    ) in stderr
    published = [
        json.loads(line) for meta in sorted(out.glob("metadata/*.jsonl")) for line in meta.read_text().splitlines()
    ]
    assert len(published) == 3  # the copy is not in the dataset
    other_error = pack_rows(corpus, [*rows, {"file_name": "nope.jpg"}], tmp_path, "--on-duplicate", "skip", "--force")
    assert other_error[0] == 1 and "bad.jsonl:5: file not found" in other_error[2]  # other bad rows still stop it


@pytest.mark.slow
def test_keep_source_path_publishes_each_rows_input_file_name(corpus: Corpus, tmp_path: Path) -> None:
    """Files are published under their key: --keep-source-path keeps the way back to the input."""
    import shardkit

    code, _, stderr, out = pack_rows(corpus, [good(corpus, i) for i in range(6)], tmp_path, "--keep-source-path")
    assert code == 0, stderr
    rows = list(shardkit.stream(str(out)))
    assert sorted(row["source_path"] for row in rows) == sorted(good(corpus, i)["file_name"] for i in range(6))
    assert all(type(row["source_path"]) is str for row in rows)
    card_features = json.loads((out / "shards.json").read_text())["features"]
    assert {"name": "source_path", "dtype": "string"} in card_features

    plain_out = tmp_path / "plain"
    meta = corpus.write_meta([good(corpus, i) for i in range(6)], "plain.jsonl")
    assert run(corpus.images, meta, "-o", plain_out, "-j", "1")[0] == 0
    assert "source_path" not in next(iter(shardkit.stream(str(plain_out))))  # off by default

    taken = [{**good(corpus, 0), "source_path": "mine"}]
    code, _, stderr, _ = pack_rows(corpus, taken, tmp_path, "--keep-source-path", "--force")
    assert code == 1 and "bad.jsonl:1: column 'source_path' is where --keep-source-path puts file_name" in stderr


def _escaped(path: Path) -> str:
    """A path as messages show it: a line break in it escaped, the message still one line."""
    return str(path).replace("\n", "\\n").replace("\r", "\\r").replace("\x1b", "\\x1b")


@pytest.fixture
def broken_paths(corpus: Corpus, tmp_path: Path) -> tuple[Path, Path]:
    """IMAGES_DIR and META_JSONL whose names hold a line break (and an escape), with a bad row."""
    images = tmp_path / "im\ng\x1b[2J"
    shutil.copytree(corpus.images, images)
    meta = tmp_path / "me\nta\r.jsonl"
    meta.write_text("".join(json.dumps(r) + "\n" for r in [good(corpus, 0), {"file_name": "sub0/nope.jpg"}]))
    return images, meta


def test_paths_with_line_breaks_leave_the_input_error_one_line_each(
    broken_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    images, meta = broken_paths
    code, _, stderr = run(images, meta, "-o", tmp_path / "out\nx", "-j", "1", "-q")
    assert code == 1, stderr
    assert stderr.splitlines() == [
        "error: 1 problem(s) in the input; no shard was written:",
        f"{_escaped(meta)}:2: file not found: {_escaped(images)}/sub0/nope.jpg",
        "Fix the rows above, or pass --on-error skip to pack the rest and list them in a rejects file.",
    ]
    assert not (tmp_path / "out\nx" / "shards.json").exists()


def test_paths_with_line_breaks_leave_the_summary_one_line_each(
    broken_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    images, meta = broken_paths
    out, rejects = tmp_path / "out\nx", tmp_path / "r\nx.jsonl"
    code, stdout, stderr = run(images, meta, "-o", out, "-j", "1", "--on-error", "skip", "--rejects", rejects)
    assert code == 0, stderr
    assert f"\nskipped 1 bad rows; see {_escaped(rejects)}\n" in stderr
    assert f"manifest: {_escaped(out)}/shards.json\n" in stdout
    assert json.loads(rejects.read_text())["line"] == 2 and (out / "shards.json").exists()


def test_a_rejects_path_with_a_line_break_in_a_missing_folder_is_one_line(
    broken_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    images, meta = broken_paths
    rejects = tmp_path / "no\nfolder" / "r.jsonl"
    code, _, stderr = run(
        images, meta, "-o", tmp_path / "out", "-j", "1", "-q", "--on-error", "skip", "--rejects", rejects
    )
    assert code == 2, stderr
    folder = _escaped(rejects.parent)
    assert stderr.splitlines() == [
        f"error: --rejects '{_escaped(rejects)}': its folder '{folder}' does not exist; create it first"
        f" (mkdir -p '{folder}') or choose another --rejects"
    ]
