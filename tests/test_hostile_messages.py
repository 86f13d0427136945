"""Other hostile cases, each one line naming the file (and line, or shard and member), a non-zero
exit, no traceback, and the disk left as it was: damaged or misnamed compressed metadata, a
decompression bomb, a full disk (a real one: a small tmpfs) anywhere in a pack, an update or a
remux, and Ctrl-C while the worker pool starts (held there by tests/hold_pool_start)."""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import json
import lzma
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from tests.support.cli import run_cli
from tests.support.corpus import REPO_ROOT, Corpus, tree_bytes

BIN = Path(sys.executable).parent
PACK_SHARDS = str(BIN / "pack-shards")
SHARDKIT = str(BIN / "shardkit")


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command in a process of its own: where it needs an environment of its own, where its worker processes'
    stderr or Python's warnings on stderr are what the test reads, or where a wrong read would hang. Every other
    run is :func:`run_cli`'s, in this process (the cases are many, each a run)."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=600, check=False)


def python_path(first: Path) -> str:
    """PYTHONPATH with ``first`` before the folders it holds (the code under test among them)."""
    return os.pathsep.join([str(first), os.environ.get("PYTHONPATH", "")])


def one_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The run's one line on stderr, after checking it failed with it alone."""
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- metadata that is damaged or compressed otherwise than its name says -------------------------


def _gz(corpus: Corpus) -> bytes:
    return gzip.compress(corpus.meta.read_bytes())


def _damaged_deflate(corpus: Corpus) -> bytes:
    data = bytearray(_gz(corpus))
    data[10] = 0xFF  # the first deflate block's header: a block type that does not exist (3)
    return bytes(data)


def _bad_crc(corpus: Corpus) -> bytes:
    data = bytearray(_gz(corpus))
    data[-8] ^= 0xFF  # the trailer's CRC-32
    return bytes(data)


def _zstd_like(corpus: Corpus) -> bytes:
    return b"\x28\xb5\x2f\xfd" + os.urandom(200)  # zstd's magic number, then frames


# (case, the file's name, its bytes, what the line says after the file's path: a regular
# expression, as the line a damaged stream is noticed on depends on zlib's buffering)
METADATA_CASES: list[tuple[str, str, Callable[[Corpus], bytes], str]] = [
    (
        "truncated gzip",
        "meta.jsonl.gz",
        lambda c: _gz(c)[:-30],
        r":\d+: the gzip data ends early \(the file is truncated\)$",
    ),
    ("cut in the header", "meta.jsonl.gz", lambda c: _gz(c)[:5], r":1: the gzip data ends early"),
    ("text named .gz", "meta.jsonl.gz", lambda c: c.meta.read_bytes(), r": not gzip data \(it starts with b'\{\"fi'\)"),
    ("trailing garbage", "meta.jsonl.gz", lambda c: _gz(c) + b"garbage!", r":41: bytes after the end of the gzip data"),
    ("bad CRC", "meta.jsonl.gz", _bad_crc, r":41: damaged gzip data \(CRC check failed"),
    ("damaged deflate data", "meta.jsonl.gz", _damaged_deflate, r":1: damaged gzip data \(Error -3"),
    ("bzip2 named .gz", "meta.jsonl.gz", lambda c: bz2.compress(c.meta.read_bytes()), r": bzip2 data, though"),
    ("bzip2 named .jsonl", "meta.jsonl", lambda c: bz2.compress(c.meta.read_bytes()), r": bzip2-compressed data"),
    ("xz named .jsonl", "meta.jsonl", lambda c: lzma.compress(c.meta.read_bytes()), r": xz-compressed data"),
    ("zstd named .jsonl", "meta.jsonl", _zstd_like, r": zstd-compressed data, not JSON lines"),
    ("gzip named .jsonl", "meta.jsonl", _gz, r": gzip-compressed data, not JSON lines; name it \.jsonl\.gz$"),
    ("empty .gz", "meta.jsonl.gz", lambda c: b"", r": the file is empty: no rows to pack$"),
]


