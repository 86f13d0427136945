"""Nothing of the user's lost, and problem counts that add up (issue 31).

The rejects file is never the input, a file in IMAGES_DIR or OUT_DIR, nor a file shardkit did
not write; it is written whole at the end of the check, and a run that rejects nothing leaves an
existing one as it was. Every problem is counted once by one owner: the summary's count, the
error's "N problem(s)" and the rejects file's lines agree, past any cap, for every kind of problem,
and each rejects line holds the row as the metadata file has it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import pack_shards
from shardkit.pack import PackConfig, pack
from tests.support.corpus import Corpus, shard_files

#: More problems than any earlier cap (1,000 kept problems, 20 shown).
MANY = 1299


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(pack_shards, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def line_of(row: object) -> str:
    return row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)


def write_lines(path: Path, rows: list[object]) -> list[str]:
    """Write rows (dicts, or raw strings) as lines; return the lines as written."""
    lines = [line_of(r) for r in rows]
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return lines


def files(corpus: Corpus, n: int) -> list[str]:
    """``n`` more files in IMAGES_DIR, each with bytes of its own (so each its own content key)."""
    names = []
    for i in range(n):
        name = f"many/f{i:05d}.jpg"
        (corpus.images / name).parent.mkdir(exist_ok=True)
        (corpus.images / name).write_bytes(b"\xff\xd8 not decoded without --check-images " + str(i).encode())
        names.append(name)
    return names


def good(corpus: Corpus, i: int) -> dict[str, object]:
    return dict(corpus.rows[i])


def duplicate_keys(corpus: Corpus) -> tuple[list[object], set[int]]:
    rows: list[object] = [good(corpus, 1), *({**good(corpus, 0), "key": "aa" * 8, "n": i} for i in range(MANY + 1))]
    return rows, set(range(3, MANY + 3))  # the first row with the key (line 2) keeps it


def missing_files(corpus: Corpus) -> tuple[list[object], set[int]]:
    rows: list[object] = [good(corpus, 0), *({"file_name": f"sub0/gone_{i}.jpg"} for i in range(MANY)), good(corpus, 1)]
    return rows, set(range(2, MANY + 2))


def bad_json(corpus: Corpus) -> tuple[list[object], set[int]]:
    rows: list[object] = [
        good(corpus, 0),
        *(f'{{"file_name": "x{i}.jpg", broken' for i in range(MANY)),
        good(corpus, 1),
    ]
    return rows, set(range(2, MANY + 2))


def files_named_twice(corpus: Corpus) -> tuple[list[object], set[int]]:
    name = corpus.rows[0]["file_name"]
    rows: list[object] = [good(corpus, 1), *({"file_name": name, "key": f"{i + 1:016x}"} for i in range(MANY + 1))]
    return rows, set(range(3, MANY + 3))  # line 2 keeps the file


def rows_without_split(corpus: Corpus) -> tuple[list[object], set[int]]:
    rows: list[object] = [{**good(corpus, 0), "split": "train"}, {**good(corpus, 1), "split": "test"}]
    rows += [{"file_name": name} for name in files(corpus, MANY)]
    return rows, set(range(3, MANY + 3))


def mixed(corpus: Corpus) -> tuple[list[object], set[int]]:
    """Each kind at once, interleaved: rows, repeats, duplicates, in one file."""
    rows: list[object] = [good(corpus, 0)]
    bad: set[int] = set()
    for i, name in enumerate(files(corpus, 1100)):
        kind = i % 4
        rows.append({"file_name": name, "key": f"{i + 1:016x}"})  # a good row, each its own key
        if kind == 0:
            rows.append({"file_name": f"gone_{i}.jpg"})
        elif kind == 1:
            rows.append("{not json " + str(i))
        elif kind == 2:
            rows.append({"file_name": name, "key": f"{i + 100_000:016x}"})  # the file again, another key
        else:
            rows.append({"file_name": corpus.rows[2]["file_name"], "key": f"{i + 1:016x}"})  # the key again
        bad.add(len(rows))
    return rows, bad


KINDS = {
    "duplicate keys": duplicate_keys,
    "missing files": missing_files,
    "bad JSON": bad_json,
    "files named twice": files_named_twice,
    "rows without a split": rows_without_split,
    "mixed": mixed,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_count_error_and_rejects_file_agree_past_every_cap(corpus: Corpus, tmp_path: Path, kind: str) -> None:
    rows, bad = KINDS[kind](corpus)
    meta = corpus.root / "bad.jsonl"
    lines = write_lines(meta, rows)
    out = tmp_path / "out"

    code, _, stderr = run(corpus.images, meta, "-o", out, "-j", "1")
    assert code == 1
    assert f"{len(bad)} problem(s) in the input; no shard was written:" in stderr
    assert f"... and {len(bad) - 20} more problem(s)" in stderr
    assert stderr.count(f"{meta}:") == 20  # the first 20 named with file and line
    assert shard_files(out) == []

    rejects = tmp_path / "rejects.jsonl"
    code, stdout, stderr = run(
        corpus.images, meta, "-o", out, "-j", "1", "--on-error", "skip", "--rejects", rejects, "--json"
    )
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["rejected_rows"] == len(bad)
    assert summary["rows"] == len(lines) - len(bad)
    assert f"skipped {len(bad)} bad rows; see {rejects}" in stderr
    listed = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert len(listed) == len(bad)
    assert [r["line"] for r in listed] == sorted(bad)  # one line per bad row, in input order
    for r in listed:
        assert r["row"] == lines[r["line"] - 1]  # the row as the user wrote it
        assert r["reason"]


def test_count_error_and_rejects_agree_when_ranges_are_checked_in_parallel(corpus: Corpus, tmp_path: Path) -> None:
    rows, bad = mixed(corpus)
    meta = corpus.root / "bad.jsonl"
    lines = write_lines(meta, rows)
    rejects = tmp_path / "rejects.jsonl"
    config = PackConfig(
        str(corpus.images),
        str(meta),
        str(tmp_path / "out"),
        on_error="skip",
        rejects_path=str(rejects),
        jobs=2,
        check_range_bytes=8192,  # about ten ranges, each with problems of its own
    )
    summary = pack(config)
    listed = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert summary.rejected_rows == len(listed) == len(bad)
    assert [(r["line"], r["row"]) for r in listed] == [(n, lines[n - 1]) for n in sorted(bad)]


def test_a_row_that_is_not_utf8_keeps_its_bytes_in_the_rejects_file(corpus: Corpus, tmp_path: Path) -> None:
    meta = corpus.root / "bad.jsonl"
    bad_bytes = b'{"file_name": "caf\xe9.jpg"}'
    meta.write_bytes(b"\xef\xbb\xbf" + json.dumps(good(corpus, 0)).encode() + b"\n" + bad_bytes + b"\r\n")
    rejects = tmp_path / "rejects.jsonl"
    code, _, stderr = run(corpus.images, meta, "-o", tmp_path / "out", "--on-error", "skip", "--rejects", rejects)
    assert code == 0, stderr
    (record,) = [json.loads(line) for line in rejects.read_bytes().decode("ascii").splitlines()]
    assert record["line"] == 2 and "not valid UTF-8" in record["reason"]
    assert record["row"].encode("utf-8", "surrogateescape") == bad_bytes


# --- where the rejects file may go ----------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, object]:
    """Every entry under ``root``: a file's bytes, a link's target, a folder or FIFO by its mode
    (a FIFO is never opened: that would block)."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                found[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                found[str(path)] = (path.read_bytes(), st.st_mtime_ns)
            else:
                found[str(path)] = ("mode", st.st_mode)
    return found


