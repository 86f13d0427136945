"""``shardkit remux --map``: the user's function is found as ``python -m`` finds a module, and
every mistake in it, or in what it returns, is one line naming the column and the batch.

Source: a shardkit dataset of 12 tiny images in several shards, with a ClassLabel. The
functions are written into a temporary folder, as a user's would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import shardkit
from shardkit.cli import main
from shardkit.pack import PackConfig, pack
from tests.support.corpus import REPO_ROOT, tiny_image, write_jsonl
from tests.support.dask_cluster import DaskCluster

SCRIPTS = Path(sys.executable).parent
#: Where the first batch is, as remux names it (one job: the first source shard fails first).
FIRST_BATCH = "split 'train', batch from row 0"
FORMS = "give MODULE:FUNCTION for a module in the current folder or an installed package, or path/to/file.py:FUNCTION"

FUNCTIONS = """
import datetime
import os


def unequal(batch):
    return {"image": batch["image"], "label": batch["label"] * 2}


def a_date(batch):
    return {**batch, "when": [datetime.date(2024, 1, 1)] * len(batch["image"])}


def no_image(batch):
    return {"label": batch["label"]}


def renamed(batch):
    return {"img": batch["image"], "label": batch["label"]}


def a_path_for_the_image(batch):
    return {**batch, "image": ["cat.jpg"] * len(batch["image"])}


def a_tuple(batch):
    return {**batch, "label": tuple(batch["label"])}


def a_key_of_its_own(batch):
    return {**batch, "key": ["row7"] * len(batch["image"])}


def a_long_key(batch):
    return {**batch, "key": ["x" * 100_000] * len(batch["image"])}


def a_bad_split(batch):
    return {**batch, "split": ["no good!"] * len(batch["image"])}


def a_file_name(batch):
    return {**batch, "file_name": ["cat.jpg"] * len(batch["image"])}


def a_huge_int(batch):
    return {**batch, "v": [2**70] * len(batch["image"])}


def twice(batch):
    return {name: values + values for name, values in batch.items()}


def text_from_6(batch):
    return {**batch, "v": [n if n < 6 else str(n) for n in batch["n"]]}


def keys_of_n_mod_6(batch):
    return {**batch, "key": [f"{n % 6:016x}" for n in batch["n"]]}


def split_spelled_from_6(batch):
    return {**batch, "split": ["train" if n < 6 else "Train" for n in batch["n"]]}


def label_a_float_from_6(batch):
    return {**batch, "label": [label if n < 6 else 0.5 for n, label in zip(batch["n"], batch["label"])]}


def keys_of_n_mod_6_into_test_below_6(batch):
    split = ["test" if n < 6 else "train" for n in batch["n"]]
    return {**batch, "key": [f"{n % 6:016x}" for n in batch["n"]], "split": split}


def failing_first_after_a_while(batch):
    import time

    if os.environ["FIRST_N"] in map(str, batch["n"]):  # the first batch in source order
        time.sleep(1)  # (so that, with two workers, the batch after it most likely fails first)
        return {**batch, "file_name": ["x.jpg"] * len(batch["n"])}
    return {**batch, "split": ["bad split"] * len(batch["n"])}


def noisy(batch):
    print("hello from the function")
    return batch


print("hello from the module")
"""


CROP = "def crop(batch):\n    return {**batch, 'image': [im.resize(SIZE) for im in batch['image']]}\n"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 rows in several source shards (train only), `label` a ClassLabel (cat, dog)."""
    root = tmp_path_factory.mktemp("fn-src")
    images = root / "images"
    images.mkdir()
    rows = []
    for i in range(12):
        (images / f"{i:02d}.jpg").write_bytes(tiny_image(i))
        rows.append({"file_name": f"{i:02d}.jpg", "label": ["cat", "dog"][i % 2], "n": i})
    out = root / "src"
    meta = write_jsonl(root / "meta.jsonl", rows)
    pack(PackConfig(str(images), str(meta), str(out), jobs=1, prefix_length=1, class_label="label"))
    assert len(json.loads((out / "shards.json").read_text())["shards"]) >= 2  # one task per worker at least
    return out


@pytest.fixture
def functions(tmp_path: Path) -> Path:
    path = tmp_path / "user" / "fns.py"
    path.parent.mkdir()
    path.write_text(FUNCTIONS)
    return path