@pytest.mark.parametrize(
    ("name", "make", "expected"), [c[1:] for c in METADATA_CASES], ids=[c[0] for c in METADATA_CASES]
)
def test_damaged_or_misnamed_compressed_metadata_is_one_line_naming_the_file(
    corpus: Corpus, tmp_path: Path, name: str, make: Callable[[Corpus], bytes], expected: str
) -> None:
    meta = tmp_path / "given" / name
    meta.parent.mkdir()
    meta.write_bytes(make(corpus))
    out = tmp_path / "out"
    line = one_error(run_cli("pack-shards", corpus.images, meta, "-o", out, "-q", "-j", "1"))
    assert line.startswith("error: ") and re.search(re.escape(meta.name) + expected, line), line
    assert not out.exists()  # nothing was left behind


def test_a_compressed_file_split_in_ranges_is_one_line(corpus: Corpus, tmp_path: Path) -> None:
    """A misnamed .jsonl large enough to be checked in ranges by worker processes: the first
    range refuses it; the others' lines of noise are not each reported."""
    meta = tmp_path / "big.jsonl"
    meta.write_bytes(b"BZh91AY&SY" + random.Random(0).randbytes(5 << 20))
    out = tmp_path / "out"
    line = one_error(run(PACK_SHARDS, corpus.images, meta, "-o", out, "-q", "-j", "2"))
    fix = "decompress it (or give it gzip-compressed, as .jsonl.gz)"
    assert line == f"error: {meta}: bzip2-compressed data, not JSON lines; {fix}"
    assert not out.exists()


