"""Where the commands write and read: an OUT_DIR apart from its input, no chain of parent folders
made from a typo, ``verify NS/NAME`` read from the Hub, and verify's advice on repairing a
dataset, each tried as a user runs the commands (subprocesses of the installed scripts)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hub_server import WRITE_TOKEN
from tests.support.corpus import REPO_ROOT, Corpus
from tests.support.packing import pack_example
from tests.test_push import REPO, hub_env, pushed_copy
from tests.test_url_output import objects, s3  # noqa: F401 - the fixture, found here by name

SCRIPTS = Path(sys.executable).parent


def cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``shardkit ...`` (``pack-shards ...`` when the first word is it), run in ``cwd``."""
    command = [str(SCRIPTS / "pack-shards")] if args[0] == "pack-shards" else [str(SCRIPTS / "shardkit"), args[0]]
    base = env if env is not None else dict(os.environ)
    # The tests' own modules (remux's --map functions) on the path, after the code under test.
    paths = [p for p in (base.get("PYTHONPATH"), str(REPO_ROOT)) if p]
    return subprocess.run(
        [*command, *map(str, args[1:])],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, "PYTHONPATH": os.pathsep.join(paths)},
        timeout=600,
        check=False,
    )


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (links not followed), to show that a refused run made nothing."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The refusal: exit code 2 (usage), one line on stderr and no traceback; returns the line."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """A user's folder: ``images/`` (40 files in sub0..sub2/), ``meta.jsonl``, and ``imgs``, a link to ``images``."""
    corpus = Corpus(tmp_path, 40)
    (tmp_path / "imgs").symlink_to(corpus.images)
    return tmp_path


# --- OUT_DIR apart from IMAGES_DIR -----------------------------------------------------------------

INSIDE = {
    "a folder in it": ("images", "images/out"),
    "a folder two levels in": ("images", "images/sub0/out"),
    "an existing folder of it": ("images", "images/sub1"),
    "through ..": ("images", "images/../images/sub"),
    "with a trailing slash": ("images", "images/new/"),
    "through a link to IMAGES_DIR": ("images", "imgs/out"),
    "IMAGES_DIR given as the link": ("imgs", "images/out"),
    "an absolute path": ("images", "{root}/images/out"),
}


@pytest.mark.parametrize("case", sorted(INSIDE))
def test_an_out_dir_inside_images_dir_is_refused_before_anything_is_written(user: Path, case: str) -> None:
    images, out = (part.format(root=user) for part in INSIDE[case])
    before = tree(user)
    line = one_error_line(cli("pack-shards", images, "meta.jsonl", "-o", out, "-j", "1", cwd=user))
    assert line.startswith("error: OUT_DIR ") and f"is inside IMAGES_DIR '{images}'" in line
    assert "choose a folder outside IMAGES_DIR" in line and "--adopt" not in line
    if "imgs" in (images + out):  # the link is named with where it leads, which is what the refusal is about
        assert f"(really '{user / 'images'}" in line
    assert tree(user) == before


@pytest.mark.parametrize("out", ["images", "images/", "imgs", "images/sub0/..", "{root}/images"])
def test_images_dir_itself_as_out_dir_says_so_and_not_adopt(user: Path, out: str) -> None:
    before = tree(user)
    line = one_error_line(cli("pack-shards", "images", "meta.jsonl", "-o", out.format(root=user), cwd=user))
    assert "is IMAGES_DIR 'images' itself, the input folder" in line and "--adopt" not in line
    assert tree(user) == before


def test_images_dir_inside_out_dir_is_refused(user: Path) -> None:
    (user / "repo").mkdir()
    shutil.move(user / "images", user / "repo" / "images")
    before = tree(user)
    line = one_error_line(cli("pack-shards", "repo/images", "meta.jsonl", "-o", "repo", "--adopt", cwd=user))
    assert line == (
        f"error: IMAGES_DIR 'repo/images' is inside OUT_DIR '{user / 'repo'}', where shardkit writes the"
        " dataset's shards, card and preview.jpg: the input would become part of it; keep IMAGES_DIR and"
        " OUT_DIR apart"
    )
    assert tree(user) == before