def _refused(corpus: Corpus, tmp_path: Path, rejects: Path | str, *, out: Path | None = None) -> str:
    """Pack with ``--rejects rejects``: refused (exit 2, one line), nothing of the user's changed."""
    out = out or tmp_path / "out"
    meta = corpus.root / "bad.jsonl"
    write_lines(meta, [good(corpus, 0), "{broken", good(corpus, 1)])
    before = _snapshot(tmp_path)  # the corpus is in it too
    out_existed = out.exists()
    code, stdout, stderr = run(corpus.images, meta, "-o", out, "--on-error", "skip", "--rejects", rejects)
    assert stdout == ""
    assert code == 2, stderr
    assert stderr.startswith("error: ") and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert f"--rejects {rejects} " in stderr
    assert _snapshot(tmp_path) == before
    assert out.exists() == out_existed
    return stderr


def test_the_metadata_file_is_never_the_rejects_file(corpus: Corpus, tmp_path: Path) -> None:
    meta = corpus.root / "bad.jsonl"
    stderr = _refused(corpus, tmp_path, meta)
    assert f"is the metadata file {meta}" in stderr
    assert meta.read_text().splitlines()[1] == "{broken"  # read, not deleted


def test_a_link_to_the_metadata_file_or_another_spelling_of_it_is_the_metadata_file(
    corpus: Corpus, tmp_path: Path
) -> None:
    meta = corpus.root / "bad.jsonl"
    write_lines(meta, [])
    hard = tmp_path / "hard.jsonl"
    os.link(meta, hard)
    soft = tmp_path / "soft.jsonl"
    soft.symlink_to(meta)
    (tmp_path / "elsewhere").mkdir()
    for rejects in (hard, soft, f"{tmp_path}/elsewhere/../{corpus.root.name}/./bad.jsonl"):
        assert "is the metadata file" in _refused(corpus, tmp_path, rejects)


