"""A pack's summary says what the run did (issue 32): how many shards it wrote, kept and removed,
the rows and bytes written, and a rate over what was written only; a run with nothing to do says
so, with no rate. A dry run lists, per split, the shards it would write, rewrite or remove and
why, and they are exactly the files the real run then changes on disk.

Real pack runs (pack-shards, in this process through tests/support/cli.py; the one killed part-way
in a process of its own) over the corpus of tests/test_update.py: keys given, ``--prefix-length 1``,
so row ``i`` lands in shard ``i % 16`` and the touched shards are known.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.corpus import write_jsonl
from tests.test_splits_labels import pack_cli
from tests.test_update import KILLED_PACK, SHARDS, Corpus

pytestmark = pytest.mark.slow  # every test here takes over about 3 s, or shares a fixture that does

RATE = re.compile(r"\d MB/s")
#: A dry run's line for one shard: "    rewrite data/7.zip   4 rows  1.2 KB  1 row more (3 -> 4)".
CHANGE_LINE = re.compile(r"^    (write|rewrite|remove)\s+(\S+)\s+(\d+) rows?\s+\S+ \S+  (.+)$")


def run(corpus: Corpus, out: Path, *options: str, meta: Path | None = None) -> str:
    """pack-shards' stdout (it must succeed), run in this process (:func:`pack_cli`): every test here packs often."""
    result = pack_cli(corpus.images, meta or corpus.write(), out, "--prefix-length", "1", "-j", "1", *options)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def run_json(corpus: Corpus, out: Path, *options: str) -> dict[str, Any]:
    return json.loads(run(corpus, out, "--json", *options))  # type: ignore[no-any-return]