@pytest.mark.slow
def test_the_readme_find_one_liner_no_longer_packs_the_preview(user: Path) -> None:
    """The issue's case: `-o images/out`, then README's `find` one-liner, then the pack again,
    packed the dataset's own preview.jpg as a row of a class "out". Now the first pack is refused;
    a sibling OUT_DIR packs, and the one-liner finds only the user's files."""
    assert cli("pack-shards", "images", "meta.jsonl", "-o", "images/out", cwd=user).returncode == 2
    ok = cli("pack-shards", "images", "meta.jsonl", "-o", "out", "-j", "1", "-q", cwd=user)
    assert ok.returncode == 0, ok.stderr
    found = subprocess.run(["find", "images", "-name", "*.jpg"], cwd=user, capture_output=True, text=True, check=True)
    assert "preview" not in found.stdout and len(found.stdout.split()) == 40


@pytest.mark.slow
def test_a_sibling_whose_name_starts_like_images_dir_is_fine(user: Path) -> None:
    ok = cli("pack-shards", "images", "meta.jsonl", "-o", "images-dataset", "-j", "1", "-q", cwd=user)
    assert ok.returncode == 0, ok.stderr
    assert (user / "images-dataset" / "shards.json").is_file()


def test_a_work_dir_inside_images_dir_is_refused(user: Path) -> None:
    """--work-dir (with an OUT_DIR URL: the local folder of the run's working files and a copy of
    the card) is held to the same rule; checked before any request to the URL."""
    before = tree(user)
    line = one_error_line(
        cli("pack-shards", "images", "meta.jsonl", "-o", "s3://bucket/ds", "--work-dir", "imgs/work", cwd=user)
    )
    assert line.startswith(f"error: --work-dir '{user / 'imgs' / 'work'}' (really '{user / 'images' / 'work'}')")
    assert "is inside IMAGES_DIR 'images'" in line
    assert tree(user) == before


