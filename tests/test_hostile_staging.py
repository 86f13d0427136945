"""Values that could break a line: shardkit's staging lines, its messages, its rejects file.

A key, extension, split name or file name holding a line end, a tab, NUL or a character that
only looks like an ASCII digit or letter is a bad row: one line naming the metadata file and
line, exit code 1, nothing written, in a normal run and a dry run; with ``--on-error skip`` the
row is in the rejects file and the rest packs. Metadata values, which may hold any of these,
come back from ``shardkit.stream`` exactly as given. A staging folder an interrupted run left
behind is never read by the next run, whatever it holds. And no pattern in shardkit anchors
with ``$``, which matches before a final newline.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.corpus import tiny_image, tree_bytes

BIN = Path(sys.executable).parent
PACK_SHARDS = str(BIN / "pack-shards")
REPO = Path(__file__).resolve().parent.parent

#: Characters that end or break a line for some reader, or a field of a tab-separated line.
BREAKERS = ["\n", "\r", "\r\n", "\t", "\x00", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"]

#: (what, the key) for keys that must not pass the key check.
BAD_KEYS = [
    *((f"key ending in {c!r}", f"deadbeef{c}") for c in BREAKERS),
    ("key starting with a newline", "\ndeadbeef"),
    ("key with a newline inside", "dead\nbeef"),
    ("Arabic-Indic digits", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667"),
    ("Devanagari digits", "\u0966\u0967\u0968\u0969\u096a\u096b\u096c\u096d"),
    ("fullwidth hex", "\uff44\uff45\uff41\uff44\uff42\uff45\uff45\uff46"),
    ("fullwidth digits", "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17"),
    ("superscript digits", "\u00b9\u00b2\u00b3" + "45678"),
]

#: (what, the split) for split names that must not pass the split check.
BAD_SPLITS = [
    *((f"split ending in {c!r}", f"train{c}") for c in BREAKERS),
    ("split with a tab inside", "tr\tain"),
    ("split with an Arabic-Indic digit", "train\u0661"),
    ("fullwidth split", "\uff54\uff52\uff41\uff49\uff4e"),
]

#: (what, a file name on disk) for names whose row is refused: control characters and line breaks.
BAD_FILE_NAMES = [
    *((f"file name ending in {c!r}", f"x.png{c}") for c in BREAKERS if c != "\x00"),  # (no NUL on disk)
    *((f"file name with {c!r} inside", f"x{c}y.png") for c in BREAKERS if c != "\x00"),
    ("file name with C1 control U+0090", "x\x90.png"),
]

#: (what, a file name on disk) for names that hold no usable extension.
BAD_EXTENSIONS = [
    ("fullwidth extension", "x.\uff50\uff4e\uff47"),
    ("extension with an Arabic-Indic digit", "x.mp\u0663"),
]


def _images(tmp_path: Path) -> Path:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(tiny_image(1))
    for _, name in BAD_FILE_NAMES + BAD_EXTENSIONS:
        (images / name).write_bytes(tiny_image(2, "PNG"))
    return images


def _hostile_rows(meta: Path) -> list[tuple[dict[str, Any], str]]:
    """Every hostile row and what its refusal says (``meta``: the metadata file, for a forgery)."""
    rows: list[tuple[dict[str, Any], str]] = []
    for _, key in BAD_KEYS:
        rows.append(({"file_name": "a.jpg", "key": key}, f"key {key!r} does not fit the key scheme"))
    # A key that, shown as it is, would forge a refusal of line 1 on a line of its own.
    forged = f"deadbeef\n{meta}:1: forged"
    rows.append(({"file_name": "a.jpg", "key": forged}, f"key {forged!r} does not fit the key scheme"))
    for _, split in BAD_SPLITS:
        says = f"column 'split' holds {json.dumps(split)}: a split name is"
        rows.append(({"file_name": "a.jpg", "split": split}, says))
    for _, name in BAD_FILE_NAMES:
        rows.append(({"file_name": name}, f"file_name {name!r} holds "))
    for _, name in BAD_EXTENSIONS:
        rows.append(({"file_name": name}, f"file_name {name!r} has no usable extension"))
    rows.append(({"file_name": "x.png\n", "key": "deadbeef\n", "split": "train\n"}, "does not fit the key scheme"))
    return rows


#: Hostile rows per run: fewer than the refusals a run shows one by one.
_CHUNK = 10
_CHUNKS = range(0, len(_hostile_rows(Path("meta.jsonl"))), _CHUNK)


def _hostile_metadata(tmp_path: Path, chunk: slice = slice(None)) -> tuple[Path, dict[int, str]]:
    """One good row, then the hostile rows of ``chunk``: the metadata file and, by line, what
    the refusal of each says."""
    meta = tmp_path / "meta.jsonl"
    rows: list[dict[str, Any]] = [{"file_name": "a.jpg", "n": 1}]
    expected: dict[int, str] = {}
    for row, says in _hostile_rows(meta)[chunk]:
        rows.append(row)
        expected[len(rows)] = says
    with meta.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")  # (ASCII: every hostile character escaped)
    return meta, expected


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """`pack-shards` with ``args``, in this process (tests/support/cli.py): a run per case, many cases."""
    return run_cli("pack-shards", *args)


def _run_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`pack-shards` with ``args`` in a process of its own, as a user re-runs a killed command."""
    return subprocess.run(
        [PACK_SHARDS, *args], capture_output=True, text=True, encoding="utf-8", timeout=300, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("first", _CHUNKS, ids=[f"rows-{i + 2}-{i + _CHUNK + 1}" for i in _CHUNKS])
@pytest.mark.parametrize("mode", [[], ["--dry-run"]], ids=["pack", "dry-run"])
def test_each_hostile_row_is_one_line_naming_file_and_line_and_nothing_is_written(
    tmp_path: Path, mode: list[str], first: int
) -> None:
    images = _images(tmp_path)
    meta, expected = _hostile_metadata(tmp_path, slice(first, first + _CHUNK))
    out = tmp_path / "out"
    proc = _run(str(images), str(meta), "-o", str(out), "-q", *mode)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    # Split at "\n" only: a message holding a raw U+2028 or U+0085 would show here as one line
    # holding it, which the check below refuses too.
    lines = proc.stderr.split("\n")
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    named = [line for line in lines if line.startswith(f"{meta}:")]
    assert len(named) == len(expected), proc.stderr  # one line per bad row, and none forged
    for line_no, says in expected.items():
        (found,) = [line for line in named if line.startswith(f"{meta}:{line_no}: ")]
        assert says in found, (found, says)
    assert not out.exists()


@pytest.mark.slow
def test_with_on_error_skip_hostile_rows_are_rejects_and_the_good_row_packs(tmp_path: Path) -> None:
    import shardkit

    images = _images(tmp_path)
    meta, expected = _hostile_metadata(tmp_path)
    out = tmp_path / "out"
    proc = _run(str(images), str(meta), "-o", str(out), "-q", "--on-error", "skip")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rejects = (out / ".shardkit" / "rejects.jsonl").read_text(encoding="utf-8").split("\n")
    assert rejects.pop() == ""  # (a newline after the last one)
    rejected = {entry["line"]: entry["reason"] for entry in map(json.loads, rejects)}
    assert set(rejected) == set(expected)
    for line_no, says in expected.items():
        assert says in rejected[line_no], (rejected[line_no], says)
    assert [(row["n"], row["key"]) for row in shardkit.stream(str(out))] == [(1, _content_key(images / "a.jpg"))]

    # A dry run with --rejects FILE lists the same rows, and writes nothing else.
    listed = tmp_path / "rejects.jsonl"
    dry_out = tmp_path / "dry"
    proc = _run(
        str(images), str(meta), "-o", str(dry_out), "-q", "--on-error", "skip", "--dry-run", "--rejects", str(listed)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert {json.loads(line)["line"] for line in listed.read_text(encoding="utf-8").split("\n") if line} == set(
        expected
    )
    assert not dry_out.exists()


def _content_key(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:32]


# --- values come back as they went in ------------------------------------------------------------

EVERY_CONTROL = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))
#: Values of every JSON type, the strings holding every character a line format could trip on.
HOSTILE_VALUES: dict[str, Any] = {
    "controls": EVERY_CONTROL,
    "separators": "a\u2028b\u2029c\x85d\x1ce\x1df\x1eg\x0bh\x0ci\r\nj\tk",
    "quoting": '"\'\\ \\n \\t \\u0000 \\"\\\\ {"x": 1}\t[1, 2]',
    "unicode": "\U0001f600 \u202e\u202d \ufeff\u200b \ufffd \u00e4 \uff44",
    "tabbed_list": ["\t", "\n", "\x00", "\u2028", ""],
    "nested": {"text": "\r\n\x00\x85", "count": 7},
    "count": -(2**63),
    "ratio": 0.1,
    "flag": False,
    # Column names are text too: quotes and a backslash round-trip; a control character or line
    # break in a name is refused at pack (rowrules.column_name_problem; test_cli_errors).
    'quote"back\\slash': 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["zip", "tar", "parquet"])