def on_disk(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every shard file: its modification time and bytes."""
    return {p.relative_to(out).as_posix(): (p.stat().st_mtime_ns, p.read_bytes()) for p in (out / "data").rglob("*.*")}


def changed_on_disk(before: dict[str, tuple[int, bytes]], after: dict[str, tuple[int, bytes]]) -> dict[str, str]:
    """file -> write, rewrite or remove, as the disk shows it."""
    changes = {f: "remove" for f in before.keys() - after.keys()}
    changes.update({f: "write" for f in after.keys() - before.keys()})
    changes.update({f: "rewrite" for f in before.keys() & after.keys() if before[f] != after[f]})
    return changes


def listed_changes(text: str) -> dict[str, tuple[str, str]]:
    """A dry run's listed shards: file -> (action, why)."""
    found = {}
    for line in text.splitlines():
        if m := CHANGE_LINE.match(line):
            found[m[2]] = (m[1], m[4])
    return found


def summary_line(text: str) -> str:
    """The summary's first line (then splits, manifest)."""
    return text.splitlines()[0]


def test_first_pack_rerun_and_update_say_what_was_written_kept_and_removed(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 48)  # 3 rows a shard
    out = tmp_path / "out"

    first = run_json(corpus, out)
    files = on_disk(out)
    assert len(files) == SHARDS
    assert (first["written_shards"], first["kept_shards"], first["removed_shards"], first["resumed_shards"]) == (
        SHARDS,
        0,
        0,
        0,
    )
    assert first["written_bytes"] == first["bytes"] == sum(len(data) for _, data in files.values())
    assert first["written_rows"] == first["total_rows"] == first["rows"] == 48
    assert first["write_mb_per_s"] is not None and first["write_mb_per_s"] >= 0
    assert [(c["action"], c["why"]) for c in first["changes"]] == [("write", "new")] * SHARDS
    assert {c["file"] for c in first["changes"]} == set(files)

    # Nothing to do: it says so, with the totals and no rate; no shard is touched.
    again = run(corpus, out)
    line = summary_line(again)
    assert re.fullmatch(
        rf"nothing to do: {SHARDS} shards \(48 rows, \d+\.\d KB\) are up to date \(checked in \d+\.\d s\)", line
    ), line
    assert not RATE.search(again)
    assert on_disk(out) == files
    nothing = run_json(corpus, out)
    assert (nothing["written_shards"], nothing["written_bytes"], nothing["written_rows"]) == (0, 0, 0)
    assert (nothing["write_mb_per_s"], nothing["mb_per_s"], nothing["changes"]) == (None, 0.0, [])
    assert nothing["resumed_shards"] == SHARDS and nothing["total_rows"] == 48

    # Every row of shard 3 gone, one of shard 7 gone and two added, one more in 9, a caption changed in b.
    corpus.rows = [r for r in corpus.rows if r["n"] % SHARDS != 3 and r["n"] != 7]
    corpus.rows += [corpus.row(200, 7), corpus.row(201, 7), corpus.row(202, 9)]
    next(r for r in corpus.rows if r["n"] % SHARDS == 11)["caption"] = "a changed caption"
    meta = corpus.write()
    expected = {
        "data/3.zip": ("remove", "no rows in its key range now"),
        "data/7.zip": ("rewrite", "2 rows added, 1 removed (3 -> 4 rows)"),
        "data/9.zip": ("rewrite", "1 row added (3 -> 4 rows)"),
        "data/b.zip": ("rewrite", "1 row changed (3 rows)"),
    }

    dry_text = run(corpus, out, "--update", "--dry-run", meta=meta)
    assert listed_changes(dry_text) == expected, dry_text
    assert "would write 3 of 15 shards (" in dry_text and ", 11 rows), remove 1 shard, keep 12 unchanged\n" in dry_text
    dry = run_json(corpus, out, "--update", "--dry-run")
    assert {c["file"]: (c["action"], c["why"]) for c in dry["changes"]} == expected
    assert on_disk(out) == files  # a dry run changes nothing

    updated = run(corpus, out, "--update", meta=meta)
    after = on_disk(out)
    assert changed_on_disk(files, after) == {f: action for f, (action, _) in expected.items()}
    written = [f for f in after if f in expected]
    written_bytes = sum(len(after[f][1]) for f in written)
    line = summary_line(updated)
    assert line.startswith(f"wrote 3 of 15 shards ({written_bytes / 1000:.1f} KB, 11 rows) in "), line
    assert " over the write phase" in line and RATE.search(line)
    total = sum(len(data) for _, data in after.values())
    assert line.endswith(f"; removed 1 shard; kept 12 unchanged; 47 rows in total ({total / 1000:.1f} KB)"), line
    # The dry run's plan was the real run's: the same files, and as many kept as were untouched.
    kept = [f for f in after if f in files and after[f] == files[f]]
    assert len(kept) == 12 and len(written) == dry["written_shards"] == 3

    # The same update again: nothing to do, and the JSON says why there is no rate.
    unchanged = run_json(corpus, out, "--update")
    assert (unchanged["written_shards"], unchanged["removed_shards"], unchanged["write_mb_per_s"]) == (0, 0, None)
    assert on_disk(out) == after

    # Only a removal: nothing written, so no rate.
    corpus.rows = [r for r in corpus.rows if r["key"][0] != "5"]
    dry_text = run(corpus, out, "--update", "--dry-run")
    assert listed_changes(dry_text) == {"data/5.zip": ("remove", "no rows in its key range now")}, dry_text
    assert "would remove 1 shard, keep 14 unchanged\n" in dry_text
    line = summary_line(run(corpus, out, "--update"))
    assert line.startswith("removed 1 shard, wrote none, in "), line
    assert "; kept 14 unchanged; 44 rows in total (" in line, line
    assert not RATE.search(line)
    assert changed_on_disk(after, on_disk(out)) == {"data/5.zip": "remove"}


def test_a_shard_damaged_on_disk_is_rewritten_and_the_rest_counted_as_already_written(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 32)
    out = tmp_path / "out"
    run(corpus, out)
    (out / "data" / "5.zip").unlink()
    dry = run(corpus, out, "--dry-run")
    assert listed_changes(dry) == {"data/5.zip": ("rewrite", "missing or changed on disk")}, dry
    text = run(corpus, out)
    line = summary_line(text)
    assert line.startswith("wrote 1 of 16 shards (") and ", 2 rows) in " in line, line
    assert f"; {SHARDS - 1} already written by an earlier run; 32 rows in total (" in line


def test_an_update_adding_rows_to_one_split_rewrites_only_its_touched_shard(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 48)
    for row in corpus.rows:
        row["split"] = "train" if row["n"] % 3 else "test"
    out = tmp_path / "out"
    run(corpus, out)
    before = on_disk(out)
    corpus.rows += [{**corpus.row(400 + i, 6), "split": "test"} for i in range(2)]
    dry = run_json(corpus, out, "--update", "--dry-run")
    summary = run_json(corpus, out, "--update")
    after = on_disk(out)
    changed = changed_on_disk(before, after)
    assert changed == {"data/test/6.zip": "rewrite"}
    assert [(c["file"], c["action"]) for c in dry["changes"]] == [(c["file"], c["action"]) for c in summary["changes"]]
    assert [(c["file"], c["action"]) for c in summary["changes"]] == list(changed.items())
    assert summary["changes"][0]["why"] == "2 rows added (1 -> 3 rows)"
    assert (summary["written_shards"], summary["kept_shards"], summary["removed_shards"]) == (1, len(before) - 1, 0)
    assert summary["written_bytes"] == len(after["data/test/6.zip"][1]) and summary["written_rows"] == len(
        [r for r in corpus.rows if r["split"] == "test" and r["key"][0] == "6"]
    )
    assert summary["total_rows"] == 50 and summary["write_mb_per_s"] is not None
    assert dry["write_mb_per_s"] is None and dry["written_bytes"] == summary["written_bytes"]  # ZIP sizes are exact


def test_a_killed_first_pack_resumes_saying_what_was_there_and_what_it_wrote(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 32)
    out = tmp_path / "out"
    args = [str(corpus.images), str(corpus.write()), "-o", str(out), "--prefix-length", "1", "-j", "1", "-q"]
    killed = subprocess.run(
        [sys.executable, str(KILLED_PACK), "one shard written", "0", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr  # after its first shard's record, before the second's
    dry = listed_changes(run(corpus, out, "--dry-run"))
    assert len(dry) == SHARDS - 1 and set(dry.values()) == {("write", "not written yet")}, dry
    line = summary_line(run(corpus, out))
    assert line.startswith(f"wrote {SHARDS - 1} of {SHARDS} shards ("), line
    assert "; 1 already written by an earlier run; 32 rows in total (" in line and RATE.search(line), line


def test_a_file_changed_under_its_key_is_said_so(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 32)
    out = tmp_path / "out"
    run(corpus, out)
    row = next(r for r in corpus.rows if r["key"][0] == "5")
    (corpus.images / row["file_name"]).write_bytes(corpus.image(row) + b"trailing bytes")
    dry = run(corpus, out, "--update", "--dry-run")
    assert listed_changes(dry) == {"data/5.zip": ("rewrite", "files changed (same keys and fields)")}, dry


def test_an_update_with_splits_and_a_new_class_name_says_why_each_parquet_shard_is_rewritten(tmp_path: Path) -> None:
    """A Parquet file holds the class names: a new one rewrites every shard, and the summary says
    which for new rows and which only for the names; a split with no rows left is removed."""
    corpus = Corpus(tmp_path / "in", 48)
    for row in corpus.rows:
        row.update(split="train" if row["n"] % 3 else "test", caption="odd" if row["n"] % 2 else "even")
    out = tmp_path / "out"
    options = ("--format", "parquet", "--class-label", "caption")
    first = run_json(corpus, out, *options)
    before = on_disk(out)
    assert first["written_shards"] == len(before) and len(first["splits"]) == 2

    corpus.rows = [r for r in corpus.rows if r["split"] == "train"]
    # (a line end in a class name is shown escaped: the listing stays one line a shard)
    corpus.rows.append({**corpus.row(300, 4), "split": "train", "caption": "a new\nclass"})
    meta = corpus.write()
    dry_text = run(corpus, out, *options, "--update", "--dry-run", meta=meta)
    listed = listed_changes(dry_text)
    test_shards = {f for f in before if f.startswith("data/test/")}
    train_shards = {f for f in before if f.startswith("data/train/")}
    assert listed == {
        **{f: ("remove", "split test has no rows now") for f in test_shards},
        **{f: ("rewrite", "new class names: a new\\nclass") for f in train_shards - {"data/train/4.parquet"}},
        "data/train/4.parquet": ("rewrite", "1 row added (2 -> 3 rows)"),
    }, dry_text
    assert "  split test: no rows now\n" in dry_text

    summary = run_json(corpus, out, *options, "--update")
    after = on_disk(out)
    assert changed_on_disk(before, after) == {f: action for f, (action, _) in listed.items()}
    assert {c["file"]: (c["action"], c["why"]) for c in summary["changes"]} == listed
    assert (summary["written_shards"], summary["kept_shards"], summary["removed_shards"]) == (
        len(train_shards),
        0,
        len(test_shards),
    )
    assert summary["written_rows"] == summary["total_rows"] == 33


def test_a_dry_run_lists_at_most_20_shards_a_split_then_how_many_more(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 64)
    out = tmp_path / "never"
    text = run(corpus, out, "--prefix-length", "2", "--dry-run")
    plan = json.loads(run(corpus, out, "--prefix-length", "2", "--dry-run", "--json"))["plan"]
    assert len(plan) > 20
    assert len(listed_changes(text)) == 20
    assert f"    ... and {len(plan) - 20} more\n" in text
    assert f"would write {len(plan)} shards (" in text and "dry run: nothing written" in text
    assert not out.exists()


def test_skipped_rows_are_in_the_summary(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "in", 16)
    rows = [*corpus.rows, {"file_name": "missing.jpg", "key": "f" * 16}]
    meta = write_jsonl(tmp_path / "bad.jsonl", rows)
    text = run(corpus, tmp_path / "out", "--on-error", "skip", meta=meta)
    assert summary_line(text).endswith("; skipped 1 bad row"), text