def test_remux_refuses_an_out_dir_inside_its_local_source_folder(packed_template: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(packed_template, source, ignore=shutil.ignore_patterns("lock"))
    before = tree(tmp_path)
    for out, fragment in (("source/remuxed", "is inside SOURCE 'source'"), ("source", "is SOURCE 'source' itself")):
        result = cli("remux", "source", out, "--map", "tests.remux_functions:identity", cwd=tmp_path)
        assert fragment in one_error_line(result)
    assert tree(tmp_path) == before


# --- no chain of parents ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_missing_parent_of_out_dir_is_named_and_nothing_is_created(user: Path) -> None:
    for extra in ((), ("--dry-run",)):
        line = one_error_line(cli("pack-shards", "images", "meta.jsonl", "-o", "no/such/out", *extra, cwd=user))
        assert line == (
            f"error: OUT_DIR '{user / 'no/such/out'}': its folder '{user / 'no/such'}' does not exist; create it"
            f" first (mkdir -p {user / 'no/such'}) or choose another OUT_DIR"
        )
        assert not (user / "no").exists()
    # A link to a missing place: named with where it leads, and the folder to make is that one.
    (user / "dangling").symlink_to(user / "gone" / "x" / "out")
    line = one_error_line(cli("pack-shards", "images", "meta.jsonl", "-o", "dangling", cwd=user))
    assert line == (
        f"error: OUT_DIR '{user / 'dangling'}' (a link to '{user / 'gone/x/out'}'): its folder '{user / 'gone/x'}'"
        f" does not exist; create it first (mkdir -p {user / 'gone/x'}) or choose another OUT_DIR"
    )
    assert not (user / "gone").exists()
    (user / "dangling").unlink()
    # OUT_DIR itself is made when its parent exists, as before
    ok = cli("pack-shards", "images", "meta.jsonl", "-o", "fresh", "-j", "1", "-q", cwd=user)
    assert ok.returncode == 0, ok.stderr
    assert (user / "fresh" / "shards.json").is_file()


def test_a_parent_that_is_a_file_is_named(user: Path) -> None:
    line = one_error_line(cli("pack-shards", "images", "meta.jsonl", "-o", "meta.jsonl/out", cwd=user))
    out, parent = user / "meta.jsonl/out", user / "meta.jsonl"
    assert line == f"error: OUT_DIR '{out}': '{parent}' is not a folder; choose another OUT_DIR"


@pytest.mark.slow
def test_missing_parents_of_every_folder_a_command_makes(user: Path, packed_template: Path) -> None:
    """shardkit new -o, --work-dir (pack and push), remux's OUT_DIR and --rejects' folder: each
    names the missing folder, exit code 2, nothing created."""
    before = tree(user)
    cases = [
        (
            ("new", "--no-input", "namespace=me", "dataset_name=x", "-o", "a/b/c"),
            f"-o '{user / 'a/b/c'}': its folder '{user / 'a/b'}' does not exist",
        ),
        (
            ("pack-shards", "images", "meta.jsonl", "-o", "s3://bucket/ds", "--work-dir", "w/x/work"),
            f"--work-dir '{user / 'w/x/work'}': its folder '{user / 'w/x'}' does not exist",
        ),
        (
            ("push", "s3://bucket/ds", "--repo", "me/x", "--work-dir", "w/x/work"),
            f"--work-dir '{user / 'w/x/work'}': its folder '{user / 'w/x'}' does not exist",
        ),
        (
            ("remux", packed_template, "r/s/out", "--map", "tests.remux_functions:identity"),
            f"OUT_DIR '{user / 'r/s/out'}': its folder '{user / 'r/s'}' does not exist",
        ),
        (
            ("pack-shards", "images", "meta.jsonl", "-o", "out", "--on-error", "skip", "--rejects", "j/k/r.jsonl"),
            "--rejects 'j/k/r.jsonl': its folder",
        ),
    ]
    for args, fragment in cases:
        line = one_error_line(cli(*args, cwd=user))
        assert fragment in line and "does not exist; create it first (mkdir -p " in line, line
        assert tree(user) == before
    made = cli("new", "--no-input", "namespace=me", "dataset_name=x", "-o", "new-here", cwd=user)
    assert made.returncode == 0, made.stderr
    assert (user / "new-here" / "x" / "README.md").is_file()


# --- verify NS/NAME ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_verify_reads_a_bare_hub_id_from_the_hub_and_a_local_folder_of_that_name_wins(
    packed_template: Path, tmp_path: Path
) -> None:
    with pushed_copy(packed_template, tmp_path) as (hub, _):
        env = hub_env(hub.url, tmp_path / "home", token=WRITE_TOKEN)
        here = tmp_path / "cwd"
        here.mkdir()
        result = cli("verify", REPO, cwd=here, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1].endswith(
            f": OK (the Hub dataset {REPO} at {hub.url}, hf://datasets/{REPO}: no folder {REPO} here)"
        )
        report = json.loads(cli("verify", REPO, "--json", cwd=here, env=env).stdout)
        assert report["ok"] and report["out_dir"] == f"hf://datasets/{REPO}" and report["shards"] == 16
        assert any(entry[1].endswith(".zip") for entry in hub.log.entries)

        # An id the Hub does not have: where it was looked for, in one line.
        line = one_error_line(cli("verify", "tester/nothere", cwd=here, env=env))
        assert line == (
            f"error: no folder tester/nothere here, and the Hub dataset tester/nothere (hf://datasets/tester/nothere"
            f" at {hub.url}) has no shards.json: nothing to verify (check the folder's name, or pack and push it first)"
        )
        # A folder of that name here wins, without a word: one of its shards gone is its problem.
        local = here / REPO
        shutil.copytree(packed_template, local, ignore=shutil.ignore_patterns("lock"))
        next(local.glob("data/*.zip")).unlink()
        hub.log.clear()
        result = cli("verify", REPO, cwd=here, env=env)
        assert result.returncode == 1 and "missing" in result.stdout and "Hub" not in result.stdout
        assert hub.log.entries == []

        # Not an id, and no such folder: click's refusal, as before.
        result = cli("verify", "no/such/folder", cwd=here, env=env)
        assert result.returncode == 2 and "Directory 'no/such/folder' does not exist" in result.stderr
        # A mistyped relative path that the Hub would not take as an id either: a missing folder,
        # with no request to the Hub.
        hub.log.clear()
        (here / "mine").mkdir()  # a folder here named as the id's namespace: mine/typo is a path
        for typo in ("../nothere", "tester/-x", "tester/a--b", "./nothere", "mine/typo"):
            result = cli("verify", typo, cwd=here, env=env)
            assert result.returncode == 2 and f"Directory '{typo}' does not exist" in result.stderr, typo
        assert hub.log.entries == []