def cli(*args: str) -> Result:
    """``shardkit ARGS`` in this process, progress bars shown (stderr is no terminal, no --json)."""
    return CliRunner().invoke(main, list(args))


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.split("\n") if line.startswith("error: ")]


def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``shardkit ARGS`` in a process of its own whose current folder is ``folder``; this
    checkout's shardkit, and nothing else on PYTHONPATH (the user's module is found in the folder)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    return subprocess.run(
        [str(SCRIPTS / "shardkit"), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


#: A user's module, written two ways: beside a file it imports, and in a package (relative import).
LAYOUTS = {
    "my_transforms:crop": {
        "sizes.py": "SIZE = (8, 6)\n",
        "my_transforms.py": "from sizes import SIZE\n\n\n" + CROP,
    },
    "mine.transforms:crop": {
        "mine/__init__.py": "",
        "mine/sizes.py": "SIZE = (8, 6)\n",
        "mine/transforms.py": "from .sizes import SIZE\n\n\n" + CROP,
    },
}


@pytest.mark.parametrize("spec", list(LAYOUTS))
def test_a_module_in_the_current_folder_is_found_and_every_worker_loads_it(
    source: Path, tmp_path: Path, spec: str
) -> None:
    work = tmp_path / "project"
    for name, text in LAYOUTS[spec].items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    result = run_in(work, "remux", str(source), "out", "--map", spec, "-j", "2", "--json", "-q")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["source_shards"] >= 2 and summary["rows_out"] == 12
    rows = list(shardkit.stream(str(work / "out")))
    assert sorted(r["n"] for r in rows) == list(range(12))
    assert {r["image"].size for r in rows} == {(8, 6)}  # the function ran on every row
    assert sorted(r["label"] for r in rows) == [0] * 6 + [1] * 6  # still a ClassLabel


@pytest.mark.slow
def test_a_module_in_the_current_folder_reaches_dask_workers_whose_current_folder_is_another(
    source: Path, tmp_path: Path
) -> None:
    work = tmp_path / "project"
    work.mkdir()
    (work / "my_transforms.py").write_text(
        "def small(batch):\n    return {**batch, 'image': [im.resize((4, 4)) for im in batch['image']]}\n"
    )
    cluster = DaskCluster(tmp_path / "dask", workers=2)  # its workers run in this process's folder, not work/
    try:
        dask = ("--executor", "dask", "--scheduler", cluster.address)
        result = run_in(work, "remux", str(source), "out", "--map", "my_transforms:small", *dask, "--json", "-q")
    finally:
        cluster.close()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows_out"] == 12
    assert {r["image"].size for r in shardkit.stream(str(work / "out"))} == {(4, 4)}


def test_a_module_found_nowhere_names_where_it_was_looked_for_and_the_forms_that_work(
    source: Path, tmp_path: Path
) -> None:
    result = run_in(tmp_path, "remux", str(source), "out", "--map", "my_transforms:crop")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: --map 'my_transforms:crop': cannot import my_transforms: it is neither an installed module nor a"
        f" file in the current folder ({tmp_path}); {FORMS}"
    ]
    missing = run_in(tmp_path, "remux", str(source), "out", "--map", "nothere.py:crop")
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        f"error: --map 'nothere.py:crop': cannot import {tmp_path / 'nothere.py'}: no such file; {FORMS}"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("def crop(batch):\n    return batch[\n", 2, "SyntaxError: '[' was never closed"),
        ("import os\nimport not_installed_helper\n", 2, "ModuleNotFoundError: No module named 'not_installed_helper'"),
        ("X = 1\nY = 1 / 0\n", 2, "ZeroDivisionError: division by zero"),
    ],
)
def test_an_error_while_importing_the_users_module_is_named_with_its_file_and_line(
    source: Path, tmp_path: Path, text: str, line: int, what: str
) -> None:
    (tmp_path / "broken.py").write_text(text)
    result = run_in(tmp_path, "remux", str(source), "out", "--map", "broken:crop")
    assert result.returncode == 2
    expected = f"error: --map 'broken:crop': importing broken raised {what} (at {tmp_path / 'broken.py'}:{line})"
    assert result.stderr.splitlines() == [expected]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "unequal",
            f"the map function returned columns of different lengths ({FIRST_BATCH}): column 'image' has 1 value,"
            " 'label' 2; every column needs one value per row",
        ),
        (
            "a_date",
            f"the map function returned a date in column 'when' ({FIRST_BATCH}, row 0 of its output), which no"
            " metadata can hold; return numbers, strings, lists or dicts besides the image",
        ),
        (
            "no_image",
            "each output row needs exactly one image (PIL image or bytes); the map function returned no image or"
            f" file column (the source's is 'image') ({FIRST_BATCH}, row 0 of its output)",
        ),
        (
            "renamed",
            "the map function returned the image as column 'img', not as the source's 'image'"
            f" ({FIRST_BATCH}, row 0 of its output); return it as 'image': the output's file column is the source's",
        ),
        (
            "a_path_for_the_image",
            "each output row needs exactly one image (PIL image or bytes); the map function returned a str in"
            f" column 'image' ({FIRST_BATCH}, row 0 of its output)",
        ),
        (
            "a_tuple",
            f"the map function must return a dict of lists ({FIRST_BATCH}); its column 'label' is a tuple, not a list",
        ),
        (
            "a_key_of_its_own",
            f"the map function returned 'row7' in column 'key' ({FIRST_BATCH}, row 0 of its output): a key is 8 to"
            " 128 lowercase hex digits (None, or no 'key' column, for shardkit's own; rename a column of yours"
            " named 'key')",
        ),
        (
            "a_long_key",
            f"the map function returned '{'x' * 76}... in column 'key' ({FIRST_BATCH}, row 0 of its output): a key is"
            " 8 to 128 lowercase hex digits (None, or no 'key' column, for shardkit's own; rename a column of yours"
            " named 'key')",
        ),
        (
            "a_bad_split",
            f"the map function returned a row that cannot be published ({FIRST_BATCH}, row 0 of its output): column"
            ' \'split\' holds "no good!": a split name is 1 to 64 ASCII letters, digits or underscores, and not "all"'
            " in any case (train, validation, test...)",
        ),
        (
            "a_file_name",
            f"the map function returned a row that cannot be published ({FIRST_BATCH}, row 0 of its output): column"
            " 'file_name' is reserved for the file itself in the published dataset; rename it",
        ),
        (
            "a_huge_int",
            f"the map function returned a row that cannot be published ({FIRST_BATCH}, row 0 of its output): column"
            " 'v' holds 1180591620717411303424, outside the 64-bit integers datasets and Arrow store; write it as a"
            " string",
        ),
    ],
)
def test_a_wrong_output_is_one_line_of_its_own_naming_the_column_and_the_batch(
    source: Path, functions: Path, tmp_path: Path, name: str, message: str
) -> None:
    out = tmp_path / "out"
    result = cli("remux", str(source), str(out), "--map", f"{functions}:{name}", "-j", "1", "--batch-size", "1")
    assert result.exit_code == 1, result.stderr
    assert "transforming: " in result.stderr  # the bar was shown, and the error is on a line of its own
    assert error_lines(result) == [f"error: {message}"]
    assert not (out / "data").exists()