def test_nothing_in_images_dir_is_ever_the_rejects_file(corpus: Corpus, tmp_path: Path) -> None:
    image = corpus.images / corpus.rows[0]["file_name"]
    link_into = tmp_path / "link.jsonl"
    link_into.symlink_to(image)
    for rejects in (image, corpus.images / "rejects.jsonl", link_into):
        assert "is in IMAGES_DIR" in _refused(corpus, tmp_path, rejects)
    assert not (corpus.images / "rejects.jsonl").exists()


def test_no_file_of_out_dir_is_the_rejects_file_but_the_default_one(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    meta = corpus.root / "bad.jsonl"
    write_lines(meta, [good(corpus, 0), "{broken", good(corpus, 1)])  # as _refused writes it
    code, _, stderr = run(corpus.images, meta, "-o", out, "-j", "1", "--on-error", "skip")
    assert code == 0, stderr
    for rejects in (out / "README.md", out / "shards.json", out / "new.jsonl", out / ".shardkit" / "state.json"):
        stderr = _refused(corpus, tmp_path, rejects, out=out)
        assert f"is in OUT_DIR {out}" in stderr and "push publishes" in stderr
    default = out / ".shardkit" / "rejects.jsonl"
    default.unlink()
    code, _, stderr = run(corpus.images, meta, "-o", out, "--on-error", "skip", "--rejects", default)
    assert code == 0, stderr
    assert json.loads(default.read_text())["row"] == "{broken"


def test_a_file_shardkit_did_not_write_is_never_overwritten(corpus: Corpus, tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"my": "notes"}\n')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened, it would block: never opened
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere")
    for rejects in (notes, fifo, dangling):
        assert "is not a rejects file shardkit wrote" in _refused(corpus, tmp_path, rejects)
    assert notes.read_text() == '{"my": "notes"}\n'


def _pack_skip(corpus: Corpus, tmp_path: Path, rows: list[object], rejects: Path, *extra: str) -> tuple[int, str]:
    meta = corpus.root / "bad.jsonl"
    write_lines(meta, rows)
    code, _, stderr = run(
        corpus.images, meta, "-o", tmp_path / "out", "-j", "1", "--on-error", "skip", "--rejects", rejects, *extra
    )
    return code, stderr


def test_a_rejects_file_of_an_earlier_run_is_replaced_whole_and_kept_when_nothing_is_rejected(
    corpus: Corpus, tmp_path: Path
) -> None:
    rejects = tmp_path / "rejects.jsonl"
    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), "{one", "{two", good(corpus, 1)], rejects)
    assert code == 0, stderr
    assert [json.loads(x)["row"] for x in rejects.read_text().splitlines()] == ["{one", "{two"]

    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), good(corpus, 1), "{three"], rejects)
    assert code == 0, stderr
    assert [json.loads(x)["row"] for x in rejects.read_text().splitlines()] == ["{three"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out", "rejects.jsonl"]  # no temp file left

    before, stamp = rejects.read_bytes(), rejects.stat().st_mtime_ns
    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), good(corpus, 1)], rejects)
    assert code == 0, stderr
    assert "skipped" not in stderr
    assert rejects.read_bytes() == before and rejects.stat().st_mtime_ns == stamp


def test_an_empty_file_may_be_the_rejects_file(corpus: Corpus, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    rejects.touch()
    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), "{one"], rejects)
    assert code == 0, stderr
    assert json.loads(rejects.read_text())["row"] == "{one"


def test_a_run_that_fails_after_the_check_leaves_the_rejects_file_as_it_was(corpus: Corpus, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), "{one"], rejects)
    assert code == 0, stderr
    before = rejects.read_bytes()
    code, stderr = _pack_skip(corpus, tmp_path, [good(corpus, 0), "{two"], rejects, "--class-label", "nope")
    assert code == 2 and "--class-label nope: no row of" in stderr
    assert rejects.read_bytes() == before


def test_every_row_rejected_says_where_they_are_listed(corpus: Corpus, tmp_path: Path) -> None:
    rejects = tmp_path / "rejects.jsonl"
    code, stderr = _pack_skip(corpus, tmp_path, ["{one", {"file_name": "gone.jpg"}], rejects)
    assert code == 1
    assert f"no rows to pack (every row was rejected, 2 problem(s): see {rejects})" in stderr
    assert [json.loads(x)["line"] for x in rejects.read_text().splitlines()] == [1, 2]


def test_the_default_rejects_file_of_an_earlier_run_goes_when_nothing_is_rejected(
    corpus: Corpus, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    meta = corpus.root / "bad.jsonl"
    write_lines(meta, [good(corpus, 0), "{one"])
    code, _, stderr = run(corpus.images, meta, "-o", out, "--on-error", "skip")
    assert code == 0 and (out / ".shardkit" / "rejects.jsonl").exists()
    write_lines(meta, [good(corpus, 0)])
    code, _, stderr = run(corpus.images, meta, "-o", out, "--on-error", "skip")
    assert code == 0, stderr
    assert not (out / ".shardkit" / "rejects.jsonl").exists()  # shardkit's own: it would mislead