# --- what verify says to do --------------------------------------------------------------------------


def flip_byte(path: Path, offset: int, *, keep_time: bool) -> None:
    """Damage one byte of ``path`` in place; ``keep_time``: as a disk's bit rot does, with its
    size and modification time as they were."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))
    if keep_time:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def advice(result: subprocess.CompletedProcess[str]) -> str:
    """verify's last line: what to do."""
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("to repair: "), result.stdout
    return last


def shards_of(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "data").glob("*.zip"))}


@pytest.mark.slow
def test_verify_says_how_to_repair_and_the_re_run_pack_does_it(user: Path) -> None:
    pack: list[Any] = ["pack-shards", "images", "meta.jsonl", "-o", "out", "--target-shard-size", "2KB", "-j", "1"]
    assert cli(*pack, "-q", cwd=user).returncode == 0
    out = user / "out"
    original = shards_of(out)
    assert len(original) >= 4
    gone, truncated, edited, rotted = (out / "data" / name for name in list(original)[-4:])
    flip_byte(rotted, rotted.stat().st_size - 200, keep_time=True)  # its size and time kept
    os.truncate(truncated, truncated.stat().st_size - 10)
    gone.unlink()
    flip_byte(edited, edited.stat().st_size - 200, keep_time=False)  # rewritten by something: a new time

    line = advice(cli("verify", "out", cwd=user))
    damaged = [rotted, truncated, edited]
    assert line == (
        f"to repair: rm {' '.join(shlex.quote(str(p)) for p in sorted(damaged))} (pack keeps a shard whose size and"
        " time are as written, and damage can leave them so); then re-run the same pack command: it writes again"
        " every shard that is missing or whose size or time changed, and keeps the others"
    )

    # What the advice rests on: a re-run alone writes the missing, truncated and edited shards
    # again, and keeps the one damaged with its size and time, which verify still finds.
    rerun = cli(*pack, "-q", cwd=user)
    assert rerun.returncode == 0, rerun.stderr
    for path in (truncated, gone, edited):
        assert path.read_bytes() == original[path.name]
    assert rotted.read_bytes() != original[rotted.name]
    still = cli("verify", "out", cwd=user)
    assert still.returncode == 1 and f"rm {rotted}" in advice(still)

    # Doing what it says repairs the dataset: the same bytes as packed first, and verify is OK.
    rm = advice(still).removeprefix("to repair: ").split(" (", 1)[0]
    subprocess.run(shlex.split(rm), cwd=user, check=True)
    repaired = cli(*pack, "-q", cwd=user)
    assert repaired.returncode == 0, repaired.stderr
    assert shards_of(out) == original
    ok = cli("verify", "out", cwd=user)
    assert ok.returncode == 0 and ok.stdout.strip().endswith(": OK") and "to repair" not in ok.stdout