def _source_order(source: Path) -> list[int]:
    """The source rows' ``n``, in the order remux reads them."""
    return [row["n"] for row in shardkit.stream(str(source), split="train")]


#: What each function returns for n >= 6 that conflicts with its rows for n < 6 (``here`` is the
#: later row's, ``there`` the first's, when the first row in source order has n < 6).
CONFLICTS = {
    "text_from_6": (
        "column 'v' is {here} here but {there} {seen}; datasets needs one type per column",
        ("a string", "an integer"),
    ),
    "split_spelled_from_6": (
        "split {here} here and {there} {seen}: split names that differ only in case are one folder on macOS,"
        " Windows and in a clone of the repo; spell each split one way",
        ("'Train'", "'train'"),
    ),
    "label_a_float_from_6": (
        "column 'label' is {here} here but {there} {seen}; datasets needs one type per column (the source's"
        " ClassLabel column 'label' is staged with its class names: return its class integers or names there)",
        ("a number", "a string"),
    ),
}


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("name", list(CONFLICTS))
def test_a_conflict_between_batches_is_named_by_both_batches_when_made_not_at_the_pack(
    source: Path, functions: Path, tmp_path: Path, name: str, jobs: str
) -> None:
    """Rows for n < 6 and n >= 6 that cannot be in one output: refused as the first batch with the
    other kind is committed (in source order, whichever worker made it), naming it and the first
    row it conflicts with; nothing is packed."""
    order = _source_order(source)
    first = order[0] < 6
    at = next(i for i, n in enumerate(order) if (n < 6) != first)
    message, (later, earlier) = CONFLICTS[name]
    here, there = (later, earlier) if first else (earlier, later)
    seen = "in row 0 of the output of split 'train', batch from row 0"
    out = tmp_path / "out"
    result = cli("remux", str(source), str(out), "--map", f"{functions}:{name}", "-j", jobs, "--batch-size", "2")
    assert result.exit_code == 1, result.stderr
    assert error_lines(result) == [
        f"error: the map function returned a row that cannot be published (split 'train', batch from row {at - at % 2},"
        f" row {at % 2} of its output): " + message.format(here=here, there=there, seen=seen)
    ]
    assert "checking rows" not in result.stderr  # refused before the pack
    assert not (out / "data").exists()