def test_metadata_values_with_every_control_character_round_trip_exactly(tmp_path: Path, fmt: str) -> None:
    import shardkit

    images = tmp_path / "images"
    images.mkdir()
    # A file name needing JSON escapes (quotes, a backslash) and beyond the BMP: published in
    # --keep-source-path's column as given.
    odd_name = "we\"ird 'name' \\ \u00e4\U0001f600.jpg"
    (images / odd_name).write_bytes(tiny_image(1))
    (images / "b.jpg").write_bytes(tiny_image(2))
    rows = [
        {"file_name": odd_name, "key": "0" * 8, **HOSTILE_VALUES},
        {
            "file_name": "b.jpg",
            "key": "f" * 64,
            **{k: v for k, v in HOSTILE_VALUES.items() if k != "controls"},
            "controls": "",
        },
    ]
    meta = tmp_path / "meta.jsonl"
    meta.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    proc = _run(str(images), str(meta), "-o", str(out), "-q", "--format", fmt, "--keep-source-path")
    assert proc.returncode == 0, proc.stderr
    verified = run_cli("shardkit", "verify", out, "--deep", "-q")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    streamed = sorted(shardkit.stream(str(out)), key=lambda row: row["key"])
    assert len(streamed) == 2
    for got, given in zip(streamed, rows, strict=True):
        assert got["key"] == given["key"] and got["source_path"] == given["file_name"]
        for column, value in given.items():
            if column in ("file_name", "key"):
                continue
            assert got[column] == value, column
            assert _types(got[column]) == _types(value), column