@pytest.mark.slow
def test_verify_advice_for_files_the_manifest_does_not_name(user: Path) -> None:
    assert cli("pack-shards", "images", "meta.jsonl", "-o", "out", "-j", "1", "-q", cwd=user).returncode == 0
    (user / "out" / "data" / "notes.csv").write_text("a,b\n")
    line = advice(cli("verify", "out", cwd=user))
    assert (
        line == "to repair: move data/notes.csv out of data/ and metadata/ (shardkit removes no file it did not write)"
    )
    (user / "out" / "data" / "notes.csv").unlink()
    assert cli("verify", "out", cwd=user).returncode == 0


@pytest.mark.slow
def test_verify_of_a_damaged_hub_dataset_says_to_push_a_local_copy_and_that_repairs_it(
    packed_template: Path, tmp_path: Path
) -> None:
    with pushed_copy(packed_template, tmp_path) as (hub, _):
        env = hub_env(hub.url, tmp_path / "home", token=WRITE_TOKEN)
        copy = tmp_path / packed_template.name
        shard = sorted((copy / "data").glob("*.zip"))[3]
        rel = shard.relative_to(copy).as_posix()
        # Someone uploads other bytes at a shard's name (the manifest still records the packed ones).
        damaged = tmp_path / "damaged.zip"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        damaged.write_bytes(data)
        upload = (
            "import sys; from huggingface_hub import HfApi;"
            " HfApi().upload_file(path_or_fileobj=sys.argv[1], path_in_repo=sys.argv[2], repo_id=sys.argv[3],"
            " repo_type='dataset')"
        )
        subprocess.run([sys.executable, "-c", upload, damaged, rel, REPO], env=env, check=True, capture_output=True)
        line = advice(cli("verify", REPO, cwd=tmp_path, env=env))
        assert line == (
            "to repair: pack the same input into a local FOLDER (or repair the one it was packed in, as `shardkit"
            f" verify FOLDER` says), then `shardkit push FOLDER --repo {REPO}`: push uploads every file whose"
            " sha256 differs"
        )
        pushed = cli("push", copy, "--repo", REPO, "-q", cwd=tmp_path, env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert hub.read_file(REPO, rel, "main") == shard.read_bytes()
        assert cli("verify", REPO, cwd=tmp_path, env=env).returncode == 0


@pytest.mark.slow
def test_verify_of_an_out_dir_url_says_to_remove_the_damaged_objects_and_re_run_the_pack(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """At an OUT_DIR URL a re-run of pack compares each kept shard by its size alone (reading a
    bucket back would cost as much as the pack): the advice says so, and doing it repairs."""
    fs, env = request.getfixturevalue("s3")  # a fresh bucket on moto's S3 server
    url = "s3://bkt/yfcc-mini"
    pack = ["--work-dir", str(tmp_path / "work"), "-q"]
    assert pack_example(url, *pack, env=env).returncode == 0
    original = objects(fs, "bkt/yfcc-mini")
    data = bytearray(original["data/3.zip"])
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file("bkt/yfcc-mini/data/3.zip", bytes(data))  # other bytes, the same size
    fs.rm_file("bkt/yfcc-mini/data/5.zip")
    line = advice(cli("verify", url, cwd=tmp_path, env=env))
    assert line == (
        f"to repair: remove {url}/data/3.zip (pack keeps a shard whose size is as written, and damage can leave"
        " it so); then re-run the same pack command: it writes again every shard that is missing or whose size"
        " changed, and keeps the others"
    )
    assert pack_example(url, *pack, env=env).returncode == 0
    assert "data/3.zip" in advice(cli("verify", url, cwd=tmp_path, env=env))  # kept, as the line says
    fs.rm_file("bkt/yfcc-mini/data/3.zip")
    assert pack_example(url, *pack, env=env).returncode == 0
    assert objects(fs, "bkt/yfcc-mini") == original
    assert cli("verify", url, cwd=tmp_path, env=env).returncode == 0