def test_with_two_workers_the_error_said_is_the_first_batchs_in_source_order(
    source: Path, functions: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch fails late, the second at once: the first's error is the one said."""
    monkeypatch.setenv("FIRST_N", str(_source_order(source)[0]))  # (a process of its own: its workers get it)
    fn = f"{functions}:failing_first_after_a_while"
    result = run_in(tmp_path, "remux", str(source), "out", "--map", fn, "-j", "2", "--batch-size", "2", "-q")
    assert result.returncode == 1, result.stderr
    assert [line for line in result.stderr.splitlines() if line != "hello from the module"] == [
        f"error: the map function returned a row that cannot be published ({FIRST_BATCH}, row 0 of its output): column"
        " 'file_name' is reserved for the file itself in the published dataset; rename it"
    ]


#: A function that fails at the row whose ``n`` is $STOP_AT, if set; ``v``: ``n`` while STOP_AT is
#: set, else (on the run after) ``str(n)`` when $TEXT is set too.
STOPPING = """
import os


def fn(batch):
    stop = os.environ.get("STOP_AT")
    if stop is not None and int(stop) in batch["n"]:
        raise ValueError("stopped")
    text = stop is None and "TEXT" in os.environ
    return {**batch, "v": [str(n) if text else n for n in batch["n"]]}
"""


def _stopping_args(source: Path, out: Path) -> tuple[str, ...]:
    return ("remux", str(source), str(out), "--map", "stopping:fn", "--batch-size", "2", "-j", "1", "--no-decode", "-q")


@pytest.fixture(scope="module")
def stopped(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the module ``STOPPING``, which ran with ``--batch-size 2`` into out/ there
    and failed at the source's row 6 (the batches before it committed)."""
    folder = tmp_path_factory.mktemp("stopped")
    (folder / "stopping.py").write_text(STOPPING)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "STOP_AT": str(_source_order(source)[6])}
    args = [str(SCRIPTS / "shardkit"), *_stopping_args(source, folder / "out")]
    failed = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1 and "stopped" in failed.stderr
    return folder


def _stopped_copy(stopped: Path, source: Path, tmp_path: Path) -> tuple[str, ...]:
    """A copy in tmp_path/out of the stopped remux's out/; the arguments that run it again there
    (with ``run_in(stopped, ...)``: the module is found in that folder, as the first run found it)."""
    shutil.copytree(stopped / "out", tmp_path / "out")
    return _stopping_args(source, tmp_path / "out")


def test_a_resumed_remux_checks_its_new_batches_against_the_types_of_the_batches_committed_before(
    source: Path, stopped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run makes ``v`` integers and stops at a row; the re-run (the same function file)
    makes strings: refused at its first batch, naming a batch the first run committed."""
    args = _stopped_copy(stopped, source, tmp_path)
    monkeypatch.setenv("TEXT", "1")
    resumed = run_in(stopped, *args)
    assert resumed.returncode == 1
    assert resumed.stderr.splitlines() == [
        "error: the map function returned a row that cannot be published (split 'train', batch from row 6, row 0 of"
        " its output): column 'v' is a string here but an integer in row 0 of the output of split 'train', batch from"
        " row 0; datasets needs one type per column"
    ]


@pytest.mark.parametrize(
    ("damage", "warned"),
    [
        ("cut short", "shorter than its record says"),
        ("garbage", "holds lines remux did not stage"),
        ("counted within a line", "holds lines remux did not stage"),
        ("a line of another split", "holds lines remux did not stage"),
        ("a batch's files removed", "the staged files of its batch from row 2 are not what its lines say"),
    ],
)
def test_a_damaged_part_file_starts_its_split_over_with_a_warning(
    source: Path, stopped: Path, tmp_path: Path, damage: str, warned: str
) -> None:
    args = _stopped_copy(stopped, source, tmp_path)
    part = tmp_path / "out" / ".shardkit" / "remux" / "parts" / "train.jsonl"
    lines = part.read_bytes()
    assert lines.count(b"\n") == 6  # the batches before row 6
    if damage == "counted within a line":
        record = part.with_suffix(".json")
        record.write_text(json.dumps({**json.loads(record.read_text()), "part_bytes": len(lines) - 3}))
    elif damage == "a line of another split":
        part.write_bytes(lines.replace(b'"train/', b'"valid/', 1))  # (as long: the record's count holds)
    elif damage == "a batch's files removed":
        [run] = (tmp_path / "out" / ".shardkit" / "remux" / "files").iterdir()
        shutil.rmtree(run / "train" / "00000001")
    else:
        part.write_bytes(lines[:-5] if damage == "cut short" else b"x" * len(lines))
    resumed = run_in(stopped, *args[:-1], "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert f"WARNING: {part}: {warned}; its split starts over (finished batches are kept)" in resumed.stderr
    assert json.loads(resumed.stdout)["resumed_rows"] == 0
    rows = list(shardkit.stream(str(tmp_path / "out")))
    assert sorted((r["n"], r["v"]) for r in rows) == [(n, n) for n in range(12)]


def test_a_key_given_to_two_rows_of_a_batch_is_named_with_both_rows(
    source: Path, functions: Path, tmp_path: Path
) -> None:
    """Each row doubled with the source's ``key`` column passed on (a natural augmentation)."""
    first_key = next(iter(shardkit.stream(str(source), split="train")))["key"]
    out = tmp_path / "out"
    result = cli("remux", str(source), str(out), "--map", f"{functions}:twice", "-j", "1", "--batch-size", "3")
    assert result.exit_code == 1, result.stderr
    assert error_lines(result) == [
        f"error: the map function returned key {first_key} for rows 0 and 3 of its output ({FIRST_BATCH}): each row"
        " needs a key of its own; drop the 'key' column for shardkit to give each row one"
    ]
    assert not (out / "data").exists()


def test_a_key_given_to_rows_of_two_batches_is_named_by_batch_and_row_not_by_a_staged_line(
    source: Path, functions: Path, tmp_path: Path
) -> None:
    """Keys repeat across batches only: the final pack finds them, and says them as rows of batches."""
    order = _source_order(source)
    first_of: dict[int, int] = {}
    expected = []
    for i, n in enumerate(order):
        if (before := first_of.setdefault(n % 6, i)) != i:
            expected.append(
                f"split 'train', batch from row {i}, row 0 of its output: duplicate key {n % 6:016x} (first used in"
                f" row 0 of the output of split 'train', batch from row {before})"
            )
    out = tmp_path / "out"
    result = cli(
        "remux", str(source), str(out), "--map", f"{functions}:keys_of_n_mod_6", "-j", "2", "--batch-size", "1"
    )
    assert result.exit_code == 1, result.stderr
    lines = result.stderr.split("transforming")[-1].splitlines()
    said = [line for line in lines if line.startswith("split 'train'")]
    assert sorted(said) == sorted(expected)
    assert "error: 6 problem(s) in the map function's output; no shard was written:" in lines
    assert lines[-1] == "Fix the map function, then re-run with --force (its batches are dropped)."
    assert ".shardkit" not in result.stderr and "--on-error" not in result.stderr
    assert not (out / "data").exists()


def test_a_key_in_two_splits_is_named_by_batch_and_row_as_a_leak_between_splits(
    source: Path, functions: Path, tmp_path: Path
) -> None:
    """Keys repeat across batches, and rows for n < 6 go to split test: the pack's leak message
    names rows by batch too."""
    order = _source_order(source)
    first_of: dict[int, int] = {}
    expected = []
    for i, n in enumerate(order):
        if (before := first_of.setdefault(n % 6, i)) == i:
            continue
        first = f"row 0 of the output of split 'train', batch from row {before}"
        split, first_split = ("test" if m < 6 else "train" for m in (n, order[before]))
        leak = (
            f" (split {split!r}; {first} is in {first_split!r}: a leak between splits)" if split != first_split else ""
        )
        expected.append(
            f"split 'train', batch from row {i}, row 0 of its output: duplicate key {n % 6:016x} (first used in"
            f" {first}){leak}"
        )
    fn = f"{functions}:keys_of_n_mod_6_into_test_below_6"
    result = cli("remux", str(source), str(tmp_path / "out"), "--map", fn, "-j", "1", "--batch-size", "1")
    assert result.exit_code == 1, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("split 'train'")]
    assert sorted(said) == sorted(expected)
    assert any("a leak between splits" in line for line in said)


def test_help_says_what_a_batch_holds_and_what_to_return() -> None:
    result = cli("remux", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())  # as click wrapped it
    for said in (
        "a dict of lists, one list per source column",
        "up to --batch-size rows",
        "PIL images",
        '{"bytes", "path"} dicts with --no-decode',
        "a ClassLabel column as ints",
        "one int per row",
        "keep the source's name",
        "def augment(batch, seeds):",
    ):
        assert said in text, said


def test_a_function_edited_after_a_failed_run_does_not_resume_with_the_batches_of_the_old_code(
    source: Path, tmp_path: Path
) -> None:
    module = tmp_path / "edit_me.py"
    module.write_text("def fn(batch):\n    if 7 in batch['n']:\n        raise ValueError('seven')\n    return batch\n")
    args = ("remux", str(source), "out", "--map", "edit_me:fn", "--batch-size", "2", "-j", "1", "--no-decode")
    failed = run_in(tmp_path, *args)
    assert failed.returncode == 1 and "seven" in failed.stderr
    parts = tmp_path / "out" / ".shardkit" / "remux" / "parts"
    assert any(json.loads(p.read_text())["batches"] for p in parts.glob("*.json"))  # the old code finished some
    module.write_text("def fn(batch):\n    return {**batch, 'v': [2] * len(batch['n'])}\n")
    refused = run_in(tmp_path, *args)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: {tmp_path / 'out'} holds an unfinished remux with other settings (the map function's file, edited"
        " since); re-run with --force to start over (its finished batches are dropped)"
    ]
    forced = run_in(tmp_path, *args, "--force", "--json", "-q")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["resumed_rows"] == 0
    rows = list(shardkit.stream(str(tmp_path / "out")))
    assert sorted(r["n"] for r in rows) == list(range(12))
    assert [r["v"] for r in rows] == [2] * 12  # every row from the new code


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_what_the_function_prints_goes_to_stderr_and_json_stays_alone_on_stdout(
    source: Path, functions: Path, tmp_path: Path, jobs: str
) -> None:
    result = run_in(tmp_path, "remux", str(source), "out", "--map", f"{functions}:noisy", "-j", jobs, "--json", "-q")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows_out"] == 12  # the whole of stdout is the summary
    assert "hello from the function" in result.stderr and "hello from the module" in result.stderr


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_function_that_raises_is_named_on_one_line_with_its_traceback_on_the_lines_below(
    source: Path, tmp_path: Path, jobs: str
) -> None:
    module = tmp_path / "raising.py"
    module.write_text('def boom(batch):\n    helper()\n\n\ndef helper():\n    raise ValueError("no good")\n')
    result = run_in(tmp_path, "remux", str(source), "out", "--map", "raising:boom", "-j", jobs, "-q")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: the map function failed on split 'train', rows 0..11: ValueError: no good (at {module}:6 in helper)",
        "Traceback of the map function:",
        f'  File "{module}", line 2, in boom',
        "    helper()",
        f'  File "{module}", line 6, in helper',
        '    raise ValueError("no good")',
    ]
