"""Messages that name the cause, not the symptom, through ``pack-shards`` as a new author meets it.

A metadata file that is not JSON Lines (CSV, a JSON array, Parquet, UTF-16...), or whose every
row has the same problem (the file column named ``path``, absolute paths, Windows paths), is
refused in ONE line naming the file and what to do, exit code 1, nothing written; the fix it
gives is run here and must work. NaN names its column and line. A split that looks like a typo
is a warning (stderr, one line each) and the pack goes on.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardkit import metadata
from shardkit.check import split_warnings
from tests.support.cli import run_cli
from tests.support.corpus import tiny_image, write_jsonl

PACK_SHARDS = str(Path(sys.executable).parent / "pack-shards")
YFCC = Path(__file__).resolve().parent.parent / "example_datasets" / "yfcc-mini"
ROWS = 12


@pytest.fixture
def yfcc(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """IMAGES_DIR with the first rows' photos of example_datasets/yfcc-mini, and those rows."""
    rows = [json.loads(line) for line in (YFCC / "metadata.jsonl").read_text().splitlines()[:ROWS]]
    images = tmp_path / "images"
    for row in rows:
        (images / row["file_name"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(YFCC / "images" / row["file_name"], images / row["file_name"])
    return images, rows


def pack(images: Path, meta: Path, *extra: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`pack-shards -q -j 1`, in this process (tests/support/cli.py): the causes below are many, each a pack."""
    return run_cli("pack-shards", images, meta, "-o", out or meta.parent / "out", "-q", "-j", "1", *extra)


def refused(images: Path, meta: Path, *extra: str) -> str:
    """Pack, which must refuse in one line with exit code 1 and write nothing; the line."""
    out = meta.parent / "out"
    proc = pack(images, meta, *extra, out=out)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "--on-error skip" not in lines[0] or "would pack nothing" in lines[0]
    assert not out.exists()  # nothing written: OUT_DIR is not even made
    return lines[0]


def run_fix(line: str) -> None:
    """Run the shell command the message ends with (python -c ... or iconv ...)."""
    start = line.find("python -c ") if "python -c " in line else line.index("iconv ")
    subprocess.run(["bash", "-c", line[start:]], check=True, timeout=120)


def packs(images: Path, meta: Path, rows: int = ROWS) -> None:
    proc = pack(images, meta, "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == rows


# --- a file that is not JSON Lines -----------------------------------------------------------


def _csv(rows: list[dict[str, Any]], delimiter: str = ",") -> bytes:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]), delimiter=delimiter, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue().encode()


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


#: (case, file name, its bytes from the rows, the words of the line, whether it gives a fix)
NOT_JSON_LINES = [
    ("CSV", "meta.csv", _csv, "looks like CSV, not JSON Lines: its first line is a header ('file_name', 'key',", True),
    ("CSV named .jsonl", "meta.jsonl", _csv, "looks like CSV", True),
    ("TSV", "meta.tsv", lambda r: _csv(r, "\t"), "looks like TSV, not JSON Lines", True),
    ("gzipped CSV", "meta.jsonl.gz", lambda r: gzip.compress(_csv(r)), "looks like CSV", True),
    ("CSV with a UTF-8 BOM", "meta.csv", lambda r: b"\xef\xbb\xbf" + _csv(r), "looks like CSV", True),
    ("JSON array, indented", "meta.json", lambda r: json.dumps(r, indent=2).encode(), "a JSON array", True),
    ("JSON array, one line", "meta.json", lambda r: json.dumps(r).encode(), "a JSON array", True),
    (
        "one indented object",
        "meta.json",
        lambda r: json.dumps(r[0], indent=2).encode(),
        "JSON written over several lines (line 1 is an object's start), not JSON Lines",
        True,
    ),
    ("Parquet", "meta.parquet", _parquet, "a Parquet file, not JSON Lines", True),
    ("Parquet named .jsonl", "meta.jsonl", _parquet, "a Parquet file", True),
    (
        "UTF-16 with a BOM",
        "meta.jsonl",
        lambda r: "".join(json.dumps(x) + "\n" for x in r).encode("utf-16"),
        "UTF-16 text",
        True,
    ),
    (
        "UTF-16 without a BOM",
        "meta.jsonl",
        lambda r: "".join(json.dumps(x) + "\n" for x in r).encode("utf-16-le"),
        "UTF-16 text",
        True,
    ),
    ("empty", "meta.jsonl", lambda r: b"", "the file is empty: no rows to pack", False),
    ("a spreadsheet (ZIP)", "meta.xlsx", lambda r: _zip(), "a ZIP archive (or a spreadsheet such as .xlsx)", False),
]


def _zip() -> bytes:
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w") as z:
        z.writestr("xl/workbook.xml", "<workbook/>")
    return sink.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "make", "words", "fix"), [c[1:] for c in NOT_JSON_LINES], ids=[c[0] for c in NOT_JSON_LINES]
)
def test_a_file_that_is_not_json_lines_is_one_line_saying_what_it_is_and_the_fix_works(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, name: str, make: Any, words: str, fix: bool
) -> None:
    images, rows = yfcc
    meta = tmp_path / name
    meta.write_bytes(make(rows))
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: {words}"), line
    if not fix:
        return
    run_fix(line)
    converted = Path(shlex.split(line.rsplit(" > ", 1)[1])[0])
    assert converted.parent == tmp_path and converted.suffix == ".jsonl" and converted != meta
    packs(images, converted, 1 if "several lines" in words else ROWS)
    if "looks like" in words:
        assert_types_kept(rows, converted)


def assert_types_kept(rows: list[dict[str, Any]], converted: Path) -> None:
    """The CSV fix's rows keep the numbers, nulls and date-time text of the rows the CSV was made of."""
    back = [json.loads(line) for line in converted.read_text(encoding="utf-8").splitlines()]
    assert len(back) == len(rows)
    for row, got in zip(rows, back, strict=True):
        assert type(got["photoid"]) is int and got["photoid"] == row["photoid"]
        assert got["latitude"] == row["latitude"] and got["accuracy"] == row["accuracy"]  # null stays null
        assert got["datetaken"] == row["datetaken"]  # "2006-10-07 16:08:18.0", not a timestamp's text
        assert got["file_name"] == row["file_name"] and got["title"] == row["title"]
    assert {type(got["latitude"]) for got in back} == {float, type(None)}
    # Types are inferred per column: a column of digits becomes numbers (see the leading-zero test).
    assert [got["dateuploaded"] for got in back] == [int(row["dateuploaded"]) for row in rows]


def test_a_csv_checked_in_ranges_by_workers_is_one_line(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = tmp_path / "big.csv"
    meta.write_bytes(_csv(rows * 2000))  # about 5 MB: checked in ranges, on two processes
    assert meta.stat().st_size > 4 << 20
    # In a process of its own: the workers' stderr is then the run's (not this process's).
    args = [PACK_SHARDS, str(images), str(meta), "-o", str(tmp_path / "out"), "-q", "-j", "2"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [proc.stderr.splitlines()[0]], proc.stderr
    assert proc.stderr.startswith(f"error: {meta}: looks like CSV")


@pytest.mark.slow
@pytest.mark.parametrize(
    "first",
    ['{"file_name": "x.jpg",', "file_name,caption", "[1, 2"],
    ids=["a broken first line", "a CSV-like first line", "an array's start"],
)
def test_json_lines_with_a_bad_first_line_is_not_taken_for_another_format(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, first: str
) -> None:
    """Only what the first lines show for sure is a file's problem: a JSON object on line 2 makes
    it JSON Lines with a bad line, which --on-error skip may leave out."""
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", [first, *rows])
    proc = pack(images, meta)
    assert proc.returncode == 1
    assert f"{meta}:1: invalid JSON" in proc.stderr and "--on-error skip" in proc.stderr
    proc = pack(images, meta, "--on-error", "skip", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == ROWS


def test_a_first_row_longer_than_the_part_looked_at_packs(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The file's start is judged by whole lines only: a first row of 100 KB is a row."""
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", [dict(rows[0], description="x" * 100_000), *rows[1:]])
    packs(images, meta)


@pytest.mark.parametrize(
    "head",
    [b'{"file_name": "a.jpg", "cap', b"[1, 2", b'{"file_name": "a.jpg", "x": "' + b"y" * 70_000],
    ids=["a pipe's first write", "an array's first bytes", "a long first line"],
)
def test_the_start_of_a_line_is_not_judged(head: bytes) -> None:
    assert metadata.not_json_lines(head[: metadata.HEAD_BYTES], "IN > OUT") is None


def test_json_lines_of_arrays_is_one_line(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    meta = tmp_path / "meta.jsonl"
    meta.write_text('["a.jpg", "a cat"]\n["b.jpg", "a dog"]\n')
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: no line is a JSON object (2 of 2 rows); line 1: line is not a JSON object")


@pytest.mark.slow
def test_semicolon_csv_is_csv(yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    images, rows = yfcc
    meta = tmp_path / "meta.csv"
    meta.write_bytes(_csv(rows, ";"))
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: looks like CSV") and "delimiter=';'" in line
    run_fix(line)
    packs(images, tmp_path / "meta.jsonl")
    assert_types_kept(rows, tmp_path / "meta.jsonl")


@pytest.mark.slow
def test_csv_fix_infers_types_per_column_leading_zeros_included(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The CSV fix infers each column's type: a column of zip codes with leading zeros becomes
    numbers (the zeros are lost, as the message warns), a column with one non-digit cell stays text,
    an empty cell is null, a date stays its text; --dry-run shows the packed schema to check."""
    images, rows = yfcc
    extra = [
        {"zip": f"{i:05d}", "code": "007" if i else "A7", "empty": "", "day": f"2005-04-{i + 1:02d}", "ok": "true"}
        for i in range(ROWS)
    ]
    meta = tmp_path / "meta.csv"
    meta.write_bytes(_csv([{"file_name": r["file_name"], **e} for r, e in zip(rows, extra, strict=True)]))
    run_fix(refused(images, meta))
    back = [json.loads(line) for line in (tmp_path / "meta.jsonl").read_text().splitlines()]
    assert [r["zip"] for r in back] == list(range(ROWS))  # "00003" -> 3: the leading zeros are gone
    assert [r["code"] for r in back] == ["A7"] + ["007"] * (ROWS - 1)  # a text cell keeps the column text
    assert all(r["empty"] is None and r["ok"] is True for r in back)
    assert [r["day"] for r in back] == [e["day"] for e in extra]
    proc = pack(images, tmp_path / "meta.jsonl", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    features = {f["name"]: f["dtype"] for f in json.loads(proc.stdout)["features"]}
    assert (features["zip"], features["code"], features["ok"], features["day"]) == ("int64", "string", "bool", "string")


def test_a_list_of_file_names_is_one_line(yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    images, rows = yfcc
    meta = tmp_path / "files.txt"
    meta.write_text("".join(r["file_name"] + "\n" for r in rows))
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: no line is JSON ({ROWS} of {ROWS} rows); line 1: invalid JSON")
    assert "META_JSONL holds one JSON object per line" in line


def test_latin1_file_is_one_line(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    meta = tmp_path / "meta.jsonl"
    meta.write_bytes(b'{"file_name": "caf\xe9.jpg"}\n{"file_name": "th\xe9.jpg"}\n')
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: no line is UTF-8 text (2 of 2 rows); line 1: line is not valid UTF-8")
    assert "iconv -f LATIN1 -t UTF-8" in line


# --- the file column under another name ------------------------------------------------------


def _renamed(rows: list[dict[str, Any]], column: str, prefix: str = "") -> list[dict[str, Any]]:
    return [{column: prefix + r["file_name"], **{k: v for k, v in r.items() if k != "file_name"}} for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize(
    "column", ["path", "image", "file", "filename", "filepath", "img", "image_path", "file_path", "audio", "src_rel"]
)
def test_the_file_column_under_another_name_is_one_line_naming_it_and_the_fix_works(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, column: str
) -> None:
    """A column whose values are files in IMAGES_DIR is named, whatever its name."""
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", _renamed(rows, column))
    line = refused(images, meta)
    assert line.startswith(
        f"error: {meta}: no row has 'file_name' (the file's path relative to IMAGES_DIR) ({ROWS} of {ROWS} rows);"
        f" line 1: column {column!r} looks like it ({rows[0]['file_name']!r} is a file in IMAGES_DIR):"
        " rename it to file_name, e.g. python -c"
    ), line
    run_fix(line)
    packs(images, tmp_path / "meta.fixed.jsonl")


def test_a_file_column_by_name_whose_values_are_not_files_is_named_as_the_weaker_sign(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", _renamed(rows, "image_path", "elsewhere/"))
    line = refused(images, meta)
    assert (
        f"line 1: column 'image_path' looks like it ('elsewhere/{rows[0]['file_name']}' is not a file in IMAGES_DIR,"
        " though): rename it to file_name" in line
    )


def test_rows_without_any_file_column_list_their_columns(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"caption": "a cat", "id": i} for i in range(30)])
    line = refused(images, meta)
    assert line == (
        f"error: {meta}: no row has 'file_name' (the file's path relative to IMAGES_DIR) (30 of 30 rows);"
        " line 1: the row's columns: 'caption', 'id'"
    )


def test_some_rows_without_file_name_are_named_each_with_the_hint(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Some rows fine, some with the column misnamed: per row (skip would pack the rest)."""
    images, rows = yfcc
    mixed = [r if i % 2 else _renamed([r], "path")[0] for i, r in enumerate(rows)]
    meta = write_jsonl(tmp_path / "meta.jsonl", mixed)
    proc = pack(images, meta)
    assert proc.returncode == 1
    named = [line for line in proc.stderr.splitlines() if line.startswith(f"{meta}:")]
    assert len(named) == ROWS // 2
    assert named[0] == (
        f"{meta}:1: no 'file_name' (the file's path relative to IMAGES_DIR); column 'path' looks like it"
        f" ({rows[0]['file_name']!r} is a file in IMAGES_DIR): rename it to file_name"
    )
    assert "--on-error skip" in proc.stderr.splitlines()[-1]


def test_file_name_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(tiny_image(1))
    meta = write_jsonl(tmp_path / "meta.jsonl", [{"file_name": "a.jpg"}, {"file_name": None}, {"file_name": ["a.jpg"]}])
    proc = pack(images, meta)
    assert proc.returncode == 1
    assert f"{meta}:2: 'file_name' holds null, not a path (a string)" in proc.stderr
    assert f"{meta}:3: 'file_name' holds [\"a.jpg\"], not a path (a string)" in proc.stderr


def test_with_on_error_skip_every_row_rejected_for_one_cause_is_that_cause(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", _renamed(rows, "path"))
    rejects = tmp_path / "rejects.jsonl"
    proc = pack(images, meta, "--on-error", "skip", "--rejects", str(rejects))
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"error: {meta}: no row has 'file_name'") and "column 'path' looks like it" in line
    assert line.endswith(f"; every row was rejected: see {rejects}")
    assert len(rejects.read_text().splitlines()) == ROWS


def test_no_skip_advice_when_no_row_can_be_packed(tmp_path: Path) -> None:
    """Every row bad, for different causes: --on-error skip would pack nothing, so it is not advised."""
    images = tmp_path / "images"
    images.mkdir()
    (images / "a").write_bytes(b"x")
    meta = write_jsonl(tmp_path / "meta.jsonl", ["{broken", {"file_name": "a"}, {"file_name": "/abs.jpg"}])
    proc = pack(images, meta)
    assert proc.returncode == 1
    assert "--on-error skip to pack the rest" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "No row can be packed as it is (so --on-error skip would pack nothing): fix the rows above."
    )
    assert not (tmp_path / "out").exists()


# --- NaN and infinities ----------------------------------------------------------------------

NON_FINITE = [
    ("bare NaN", '"lat": NaN', "column 'lat' holds NaN"),
    ("bare Infinity", '"lat": Infinity', "column 'lat' holds Infinity"),
    ("bare -Infinity", '"lon": -Infinity', "column 'lon' holds -Infinity"),
    ("a number past a float", '"acc": 1e999', "column 'acc' holds Infinity (or a number past 1e308)"),
    ("in a struct", '"geo": {"lat": 1.5, "lon": NaN}', "column 'geo', field 'lon' holds NaN"),
    ("in a list", '"scores": [0.5, 1.0, NaN]', "column 'scores', item 2 holds NaN"),
    ("in a list of structs", '"boxes": [{"x": 1.0}, {"x": -Infinity}]', "column 'boxes', item 1, field 'x' holds"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("value", "words"), [c[1:] for c in NON_FINITE], ids=[c[0] for c in NON_FINITE])
def test_nan_and_infinity_name_the_column_and_line(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, value: str, words: str
) -> None:
    images, rows = yfcc
    lines = [json.dumps(r) for r in rows]
    lines[3] = lines[3][:-1] + ", " + value + "}"
    meta = tmp_path / "meta.jsonl"
    meta.write_text("\n".join(lines) + "\n")
    proc = pack(images, meta)
    assert proc.returncode == 1
    named = [line for line in proc.stderr.splitlines() if line.startswith(f"{meta}:")]
    assert named == [f"{meta}:4: {words}" + named[0].split(words, 1)[1]], proc.stderr
    assert named[0].endswith("which JSON has no value for: write null for a missing value")
    assert not (tmp_path / "out").exists()


# --- splits that look like typos -------------------------------------------------------------


def _split_rows(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    return [dict(r, split=name) for r, name in zip(rows, names, strict=True)]


@pytest.mark.slow
def test_a_split_close_to_another_is_a_warning_and_the_pack_goes_on(tmp_path: Path) -> None:
    corpus_rows, images = _many_images(tmp_path, 40)
    names = ["train"] * 30 + ["validation"] * 8 + ["valid"] + ["trian"]
    meta = write_jsonl(tmp_path / "meta.jsonl", _split_rows(corpus_rows, names))
    for extra in (["--dry-run"], []):
        proc = pack(images, meta, *extra, out=tmp_path / "out")
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.splitlines() == [
            f"WARNING: {meta}: split 'trian' (1 row(s), first on line 40) is close to split 'train' (30 rows):"
            " each name is a split of its own; if they are one split, give its rows one name",
            f"WARNING: {meta}: split 'valid' (1 row(s), first on line 39) is close to split 'validation' (8 rows):"
            " each name is a split of its own; if they are one split, give its rows one name",
        ]
    manifest = json.loads((tmp_path / "out" / "shards.json").read_text())
    assert {s["split"] for s in manifest["shards"]} == {"train", "validation", "valid", "trian"}


@pytest.mark.slow
def test_a_split_of_very_few_rows_is_a_warning(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(1201):  # (the files are not decoded: any bytes do)
        (images / f"{i:04d}.jpg").write_bytes(b"file %d" % i)
        rows.append({"file_name": f"{i:04d}.jpg", "split": "train" if i < 1200 else "holdout"})
    meta = write_jsonl(tmp_path / "meta.jsonl", rows)
    proc = pack(images, meta, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"WARNING: {meta}: split 'holdout' (1 row(s), first on line 1201) has very few rows beside the largest"
        " split (1200): a typo in its split?"
    ]


def test_usual_splits_give_no_warning(tmp_path: Path) -> None:
    rows, images = _many_images(tmp_path, 30)
    names = ["train"] * 20 + ["validation"] * 5 + ["test"] * 5
    meta = write_jsonl(tmp_path / "meta.jsonl", _split_rows(rows, names))
    proc = pack(images, meta, "--dry-run")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_close_split_names() -> None:
    close = [("valid", "validation"), ("val", "validation"), ("dev", "valid"), ("train", "training"), ("tset", "test")]
    close += [
        ("trian", "train"),
        ("eval", "test"),
        ("Train", "train"),
        ("test_set", "testset"),
        ("validaton", "validation"),
    ]
    apart = [("train", "test"), ("train1", "train2"), ("fold_0", "fold_1"), ("val", "test"), ("a", "b"), ("cat", "car")]

    def warned(smaller: str, larger: str) -> bool:  # neither has few rows: a warning says they are close
        return split_warnings({smaller: 50, larger: 60}, {smaller: 1, larger: 2}) != []

    assert all(warned(a, b) and warned(b, a) for a, b in close)
    assert not any(warned(a, b) for a, b in apart)


def test_split_warnings_name_the_smaller_split_once() -> None:
    warnings = split_warnings({"validation": 50, "valid": 50, "train": 200}, {"validation": 3, "valid": 9, "train": 1})
    assert len(warnings) == 1 and warnings[0].startswith("split 'valid' (50 row(s), first on line 9) is close to")
    assert split_warnings({"train": 5, "test": 5}, {"train": 1, "test": 2}) == []


def _many_images(tmp_path: Path, n: int) -> tuple[list[dict[str, Any]], Path]:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(n):
        (images / f"{i:03d}.jpg").write_bytes(tiny_image(i))
        rows.append({"file_name": f"{i:03d}.jpg", "caption": f"photo {i}"})
    return rows, images


# --- file_name as a YFCC-like export gives it ------------------------------------------------


def test_absolute_paths_into_images_dir_are_one_line_with_the_relative_path(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", [dict(r, file_name=f"{images}/{r['file_name']}") for r in rows])
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: every file_name is absolute ({ROWS} of {ROWS} rows); line 1: file_name")
    assert line.endswith(f"is absolute; give it relative to IMAGES_DIR: {rows[0]['file_name']!r}")


def test_windows_paths_are_one_line_naming_the_file_they_mean(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", [dict(r, file_name=r["file_name"].replace("/", "\\")) for r in rows])
    line = refused(images, meta)
    assert line.startswith(f"error: {meta}: every file_name separates folders with '\\' ({ROWS} of {ROWS} rows);")
    assert line.endswith(
        f"(file_name separates folders with '\\', as Windows does, and {rows[0]['file_name']!r} is a file; use '/')"
    )


def test_names_in_another_case_are_one_line_naming_the_file(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    images, rows = yfcc
    meta = write_jsonl(tmp_path / "meta.jsonl", [dict(r, file_name=r["file_name"][:-4] + ".JPG") for r in rows])
    line = refused(images, meta)
    base = os.path.basename(rows[0]["file_name"])
    assert line.startswith(f"error: {meta}: every file_name differs in case from its file ({ROWS} of {ROWS} rows);")
    assert line.endswith(f"({base!r} is there: file names are case-sensitive)")


def test_urls_are_one_line(yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    images, rows = yfcc
    urls = [dict(r, file_name="http://farm1.staticflickr.com/" + r["file_name"]) for r in rows]
    line = refused(images, write_jsonl(tmp_path / "meta.jsonl", urls))
    assert f"every file_name is a URL ({ROWS} of {ROWS} rows)" in line
    assert line.endswith("(file_name is a URL; shardkit packs files: download them into IMAGES_DIR first)")


def test_a_row_naming_a_folder_says_so(yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    images, rows = yfcc
    folder = os.path.dirname(rows[2]["file_name"])
    meta = write_jsonl(tmp_path / "meta.jsonl", [rows[0], rows[1], dict(rows[2], file_name=folder + ".jpg")])
    (images / (folder + ".jpg")).mkdir()
    proc = pack(images, meta)
    assert proc.returncode == 1
    assert f"{meta}:3: file_name {folder + '.jpg'!r} is a folder, not a file: " in proc.stderr


def test_bzip2_csv_is_still_named_by_its_compression(yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    images, rows = yfcc
    meta = tmp_path / "meta.jsonl"
    meta.write_bytes(bz2.compress(_csv(rows)))
    assert ": bzip2-compressed data, not JSON lines" in refused(images, meta)


@pytest.mark.slow
@pytest.mark.parametrize("off", ["parent given", "file_names start with the folder's name"])
def test_images_dir_one_level_off_is_one_line_naming_the_folder_to_give(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, off: str
) -> None:
    moved, rows = yfcc
    images = tmp_path / "set" / "images"  # (OUT_DIR, beside meta.jsonl, is then outside "set")
    images.parent.mkdir()
    moved.rename(images)
    if off == "parent given":  # file_names relative to images/, the folder that holds it given
        given, meta_rows = images.parent, rows
    else:  # file_names that start with "images/", IMAGES_DIR itself given
        given, meta_rows = images, [{**row, "file_name": f"images/{row['file_name']}"} for row in rows]
    meta = tmp_path / "meta.jsonl"
    write_jsonl(meta, meta_rows)
    line = refused(given, meta)
    folder = images if off == "parent given" else images.parent
    assert line.startswith(f"error: {meta}: no file the metadata names is under IMAGES_DIR {str(given)!r}")
    assert f"({ROWS} of {ROWS} rows); line 1: " in line
    assert line.endswith(f"is under {str(folder)!r}, as every file_name looked at is: give that folder as IMAGES_DIR")
    packs(folder, meta)  # and given that folder, every row packs


@pytest.mark.parametrize(
    "line", ["{'file_name': 'a.jpg'}", '{"file_name": "a.jpg", "x": 1,}'], ids=["single quotes", "trailing comma"]
)
def test_rows_that_are_almost_json_are_bad_rows_not_json_over_several_lines(
    yfcc: tuple[Path, list[dict[str, Any]]], tmp_path: Path, line: str
) -> None:
    images, _ = yfcc
    meta = tmp_path / "almost.jsonl"
    meta.write_text(f"{line}\n{line}\n")
    message = refused(images, meta)
    assert "several lines" not in message
    assert message.startswith(f"error: {meta}: ") and "line 1: " in message and "JSON" in message