@pytest.mark.parametrize("tail", [b"", b"\0" * 64], ids=["two members", "zero padding"])
def test_gzip_that_gzip_reads_is_packed(corpus: Corpus, tmp_path: Path, tail: bytes) -> None:
    half = len(corpus.rows) // 2
    lines = corpus.meta.read_bytes().splitlines(keepends=True)
    meta = tmp_path / "meta.jsonl.gz"
    meta.write_bytes(gzip.compress(b"".join(lines[:half])) + gzip.compress(b"".join(lines[half:])) + tail)
    proc = run_cli("pack-shards", corpus.images, meta, "-o", tmp_path / "out", "--json", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == len(corpus.rows)


@pytest.mark.parametrize("name", ["meta.jsonl", "meta.jsonl.gz"])
def test_metadata_read_from_a_fifo_is_read_once(corpus: Corpus, tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    data = corpus.meta.read_bytes()
    data = gzip.compress(data) if name.endswith(".gz") else data

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    feeder = threading.Thread(target=feed)
    feeder.start()
    proc = run(PACK_SHARDS, corpus.images, fifo, "-o", tmp_path / "out", "--json", "-j", "1")
    feeder.join()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == len(corpus.rows)


def test_a_directory_as_metadata_is_one_line_naming_it(corpus: Corpus, tmp_path: Path) -> None:
    folder = tmp_path / "meta.jsonl"
    folder.mkdir()
    proc = run_cli("pack-shards", corpus.images, folder, "-o", tmp_path / "out")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == [f"Error: Invalid value for 'META_JSONL': File '{folder}' is a directory."]
    assert not (tmp_path / "out").exists()


def test_a_directory_as_metadata_through_the_library_names_it(corpus: Corpus, tmp_path: Path) -> None:
    from shardkit.pack import PackConfig, pack

    folder = tmp_path / "meta.jsonl.gz"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        pack(PackConfig(images_dir=str(corpus.images), metadata_path=str(folder), out_dir=str(tmp_path / "out")))
    assert caught.value.filename == str(folder)
    assert not (tmp_path / "out").exists()


# --- decompression bombs --------------------------------------------------------------------------


def _png(size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("1", size).save(buf, "PNG")  # a few KB of PNG declaring that many pixels
    return buf.getvalue()


#: Pillow refuses above twice MAX_IMAGE_PIXELS (an error) and only warns above it: both are bombs.
BOMBS = {"over the error limit": (30_000, 30_000), "over the warning limit": (12_000, 12_000)}


@pytest.fixture(params=list(BOMBS), ids=list(BOMBS))
def bomb_corpus(request: pytest.FixtureRequest, make_corpus: Callable[..., Corpus]) -> Corpus:
    corpus: Corpus = make_corpus(6)
    (corpus.images / "bomb.png").write_bytes(_png(BOMBS[request.param]))
    corpus.meta = corpus.write_meta([*corpus.rows[:3], {"file_name": "bomb.png", "n": 1}, *corpus.rows[3:]])
    return corpus


@pytest.mark.slow
def test_check_images_refuses_a_decompression_bomb_naming_file_and_line(bomb_corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(PACK_SHARDS, bomb_corpus.images, bomb_corpus.meta, "-o", out, "--check-images", "-q", "-j", "1")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Warning" not in proc.stderr
    problems = [line for line in proc.stderr.splitlines() if line.startswith(f"{bomb_corpus.meta}:")]
    assert len(problems) == 1, proc.stderr
    bomb = bomb_corpus.images / "bomb.png"
    assert problems[0].startswith(f"{bomb_corpus.meta}:4: {bomb}: is refused as a decompression bomb: Image size (")
    assert not out.exists()


@pytest.mark.slow
def test_check_images_with_skip_rejects_the_bomb_and_packs_the_rest(bomb_corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run(
        PACK_SHARDS, bomb_corpus.images, bomb_corpus.meta, "-o", out, "--check-images", "--on-error", "skip", "--json"
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "Warning" not in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == 6 and summary["rejected_rows"] == 1
    rejects = [json.loads(line) for line in Path(summary["rejects_file"]).read_text().splitlines()]
    assert [(r["line"], "decompression bomb" in r["reason"]) for r in rejects] == [(4, True)]


@pytest.mark.slow
def test_verify_deep_refuses_a_decompression_bomb_naming_shard_and_member(bomb_corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "out"
    packed = run_cli("pack-shards", bomb_corpus.images, bomb_corpus.meta, "-o", out, "-q", "-j", "1")  # not decoded
    assert packed.returncode == 0, packed.stderr
    proc = run(SHARDKIT, "verify", out, "--deep", "-q")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if "decompression bomb" in line]
    assert len(problems) == 1 and problems[0].startswith("data/") and ".zip: images/" in problems[0], problems
    assert ".png: is refused as a decompression bomb: " in problems[0]


@pytest.mark.slow
def test_remux_refuses_an_image_over_the_warning_limit(tmp_path: Path) -> None:
    from tests.test_remux_hostile import image_parquet

    source = image_parquet(tmp_path / "src.parquet", [{"bytes": _png((12_000, 12_000)), "path": "bomb.png"}])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": python_path(REPO_ROOT)}
    proc = run(SHARDKIT, "remux", source, out, "--map", "tests.remux_functions:identity", "-q", "-j", "1", env=env)
    line = one_error(proc)  # (Pillow's warning is not printed besides it)
    assert "split 'train', row 0: column 'image' does not open as an image: DecompressionBombWarning" in line
    assert not list(out.glob("data/*"))


# --- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``small_disk("700k")``: a new tmpfs of that size (a real filesystem that fills up);
    unmounted at the end of the test."""
    mounts: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", str(where)], check=True)


def grow(disk: Path) -> None:
    """Free space, as a user would before running the command again."""
    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)


@pytest.fixture(scope="module")
def weighty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """300 images of noise (4 KB each, incompressible) and rows with 2 KB captions: enough that a
    disk of a few MB fills in any phase of a pack."""
    root = tmp_path_factory.mktemp("weighty")
    images = root / "images"
    images.mkdir()
    rng = random.Random(1)
    rows = []
    for i in range(300):
        buf = io.BytesIO()
        Image.frombytes("L", (64, 64), rng.randbytes(64 * 64)).save(buf, "PNG")
        (images / f"{i}.png").write_bytes(buf.getvalue())
        rows.append({"file_name": f"{i}.png", "caption": "x" * 2000 + str(i)})
    meta = root / "meta.jsonl"
    meta.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return images, meta


SHAPE = ["-q", "-j", "1", "--target-shard-size", "200KB"]


@pytest.fixture(scope="module")
def weighty_packed(weighty: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``weighty`` packed with SHAPE on a disk with room: what each full-disk pack must end as,
    and the source of the full-disk remux. Made once; the tests only read it."""
    images, meta = weighty
    packed = tmp_path_factory.mktemp("reference") / "out"  # (the card is named after the folder)
    result = run_cli("pack-shards", images, meta, "-o", packed, *SHAPE)
    assert result.returncode == 0, result.stderr
    return packed


def remux_command(source: Path) -> tuple[list[str], dict[str, str]]:
    """The full-disk remux (an identity map in SHAPE) of ``source``, and its environment; the
    output folder goes last."""
    env = {**os.environ, "PYTHONPATH": python_path(REPO_ROOT)}
    return [SHARDKIT, "remux", str(source), "--map", "tests.remux_functions:identity", *SHAPE], env


@pytest.fixture(scope="module")
def weighty_remuxed(weighty_packed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``weighty_packed`` remuxed on a disk with room: what each full-disk remux must end as."""
    remux, env = remux_command(weighty_packed)
    remuxed = tmp_path_factory.mktemp("remuxed") / "out"  # (the card is named after the folder)
    result = run(*remux, remuxed, env=env)
    assert result.returncode == 0, result.stderr
    return remuxed


_FULL = "No space left on device; free some space, then re-run the same command"


def _left_only_own_state(out: Path, reference: Path) -> None:
    """What a failed run leaves: finished files as the whole run writes them (shards and their
    metadata), and shardkit's own resumable state under .shardkit (no partial file)."""
    for path in out.rglob("*"):
        rel = path.relative_to(out)
        if path.is_file() and rel.parts[0] != ".shardkit":
            assert path.read_bytes() == (reference / rel).read_bytes(), rel
    assert not list(out.glob(".shardkit/tmp/*"))


# Disk sizes that fill during the check (staging runs), the merge, the tables and the shards.
@pytest.mark.slow
@pytest.mark.parametrize("size", ["64k", "700k", "1310k", "1400k", "1600k", "2400k"])
def test_a_full_disk_anywhere_in_a_pack_names_the_file_and_the_rerun_completes(
    weighty: tuple[Path, Path], weighty_packed: Path, small_disk: Callable[[str], Path], size: str
) -> None:
    images, meta = weighty
    reference = weighty_packed
    disk = small_disk(size)
    out = disk / "out"
    line = one_error(run_cli("pack-shards", images, meta, "-o", out, *SHAPE))
    assert line.startswith(f"error: {out}/.shardkit/") and _FULL in line, line
    if out.exists():  # (a failed check phase takes away the folder it made)
        _left_only_own_state(out, reference)
    grow(disk)
    rerun = run_cli("pack-shards", images, meta, "-o", out, *SHAPE)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(out) == tree_bytes(reference)


@pytest.mark.parametrize("ranges", [False, True], ids=["in this process", "ranges in worker processes"])
def test_a_full_disk_in_the_check_phase_leaves_nothing(
    weighty: tuple[Path, Path], tmp_path: Path, small_disk: Callable[[str], Path], ranges: bool
) -> None:
    images, meta = weighty
    staged = ".shardkit/staging/"
    if ranges:
        rows = [json.loads(line) for line in meta.read_text().splitlines()]
        meta = tmp_path / "big.jsonl"  # 2.7 MB: checked in ranges, by worker processes
        meta.write_text("".join(json.dumps({**r, "more": "y" * 7000}) + "\n" for r in rows))
        staged += "ranges/range-0000"
    disk = small_disk("700k" if ranges else "64k")
    args = (images, meta, "-o", disk / "out", "-q", "-j", "2" if ranges else "1")
    # The ranges' workers in a process of its own: their stderr is then the run's.
    line = one_error(run(PACK_SHARDS, *args) if ranges else run_cli("pack-shards", *args))
    assert line.startswith(f"error: {disk}/out/{staged}") and _FULL in line, line
    assert list(disk.iterdir()) == []


@pytest.mark.slow
def test_a_full_disk_during_an_update_names_the_file_and_the_rerun_completes(
    weighty: tuple[Path, Path], tmp_path: Path, small_disk: Callable[[str], Path]
) -> None:
    images, meta = weighty
    half = tmp_path / "half.jsonl"
    half.write_text("".join(meta.read_text().splitlines(keepends=True)[:150]))
    reference = tmp_path / "reference" / "out"  # (the card is named after the folder)
    reference.parent.mkdir()
    assert run_cli("pack-shards", images, half, "-o", reference, *SHAPE).returncode == 0
    assert run_cli("pack-shards", images, meta, "-o", reference, "--update", *SHAPE).returncode == 0
    disk = small_disk("3000k")
    out = disk / "out"
    first = run_cli("pack-shards", images, half, "-o", out, *SHAPE)
    assert first.returncode == 0, first.stderr
    line = one_error(run_cli("pack-shards", images, meta, "-o", out, "--update", *SHAPE))
    assert line.startswith(f"error: {out}/.shardkit/") and _FULL in line, line
    grow(disk)
    rerun = run_cli("pack-shards", images, meta, "-o", out, "--update", *SHAPE)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(out) == tree_bytes(reference)


@pytest.mark.slow
@pytest.mark.parametrize("size", ["1000k", "2500k"])  # full as the files are transformed; as they are packed
def test_a_full_disk_during_a_remux_names_the_file_and_the_rerun_completes(
    weighty_packed: Path, weighty_remuxed: Path, small_disk: Callable[[str], Path], size: str
) -> None:
    remux, env = remux_command(weighty_packed)
    reference = weighty_remuxed
    disk = small_disk(size)
    out = disk / "out"
    line = one_error(run(*remux, out, env=env))
    assert line.startswith(f"error: {out}/.shardkit/") and _FULL in line, line
    assert not (out / "shards.json").exists() and not list(out.glob("data/*"))
    grow(disk)
    rerun = run(*remux, out, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(out) == tree_bytes(reference)


def test_a_full_disk_under_the_rejects_file_names_it(
    corpus: Corpus, tmp_path: Path, small_disk: Callable[[str], Path]
) -> None:
    rows = [*corpus.rows, *({"file_name": f"missing/{i}.jpg", "note": "y" * 4000} for i in range(200))]
    meta = corpus.write_meta(rows, "many-bad.jsonl")
    disk = small_disk("64k")
    rejects = disk / "rejects.jsonl"
    out = tmp_path / "out"
    proc = run_cli(
        "pack-shards", corpus.images, meta, "-o", out, "--on-error", "skip", "--rejects", rejects, "-q", "-j", "1"
    )
    line = one_error(proc)
    assert line.startswith(f"error: {rejects}: ") and _FULL in line, line
    assert not out.exists()


# --- Ctrl-C while the worker pool starts ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["forkserver", "worker"])
def test_ctrl_c_while_the_pool_starts_is_one_line_and_the_rerun_completes(
    make_corpus: Callable[..., Corpus], tmp_path: Path, where: str
) -> None:
    """The forkserver (importing the task modules) or a worker (before its signal handlers are
    set) is held at that point until the test lets it go; the Ctrl-C comes while it is held."""
    corpus = make_corpus(40, with_keys=True)
    out = tmp_path / "out"
    hold = tmp_path / "hold"
    hold.mkdir()
    os.mkfifo(hold / "release")
    shape = ["-j", "2", "-q", "--target-shard-size", "4KB", "--max-shard-size", "8KB"]  # shards for a pool
    cmd = [PACK_SHARDS, str(corpus.images), str(corpus.meta), "-o", str(out), *shape]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent / "hold_pool_start"), os.environ.get("PYTHONPATH", "")]
        ),
        "SHARDKIT_TEST_HOLD": where,
        "SHARDKIT_TEST_HOLD_DIR": str(hold),
    }
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        while not (hold / "held").exists():  # waits for the event, whatever the machine's speed
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            threading.Event().wait(0.01)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole process group
        proc.wait(timeout=120)
    finally:
        try:  # let the held process go on (a forkserver then sees its parent gone and leaves)
            release = os.open(hold / "release", os.O_WRONLY | os.O_NONBLOCK)
            os.write(release, b"go")
            os.close(release)
        except OSError as exc:
            assert exc.errno == errno.ENXIO  # nobody is held any more (a stopped worker is gone)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)  # to the end: the forkserver's stderr is this pipe too
    assert proc.returncode == 130, stderr
    assert stderr == "interrupted; re-run the same command to resume\n"  # no traceback from any process
    assert not list(out.glob(".shardkit/tmp/*.partial"))
    rerun = run_cli("pack-shards", *cmd[1:], "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["rows"] == 40


# Where a pack's last steps write, each filled at that point (tests/fill_disk_at): the shards'
# tables, the manifest, the card, the preview.
FINISH_WRITES = [
    "shardkit.packfinish:write_metadata_table",
    "shardkit.packfinish:write_manifest",
    "shardkit.card.frontmatter:write_atomic",
    "shardkit.preview:write_atomic",
]


@pytest.mark.slow
@pytest.mark.parametrize("at", FINISH_WRITES)
def test_a_disk_full_in_the_last_steps_names_the_file_and_the_rerun_completes(
    make_corpus: Callable[..., Corpus], tmp_path: Path, small_disk: Callable[[str], Path], at: str
) -> None:
    corpus = make_corpus(40)
    reference = tmp_path / "reference" / "out"
    reference.parent.mkdir()
    assert run_cli("pack-shards", corpus.images, corpus.meta, "-o", reference, "-q", "-j", "1").returncode == 0
    disk = small_disk("4m")
    out = disk / "out"
    env = {
        **os.environ,
        "PYTHONPATH": python_path(Path(__file__).parent / "fill_disk_at"),
        "SHARDKIT_TEST_FILL_AT": at,
        "SHARDKIT_TEST_FILL_DISK": str(disk),
    }
    line = one_error(run(PACK_SHARDS, corpus.images, corpus.meta, "-o", out, "-q", "-j", "1", env=env))
    assert line.startswith(f"error: {out}/") and _FULL in line, line
    assert not list(out.glob("**/*.partial")) and not list(out.glob(".shardkit/tmp/*"))
    _left_only_own_state(out, reference)
    # The manifest is written last: a pack stopped before it is no dataset that verify passes
    # (and push would publish with the template's card, which no reader loads).
    assert not (out / "shards.json").exists()
    verify = run_cli("shardkit", "verify", out)
    assert verify.returncode == 2, verify.stdout  # no dataset there (or no folder: a pack that made it took it back)
    assert "has no shards.json: nothing to verify" in verify.stderr or "does not exist" in verify.stderr
    (disk / "filler").unlink()  # space freed
    rerun = run_cli("pack-shards", corpus.images, corpus.meta, "-o", out, "-q", "-j", "1")
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(out) == tree_bytes(reference)