def _types(value: Any) -> Any:
    """The value's shape with each leaf replaced by its type (an int read back as a float differs)."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return type(value)


# --- a staging folder left behind --------------------------------------------------------------

#: Runs pack-shards and kills its whole process group the moment the rows are sorted into
#: .shardkit/staging/sorted.tsv (before they are grouped by split): what a power cut leaves.
KILLED_AFTER_SORTING = r"""
import os, signal, sys
import shardkit.packstage

def killed(*args, **kwargs):
    os.killpg(os.getpgid(0), signal.SIGKILL)

shardkit.packstage.regroup = killed
from shardkit.cli import pack_shards
sys.argv = ["pack-shards", *sys.argv[1:]]
pack_shards()
"""


@pytest.mark.slow
def test_a_staging_folder_left_by_a_killed_run_is_redone_not_read(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    rows = []
    for i in range(12):
        (images / f"{i}.jpg").write_bytes(tiny_image(i))
        rows.append({"file_name": f"{i}.jpg", "key": f"{i:08x}", "caption": f"row\t{i}\n\u2028"})
    meta = tmp_path / "meta.jsonl"
    meta.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    reference = tmp_path / "whole" / "ds"  # same folder name: the card names it
    reference.parent.mkdir()
    assert _run(str(images), str(meta), "-o", str(reference), "-q").returncode == 0

    out = tmp_path / "killed" / "ds"
    out.parent.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_SORTING, str(images), str(meta), "-o", str(out), "-q", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        start_new_session=True,
    )
    assert killed.returncode == -9, killed.stderr
    staging = out / ".shardkit" / "staging"
    sorted_rows = staging / "sorted.tsv"
    assert sorted_rows.read_text(encoding="utf-8").count("\n") == 12
    # What a staging folder of another version might hold: lines cut by a raw newline, fewer
    # fields, another order, and run files never merged.
    sorted_rows.write_bytes(b"deadbeef\n\t000000000001\t5\t.jpg\nnot\ta\tstaged\tline\n" + b"\xff\xfe\x00\n")
    (staging / "run-000000.tsv").write_bytes(b"00000000\t1\n")
    (staging / "split-000.tsv").write_text("\x85\u2028\n", encoding="utf-8")
    resumed = _run_process(str(images), str(meta), "-o", str(out), "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert tree_bytes(out) == tree_bytes(reference)
    assert not staging.exists()


# --- no pattern anchors with "$" ---------------------------------------------------------------

#: Where a "$" is harmless: the alternatives before it refuse "\n" itself (any control character),
#: so it never matches where "\Z" would not. The template's reader code is versioned
#: (card.EARLIER_READERS): it is not rewritten for an edit that changes nothing it does.
_HARMLESS = {r"[\x00-\x1f\x7f\\:]|^/|//|/$|(?:^|/)\.\.?(?:/|$)"}
_RE_FUNCTIONS = {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"}


def _patterns(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """(line, pattern text, multiline) of every re.<function>(pattern, ...) call with a literal pattern."""
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in _RE_FUNCTIONS
            and node.args
        ):
            continue
        pattern = node.args[0]
        if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str | bytes):
            text = pattern.value if isinstance(pattern.value, str) else pattern.value.decode("latin-1")
        elif isinstance(pattern, ast.JoinedStr):
            text = "".join(str(v.value) for v in pattern.values if isinstance(v, ast.Constant))
        else:
            continue
        multiline = any(isinstance(n, ast.Attribute) and n.attr in ("MULTILINE", "M") for n in ast.walk(node))
        found.append((node.lineno, text, multiline))
    return found


@pytest.mark.slow
def test_no_pattern_anchors_a_whole_value_with_dollar() -> None:
    sources = [
        *sorted((REPO / "src" / "shardkit").rglob("*.py")),
        *sorted((REPO / "templates" / "hub-dataset").rglob("*.py")),
    ]
    assert len(sources) > 30
    anchored = []
    for path in sources:
        for line, text, multiline in _patterns(ast.parse(path.read_text(encoding="utf-8"))):
            if not multiline and re.search(r"(?<!\\)\$", text) and text not in _HARMLESS:
                anchored.append(f"{path.relative_to(REPO)}:{line}: {text}")
    assert anchored == []
    # The shared key and extension patterns have no anchors: they are matched whole, never as a prefix.
    uses = [
        f"{path.relative_to(REPO)}: {m.group()}"
        for path in sources
        for m in re.finditer(r"\b(?:KEY_RE|EXT_RE)\.\w+\(", path.read_text(encoding="utf-8"))
        if not m.group().endswith(".fullmatch(")
    ]
    assert uses == []


def test_anchored_checks_refuse_a_trailing_newline() -> None:
    """The checks that took a value ending in a newline before (``$``), each given one now."""
    from shardkit import manifest, scaffold
    from shardkit.errors import ManifestError, UsageError
    from shardkit.formats import format_named
    from shardkit.location import Location
    from shardkit.rowrules import EXT_RE, KEY_RE

    zip_format = format_named("zip")

    assert KEY_RE.fullmatch("deadbeef") and not KEY_RE.fullmatch("deadbeef\n")
    assert EXT_RE.fullmatch(".png") and not EXT_RE.fullmatch(".png\n")
    with pytest.raises(UsageError, match="is not a folder"):
        Location.parse("ns/name\n")
    with pytest.raises(UsageError, match="is not a folder"):
        Location.parse("hf://datasets/ns/name@main\n")
    with pytest.raises(UsageError, match="is not a folder"):
        Location.parse("n\u00e4/name")  # (the Hub's ids are ASCII)
    assert Location.parse("hf://datasets/ns/name@v1.0").kind == "hub"
    zero = "0" * 64
    shard = manifest.ManifestShard("data/ab.zip", "metadata/ab.jsonl", 1, 100, zero, zero, "ab000001", "ab000001")
    options = manifest.Options(2, zip_format.max_bytes, zip_format.max_bytes, "zip")
    features = [{"name": "image", "dtype": "image"}, {"name": "key", "dtype": "string"}]
    one_shard = manifest.Manifest(options, zero, "image", features, [shard], layout=4)
    written = one_shard.to_json()
    assert manifest.parse_manifest(manifest.dump_json(written), "shards.json").shards[0].file == "data/ab.zip"
    written["shards"][0]["file"] += "\n"
    with pytest.raises(ManifestError, match=r"shards\[0\]\.file is 'data/ab.zip\\n', not data/"):
        manifest.parse_manifest(manifest.dump_json(written), "shards.json")
    rules = scaffold.load_rules(scaffold.TEMPLATE_DIR)
    assert rules is not None
    assert rules.name_problems("name\n", "dataset_name")
    assert not rules.name_problems("name", "dataset_name")


@pytest.mark.slow
def test_a_manifest_naming_a_shard_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(tiny_image(1))
    meta = tmp_path / "meta.jsonl"
    meta.write_text('{"file_name": "a.jpg"}\n', encoding="utf-8")
    out = tmp_path / "out"
    assert _run(str(images), str(meta), "-o", str(out), "-q").returncode == 0
    manifest = json.loads((out / "shards.json").read_text(encoding="utf-8"))
    (shard,) = manifest["shards"]
    (out / shard["file"]).rename(out / f"{shard['file']}\n")  # the file is there under the new name
    shard["file"] += "\n"
    (out / "shards.json").write_text(json.dumps(manifest), encoding="utf-8")
    verified = run_cli("shardkit", "verify", out, "-q")
    # (1: a manifest that is not what shardkit writes, as for any other: errors.ManifestError)
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert "Traceback" not in verified.stderr
    named = [line for line in verified.stderr.split("\n") if "shards.json" in line]
    assert len(named) == 1 and f"shards[0].file is {shard['file']!r}, not data/" in named[0], verified.stderr


@pytest.mark.slow
@pytest.mark.parametrize("homepage", ["https://example.org/x\n", "https://example.org/\u2028x", "example.org"])
def test_a_homepage_with_a_line_end_is_refused_by_shardkit_new_and_by_the_templates_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, homepage: str
) -> None:
    from cookiecutter.exceptions import FailedHookException

    from tests.test_template import generate

    config = tmp_path / "cookiecutter.yaml"  # keeps a user's ~/.cookiecutterrc out of the test
    config.write_text("default_context: {}\n")
    # In this process (tests/support/cli.py): cookiecutter reads COOKIECUTTER_CONFIG when called, not on import.
    monkeypatch.setenv("COOKIECUTTER_CONFIG", str(config))
    out = tmp_path / "out"
    result = run_cli("shardkit", "new", "--no-input", "-o", out, "namespace=me", f"homepage={homepage}")
    assert result.returncode == 2, result.stderr
    assert f"homepage {homepage!r} is not an http(s) URL" in result.stderr
    assert not out.exists() or list(out.iterdir()) == []
    hooked = tmp_path / "hooked"
    hooked.mkdir()
    with pytest.raises(FailedHookException):
        generate(hooked, homepage=homepage)
    assert list(hooked.iterdir()) == []
